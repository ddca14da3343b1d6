//! `memlife insights`'s decisions (seed 004 "Insight Extractor"): which narratives are recent
//! (the lookback window), how they cluster by meaning (complete linkage over cosine
//! similarity, so every two narratives of a cluster are alike), which clusters are worth a
//! question (at least `min_cluster_size`, and not every narrative already the evidence of a
//! pattern), and the `learning_pattern` memory an answer becomes (evidence ids, confidence,
//! category). The job reads, asks the LLM layer (or the offline judge) for each cluster's
//! pattern, plans with these and writes.

use std::collections::{BTreeMap, BTreeSet};

use crate::rows::{MemoryRow, derived_id};

/// Seed 004's insight settings.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct InsightParams {
    /// Narratives created this many days before the clock, or less, are read.
    pub lookback_days: f64,
    /// A cluster of fewer narratives is not asked about.
    pub min_cluster_size: usize,
    /// The most narratives one cluster (one request) holds.
    pub max_cluster_size: usize,
    /// The cosine similarity every two narratives of a cluster reach; unset: the embedding
    /// model's link threshold (`[thresholds]`).
    pub similarity: Option<f32>,
}

impl Default for InsightParams {
    fn default() -> Self {
        InsightParams {
            lookback_days: 7.0,
            min_cluster_size: 3,
            max_cluster_size: 12,
            similarity: None,
        }
    }
}

impl InsightParams {
    pub fn validate(&self) -> Result<(), String> {
        if !(self.lookback_days > 0.0 && self.lookback_days.is_finite()) {
            return Err(format!(
                "insights.lookback_days is {}; it must be a number of days > 0",
                self.lookback_days
            ));
        }
        if self.min_cluster_size < 2 || self.min_cluster_size > self.max_cluster_size {
            return Err(format!(
                "insights.min_cluster_size ({}) and max_cluster_size ({}) must satisfy 2 <= min <= max",
                self.min_cluster_size, self.max_cluster_size
            ));
        }
        if let Some(s) = self.similarity
            && !(s > -1.0 && s <= 1.0)
        {
            return Err(format!(
                "insights.similarity is {s}; it must be a cosine similarity in (-1, 1]"
            ));
        }
        Ok(())
    }

    /// The earliest creation time (microseconds) a narrative read at `now` may have.
    pub fn since(&self, now: i64) -> i64 {
        now - (self.lookback_days * 86_400_000_000.0) as i64
    }
}

/// The categories a pattern may have (seed 004 names the first three).
pub const CATEGORIES: &[&str] = &[
    "ontological",
    "relational",
    "capability",
    "preference",
    "habit",
    "emotional",
    "topic",
];

/// Clusters of narratives alike by meaning: complete linkage over the pairs whose cosine
/// similarity (of unit vectors, `dim` wide, one after another) reaches `threshold`, at most
/// `p.max_cluster_size` each, and at least `p.min_cluster_size`; rows by index, the
/// best-knit cluster first.
pub fn clusters(vectors: &[f32], dim: usize, threshold: f32, p: &InsightParams) -> Vec<Vec<usize>> {
    let rows = vectors.len().checked_div(dim).unwrap_or(0);
    let mut pairs = Vec::new();
    for a in 0..rows {
        for b in a + 1..rows {
            let score = crate::similarity::dot(
                &vectors[a * dim..(a + 1) * dim],
                &vectors[b * dim..(b + 1) * dim],
            );
            if score >= threshold {
                pairs.push((score, a as u32, b as u32));
            }
        }
    }
    crate::cluster::agglomerate(rows, &pairs, p.max_cluster_size)
        .into_iter()
        .filter(|c| c.len() >= p.min_cluster_size)
        .collect()
}

/// Whether a cluster is new to the patterns: some narrative of it is the evidence of no
/// pattern yet (`evidence`: every narrative id some live pattern holds). A cluster all of
/// whose narratives a pattern already rests on is not asked about again.
pub fn is_new(cluster: &[&str], evidence: &BTreeSet<String>) -> bool {
    cluster.iter().any(|id| !evidence.contains(*id))
}

