//! `memlife distill`'s decisions (seed 002 "Memory Consolidation (Episodic -> Semantic)"):
//! which episodes are ripe (older than `min_age_days`, salience under `max_salience`, live,
//! not kept forever, not emotional), how they group (complete linkage over cosine similarity,
//! a shared entity counting toward it: every two episodes of a group alike), which answers are
//! trusted (facts resting on two or more of the group's episodes), and the fact rows an answer
//! becomes. The job reads, asks the LLM layer (or the offline judge), plans with these and
//! writes: the facts, provenance links to their episodes, and the episodes archived.

use std::collections::{BTreeMap, BTreeSet};

use crate::rows::{MemoryRow, derived_id};

/// Seed 002's episodic-to-semantic settings.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct DistillParams {
    /// An episode this many days old or older may be distilled.
    pub min_age_days: f64,
    /// An episode whose salience is this or above stays an episode (it is still in use).
    pub max_salience: f64,
    /// A group of fewer episodes is not asked about.
    pub min_episodes: usize,
    /// The most episodes one group (one request) holds.
    pub max_episodes: usize,
    /// The cosine similarity every two episodes of a group reach (a shared entity adds
    /// `entity_bonus`, at most twice); unset: the embedding model's link threshold.
    pub similarity: Option<f32>,
    pub entity_bonus: f32,
}

impl Default for DistillParams {
    fn default() -> Self {
        DistillParams {
            min_age_days: 7.0,
            max_salience: 0.2,
            min_episodes: 3,
            max_episodes: 12,
            similarity: None,
            entity_bonus: 0.05,
        }
    }
}

impl DistillParams {
    pub fn validate(&self) -> Result<(), String> {
        if !(self.min_age_days >= 0.0 && self.min_age_days.is_finite()) {
            return Err(format!(
                "distill.min_age_days is {}; it must be a number of days >= 0",
                self.min_age_days
            ));
        }
        if !(0.0..=1.0).contains(&self.max_salience) {
            return Err(format!(
                "distill.max_salience is {}; it must be in [0, 1]",
                self.max_salience
            ));
        }
        if self.min_episodes < 2 || self.min_episodes > self.max_episodes {
            return Err(format!(
                "distill.min_episodes ({}) and max_episodes ({}) must satisfy 2 <= min <= max",
                self.min_episodes, self.max_episodes
            ));
        }
        if !(0.0..=0.5).contains(&self.entity_bonus) {
            return Err(format!(
                "distill.entity_bonus is {}; it must be in [0, 0.5]",
                self.entity_bonus
            ));
        }
        Ok(())
    }
}

/// What distill reads of a memory (times in microseconds).
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
pub struct EpisodeRow {
    pub id: String,
    pub user_id: String,
    pub kind: String,
    pub text: String,
    pub created_at: i64,
    pub salience: f64,
    pub importance: f64,
    pub emotional_salience: f64,
    pub ttl_policy: String,
    pub state: String,
    pub archived_at: Option<i64>,
    pub superseded_by: Option<String>,
    pub embedding_model: Option<String>,
}

/// Whether an episode is ripe at `now`: an episode, live and current, old enough, fading
/// (salience under the bound), not kept forever and not emotional (above 0.5: it stays the
/// experience it was, as prune keeps it).
pub fn is_candidate(row: &EpisodeRow, p: &DistillParams, now: i64) -> bool {
    let age_days = (now - row.created_at) as f64 / 86_400_000_000.0;
    row.kind == "episode"
        && row.archived_at.is_none()
        && row.state != "archived"
        && row.superseded_by.is_none()
        && row.ttl_policy != "keep_forever"
        && row.emotional_salience <= 0.5
        && row.salience < p.max_salience
        && age_days >= p.min_age_days
}

/// Groups of episodes (rows by index; unit vectors `dim` wide one after another; each row's
/// entity ids): complete linkage over the pairs whose cosine similarity, plus `entity_bonus`
/// per shared entity (at most two), reaches `threshold`; between `min_episodes` and
/// `max_episodes` each, the best-knit first.
pub fn groups(
    vectors: &[f32],
    dim: usize,
    entities: &[BTreeSet<String>],
    threshold: f32,
    p: &DistillParams,
) -> Vec<Vec<usize>> {
    let rows = vectors.len().checked_div(dim).unwrap_or(0);
    let mut pairs = Vec::new();
    for a in 0..rows {
        for b in a + 1..rows {
            let cosine = crate::similarity::dot(
                &vectors[a * dim..(a + 1) * dim],
                &vectors[b * dim..(b + 1) * dim],
            );
            let shared = match (entities.get(a), entities.get(b)) {
                (Some(x), Some(y)) => x.intersection(y).count().min(2),
                _ => 0,
            };
            let score = cosine + p.entity_bonus * shared as f32;
            if score >= threshold {
                pairs.push((score, a as u32, b as u32));
            }
        }
    }
    crate::cluster::agglomerate(rows, &pairs, p.max_episodes)
        .into_iter()
        .filter(|g| g.len() >= p.min_episodes)
        .collect()
}