/// The id of the pattern `user`'s cluster of these narratives gave: derived from its
/// narratives, so asking about the same cluster again writes the same row.
pub fn pattern_id(user: &str, cluster: &[&str]) -> String {
    let mut ids: Vec<&str> = cluster.to_vec();
    ids.sort_unstable();
    derived_id(&format!("pattern|{user}|{}", ids.join("|")))
}

/// A pattern as the LLM layer (or the offline judge) gives it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PatternParts {
    pub pattern: String,
    pub category: String,
    pub confidence: f64,
    /// The narratives it rests on: a subset of the cluster's.
    pub evidence_ids: Vec<String>,
}

/// Why a pattern is not written: none found, or evidence outside the cluster or too thin
/// (fewer than two narratives: one session is not a recurrence).
pub fn refusal(parts: &PatternParts, cluster: &[&str]) -> Option<String> {
    if parts.pattern.trim().is_empty() {
        return Some("no recurring pattern".into());
    }
    if let Some(stranger) = parts
        .evidence_ids
        .iter()
        .find(|id| !cluster.contains(&id.as_str()))
    {
        return Some(format!(
            "evidence {stranger} is not a narrative of the cluster"
        ));
    }
    let distinct: BTreeSet<&String> = parts.evidence_ids.iter().collect();
    if distinct.len() < 2 {
        return Some(format!(
            "the pattern rests on {} narrative(s); a recurrence needs two",
            distinct.len()
        ));
    }
    if !CATEGORIES.contains(&parts.category.as_str()) {
        return Some(format!("unknown category {:?}", parts.category));
    }
    None
}