/// The key of `user`'s group of these episodes: derived from them, so a group asked about
/// once is known again.
pub fn group_key(user: &str, episodes: &[&str]) -> String {
    let mut ids: Vec<&str> = episodes.to_vec();
    ids.sort_unstable();
    derived_id(&format!("distill|{user}|{}", ids.join("|")))
}

/// One semantic fact as the LLM layer (or the offline judge) gives it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DistilledFact {
    pub text: String,
    pub source_ids: Vec<String>,
}

/// The facts of an answer that are trusted: non-empty, resting on two or more distinct
/// episodes of the group (one episode is not a generalisation), with what was refused and why.
pub fn trusted(facts: &[DistilledFact], group: &[&str]) -> (Vec<DistilledFact>, Vec<String>) {
    let mut kept = Vec::new();
    let mut refused = Vec::new();
    for f in facts {
        let sources: BTreeSet<&str> = f
            .source_ids
            .iter()
            .map(String::as_str)
            .filter(|id| group.contains(id))
            .collect();
        if f.text.trim().is_empty() {
            refused.push("an empty fact".to_string());
        } else if sources.len() != f.source_ids.iter().collect::<BTreeSet<_>>().len() {
            refused.push("a fact resting on an episode outside the group".to_string());
        } else if sources.len() < 2 {
            refused.push("a fact resting on one episode".to_string());
        } else {
            // Sources in the group's order.
            let ordered = group
                .iter()
                .filter(|id| sources.contains(*id))
                .map(|id| id.to_string())
                .collect();
            kept.push(DistilledFact {
                text: f.text.trim().to_string(),
                source_ids: ordered,
            });
        }
    }
    (kept, refused)
}

/// The fact memories of a group's trusted facts (without embeddings), written at `now`: kind
/// `fact`, source `distill`, dated when its newest episode was, as important as its most
/// important one, at the table's default salience (new knowledge), its episodes in
/// `consolidates_memory_ids`; ids derived from the group and the fact's place.
pub fn fact_rows(
    user: &str,
    key: &str,
    facts: &[DistilledFact],
    episodes: &BTreeMap<&str, &EpisodeRow>,
    confidence: f64,
    now: i64,
) -> Vec<MemoryRow> {
    facts
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let sources: Vec<&EpisodeRow> = f
                .source_ids
                .iter()
                .filter_map(|id| episodes.get(id.as_str()).copied())
                .collect();
            let created = sources.iter().map(|e| e.created_at).max().unwrap_or(now);
            let first = sources.iter().map(|e| e.created_at).min().unwrap_or(now);
            let importance = sources.iter().map(|e| e.importance).fold(0.5, f64::max);
            MemoryRow {
                id: derived_id(&format!("{key}|fact|{i}")),
                source: Some("distill".into()),
                importance,
                confidence: confidence.clamp(0.0, 1.0),
                valid_from: first,
                updated_at: now,
                consolidates_memory_ids: f.source_ids.clone(),
                ..MemoryRow::new(user, &f.text, created)
            }
        })
        .collect()
}