/// The `learning_pattern` memory of `user` at `now`: the pattern's text, its confidence, its
/// category as the tag `category:<name>`, its evidence (distinct, in the cluster's order) in
/// `consolidates_memory_ids` (so prune keeps them), as emotional as its most emotional
/// narrative (`emotional`: by narrative id).
pub fn pattern_row(
    user: &str,
    id: &str,
    parts: &PatternParts,
    cluster: &[&str],
    emotional: &BTreeMap<String, f64>,
    now: i64,
) -> MemoryRow {
    let evidence: Vec<String> = cluster
        .iter()
        .filter(|c| parts.evidence_ids.iter().any(|e| e == *c))
        .map(|c| c.to_string())
        .collect();
    let emotional_salience = evidence
        .iter()
        .filter_map(|e| emotional.get(e))
        .fold(0.0, |a: f64, b| a.max(*b));
    MemoryRow {
        id: id.to_string(),
        kind: "learning_pattern".into(),
        source: Some("insights".into()),
        confidence: parts.confidence.clamp(0.0, 1.0),
        importance: 0.6,
        emotional_salience,
        tags: vec![format!("category:{}", parts.category)],
        consolidates_memory_ids: evidence,
        updated_at: now,
        ..MemoryRow::new(user, parts.pattern.trim(), now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit(v: &[f32]) -> Vec<f32> {
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
        v.iter().map(|x| x / n).collect()
    }

    #[test]
    fn narratives_cluster_only_when_every_two_are_alike_and_small_clusters_are_left() {
        // Rows 0-2 close together; row 3 close to 2 only; rows 4-5 a pair.
        let rows = [
            unit(&[1.0, 0.0, 0.0]),
            unit(&[0.95, 0.1, 0.0]),
            unit(&[0.9, 0.3, 0.0]),
            unit(&[0.5, 0.9, 0.0]),
            unit(&[0.0, 0.0, 1.0]),
            unit(&[0.0, 0.1, 1.0]),
        ];
        let flat: Vec<f32> = rows.concat();
        let p = InsightParams::default();
        assert_eq!(clusters(&flat, 3, 0.8, &p), vec![vec![0, 1, 2]]);
        let pairs = InsightParams {
            min_cluster_size: 2,
            ..p.clone()
        };
        let found = clusters(&flat, 3, 0.8, &pairs);
        assert_eq!(found.len(), 2, "{found:?}");
        assert!(found.contains(&vec![4, 5]));
        let capped = InsightParams {
            max_cluster_size: 2,
            min_cluster_size: 2,
            ..p
        };
        assert!(
            clusters(&flat, 3, 0.8, &capped)
                .iter()
                .all(|c| c.len() == 2)
        );
    }

    #[test]
    fn a_cluster_is_asked_about_once_its_evidence_is_not_all_used() {
        let evidence: BTreeSet<String> = ["n1", "n2", "n3"].map(String::from).into();
        assert!(!is_new(&["n1", "n2", "n3"], &evidence));
        assert!(is_new(&["n1", "n2", "n4"], &evidence));
        assert_eq!(
            pattern_id("ana", &["n2", "n1", "n3"]),
            pattern_id("ana", &["n1", "n2", "n3"])
        );
        assert_ne!(
            pattern_id("ana", &["n1", "n2", "n3"]),
            pattern_id("ben", &["n1", "n2", "n3"])
        );
    }

    #[test]
    fn a_pattern_needs_text_two_narratives_of_the_cluster_and_a_known_category() {
        let cluster = ["n1", "n2", "n3"];
        let parts = |pattern: &str, category: &str, evidence: &[&str]| PatternParts {
            pattern: pattern.into(),
            category: category.into(),
            confidence: 0.7,
            evidence_ids: evidence.iter().map(|s| s.to_string()).collect(),
        };
        assert_eq!(
            refusal(
                &parts("Asks about trains", "habit", &["n1", "n3"]),
                &cluster
            ),
            None
        );
        let why = |p: PatternParts| refusal(&p, &cluster).unwrap();
        assert_eq!(
            why(parts(" ", "habit", &["n1", "n2"])),
            "no recurring pattern"
        );
        assert!(why(parts("x", "habit", &["n1", "n9"])).contains("n9"));
        assert!(why(parts("x", "habit", &["n1", "n1"])).contains("needs two"));
        assert!(why(parts("x", "mood", &["n1", "n2"])).contains("category"));
    }

    #[test]
    fn a_pattern_row_holds_its_evidence_category_and_confidence() {
        let cluster = ["n1", "n2", "n3"];
        let parts = PatternParts {
            pattern: " Plans trips around trains. ".into(),
            category: "habit".into(),
            confidence: 1.7,
            evidence_ids: vec!["n3".into(), "n1".into(), "n3".into()],
        };
        let emotional: BTreeMap<String, f64> = [
            ("n1".to_string(), 0.2),
            ("n2".to_string(), 0.9),
            ("n3".to_string(), 0.4),
        ]
        .into();
        let row = pattern_row("ana", "p1", &parts, &cluster, &emotional, 42);
        assert_eq!(row.kind, "learning_pattern");
        assert_eq!(row.text, "Plans trips around trains.");
        assert_eq!(row.consolidates_memory_ids, ["n1", "n3"]);
        assert_eq!(row.tags, ["category:habit"]);
        assert_eq!(row.confidence, 1.0, "clamped to [0, 1]");
        assert_eq!(row.emotional_salience, 0.4, "n2 is not its evidence");
        assert_eq!((row.created_at, row.updated_at), (42, 42));
    }

    #[test]
    fn the_window_and_the_sizes_are_checked() {
        let p = InsightParams::default();
        assert_eq!(p.since(8 * 86_400_000_000), 86_400_000_000);
        assert!(
            InsightParams {
                lookback_days: 0.0,
                ..p.clone()
            }
            .validate()
            .is_err()
        );
        assert!(
            InsightParams {
                min_cluster_size: 1,
                ..p.clone()
            }
            .validate()
            .is_err()
        );
        assert!(
            InsightParams {
                similarity: Some(1.5),
                ..p.clone()
            }
            .validate()
            .is_err()
        );
        assert!(p.validate().is_ok());
    }
}