/// The episodes a group's facts rest on (each once, in the group's order): what is archived.
pub fn covered<'a>(group: &[&'a str], facts: &[DistilledFact]) -> Vec<&'a str> {
    group
        .iter()
        .copied()
        .filter(|id| facts.iter().any(|f| f.source_ids.iter().any(|s| s == id)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 86_400_000_000;

    fn episode(id: &str, created_day: i64) -> EpisodeRow {
        EpisodeRow {
            id: id.into(),
            user_id: "ana".into(),
            kind: "episode".into(),
            text: format!("text of {id}"),
            created_at: created_day * DAY,
            salience: 0.1,
            importance: 0.5,
            ttl_policy: "default".into(),
            state: "active".into(),
            ..Default::default()
        }
    }

    #[test]
    fn only_old_fading_live_unemotional_episodes_are_ripe() {
        let p = DistillParams::default();
        let now = 30 * DAY;
        let ripe = episode("e", 10);
        assert!(is_candidate(&ripe, &p, now));
        let cases: Vec<(&str, EpisodeRow)> = vec![
            ("young", episode("e", 25)),
            (
                "salient",
                EpisodeRow {
                    salience: 0.2,
                    ..ripe.clone()
                },
            ),
            (
                "a fact",
                EpisodeRow {
                    kind: "fact".into(),
                    ..ripe.clone()
                },
            ),
            (
                "archived",
                EpisodeRow {
                    archived_at: Some(1),
                    ..ripe.clone()
                },
            ),
            (
                "superseded",
                EpisodeRow {
                    superseded_by: Some("x".into()),
                    ..ripe.clone()
                },
            ),
            (
                "kept",
                EpisodeRow {
                    ttl_policy: "keep_forever".into(),
                    ..ripe.clone()
                },
            ),
            (
                "emotional",
                EpisodeRow {
                    emotional_salience: 0.6,
                    ..ripe.clone()
                },
            ),
        ];
        for (why, row) in cases {
            assert!(!is_candidate(&row, &p, now), "{why}");
        }
    }

    #[test]
    fn a_shared_entity_brings_episodes_together_that_words_alone_do_not() {
        let unit = |v: [f32; 2]| {
            let n = (v[0] * v[0] + v[1] * v[1]).sqrt();
            [v[0] / n, v[1] / n]
        };
        // Cosines 0.8 (0-1), 0.96 (1-2), 0.6 (0-2): under 0.65 alone, 0-2 keeps 0 out.
        let rows = [unit([1.0, 0.0]), unit([0.8, 0.6]), unit([0.6, 0.8])];
        let flat: Vec<f32> = rows.concat();
        let p = DistillParams::default();
        let none: Vec<BTreeSet<String>> = vec![BTreeSet::new(); 3];
        assert!(groups(&flat, 2, &none, 0.65, &p).is_empty());
        let shared: Vec<BTreeSet<String>> =
            vec![["ghent".to_string(), "train".to_string()].into(); 3];
        let mut found = groups(&flat, 2, &shared, 0.65, &p);
        found.iter_mut().for_each(|g| g.sort_unstable());
        assert_eq!(found, vec![vec![0, 1, 2]]);
    }

    #[test]
    fn facts_must_rest_on_two_episodes_of_the_group() {
        let group = ["a", "b", "c"];
        let fact = |text: &str, ids: &[&str]| DistilledFact {
            text: text.into(),
            source_ids: ids.iter().map(|s| s.to_string()).collect(),
        };
        let (kept, refused) = trusted(
            &[
                fact(" Ana commutes to Ghent by train. ", &["c", "a"]),
                fact("One-off", &["b"]),
                fact("Stranger", &["a", "z"]),
                fact(" ", &["a", "b"]),
            ],
            &group,
        );
        assert_eq!(
            kept,
            vec![fact("Ana commutes to Ghent by train.", &["a", "c"])]
        );
        assert_eq!(refused.len(), 3, "{refused:?}");
        assert_eq!(covered(&group, &kept), ["a", "c"], "b stays an episode");
    }

    #[test]
    fn a_fact_row_holds_its_episodes_and_their_time() {
        let (a, c) = (
            episode("a", 3),
            EpisodeRow {
                importance: 0.9,
                ..episode("c", 5)
            },
        );
        let by_id: BTreeMap<&str, &EpisodeRow> = [("a", &a), ("c", &c)].into();
        let facts = [DistilledFact {
            text: "Ana commutes to Ghent by train.".into(),
            source_ids: vec!["a".into(), "c".into()],
        }];
        let rows = fact_rows("ana", "k", &facts, &by_id, 0.7, 40 * DAY);
        let row = &rows[0];
        assert_eq!(
            (row.kind.as_str(), row.source.as_deref()),
            ("fact", Some("distill"))
        );
        assert_eq!(row.consolidates_memory_ids, ["a", "c"]);
        assert_eq!((row.valid_from, row.created_at), (3 * DAY, 5 * DAY));
        assert_eq!((row.importance, row.confidence), (0.9, 0.7));
        assert_eq!(row.id, derived_id("k|fact|0"));
        assert_eq!(group_key("ana", &["b", "a"]), group_key("ana", &["a", "b"]));
    }
}
