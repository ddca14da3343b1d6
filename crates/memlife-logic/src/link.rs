//! `memlife link`'s decisions without the store: which pairs of a user's memories are judged
//! (each memory's neighbours at or above the threshold, the newer memory as source, most
//! similar first, pairs judged before left out) and what the judge's verdicts write: a link
//! per typed verdict (`null` makes none), an audit row per pair, and the `supersedes` links
//! sure enough to become supersession chains. The job reads, asks the judge, plans with these
//! and writes.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;

use crate::rows::{AuditRow, LinkRow};
use crate::similarity::{Neighbour, SelfMatch, above_threshold, top_k};

/// What `link` found a memory's neighbours with: its vector bit for bit, the model that made
/// it and the options that decide its pairs (`k`, the threshold). A memory whose stored mark
/// is another (or none) is new to `link`: a new memory, a new vector, or new options.
pub fn link_mark(vector: &[f32], model: &str, k: usize, min_score: f32) -> i64 {
    let words = vector
        .iter()
        .map(|v| v.to_bits())
        .chain(model.bytes().map(u32::from))
        .chain([model.len() as u32, k as u32, min_score.to_bits()]);
    crate::hash::fnv1a_words(words) as i64
}

/// The neighbour lists of one user's memories that hold every candidate pair with a new end
/// (`fresh`), and no pair of two memories `link` has already looked at: a new memory's `k`
/// nearest, and the new memories among the `k` nearest of each older memory a new one comes
/// within `min_score` of (the only older memories whose nearest can now hold a new one).
/// `candidate_pairs` over them gives exactly the pairs a pass over every memory would, less
/// those between two older memories. Scores `fresh × all` vectors, not `all × all`; when
/// a quarter or more are new, `all_pairs` answers instead (its lists cut the same way).
pub fn fresh_neighbours(
    vectors: &[f32],
    dim: usize,
    fresh: &[bool],
    (k, min_score): (usize, f32),
    all_pairs: impl FnOnce() -> Vec<Vec<Neighbour>>,
) -> Vec<Vec<Neighbour>> {
    let n = fresh.len();
    let fresh_rows: Vec<u32> = (0..n as u32).filter(|&i| fresh[i as usize]).collect();
    if fresh_rows.is_empty() || k == 0 {
        return vec![Vec::new(); n];
    }
    if fresh_rows.len() * 4 >= n {
        let mut lists = all_pairs();
        for (row, list) in lists.iter_mut().enumerate() {
            if !fresh[row] {
                list.retain(|nb| fresh[nb.index as usize]);
            }
        }
        return lists;
    }
    let gather = |rows: &[u32]| -> Vec<f32> {
        rows.iter()
            .flat_map(|&r| &vectors[r as usize * dim..(r as usize + 1) * dim])
            .copied()
            .collect()
    };
    let queries = gather(&fresh_rows);
    let mut lists = vec![Vec::new(); n];
    let nearest = top_k(&queries, vectors, dim, k, SelfMatch::Rows(&fresh_rows));
    for (row, found) in fresh_rows.iter().zip(nearest) {
        lists[*row as usize] = found;
    }
    let near: BTreeSet<u32> = above_threshold(
        &queries,
        vectors,
        dim,
        min_score,
        SelfMatch::Rows(&fresh_rows),
    )
    .into_iter()
    .flatten()
    .map(|nb| nb.index)
    .filter(|&row| !fresh[row as usize])
    .collect();
    let near: Vec<u32> = near.into_iter().collect();
    if !near.is_empty() {
        let nearest = top_k(&gather(&near), vectors, dim, k, SelfMatch::Rows(&near));
        for (row, mut found) in near.iter().zip(nearest) {
            found.retain(|nb| fresh[nb.index as usize]);
            lists[*row as usize] = found;
        }
    }
    lists
}

/// The pairs to judge, as (source, target) positions: every neighbour at or above
/// `min_score`, newer memory (by `order`: created at, then id) as source, most similar first
/// (ties by position), without the (source id, target id) pairs in `judged`.
pub fn candidate_pairs(
    neighbours: &[Vec<Neighbour>],
    order: &[(&str, &str)],
    min_score: f32,
    judged: &BTreeSet<(String, String)>,
) -> Vec<(usize, usize)> {
    let mut pairs: BTreeMap<(usize, usize), f32> = BTreeMap::new();
    for (row, list) in neighbours.iter().enumerate() {
        for n in list.iter().filter(|n| n.score >= min_score) {
            let other = n.index as usize;
            let key = match order[row] > order[other] {
                true => (row, other),
                false => (other, row),
            };
            pairs.insert(key, n.score);
        }
    }
    let mut ordered: Vec<((usize, usize), f32)> = pairs.into_iter().collect();
    ordered.sort_by(|x, y| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0)));
    let id = |i: usize| order[i].1.to_string();
    ordered
        .into_iter()
        .map(|(pair, _)| pair)
        .filter(|&(s, t)| !judged.contains(&(id(s), id(t))))
        .collect()
}

/// The judge's verdict on one pair: a link type (`null`: none), its confidence and reasoning,
/// or why there is no trusted verdict.
#[derive(Debug, Clone, PartialEq)]
pub enum PairVerdict {
    Typed {
        link_type: String,
        confidence: f64,
        reasoning: String,
    },
    Failed(String),
}

/// One judged pair: its ends, its audit key, the verdict and who gave it.
#[derive(Debug, Clone)]
pub struct JudgedPair {
    pub source: String,
    pub target: String,
    pub key: String,
    pub verdict: PairVerdict,
    pub served_by: Option<String>,
}

/// What a set of verdicts writes: the links, the pairs whose `supersedes` link becomes a
/// chain, one audit row per pair, and counts (`links_{type}`, `pairs_judged`, `pairs_failed`,
/// `supersedes_under_min_confidence`).
#[derive(Debug, Default)]
pub struct LinkWrites {
    pub links: Vec<LinkRow>,
    pub chains: Vec<(String, String)>,
    pub audit: Vec<AuditRow>,
    pub counts: BTreeMap<String, u64>,
}

/// Plans the writes of run `run_id` for `user`'s judged pairs at `now`; a `supersedes` link
/// becomes a chain when its confidence reaches `chain_min_confidence` (integrate's bar for
/// applying a supersession), else it stays a link and is counted.
pub fn plan_links(
    (run_id, user): (&str, Option<&str>),
    pairs: &[JudgedPair],
    chain_min_confidence: f64,
    now: i64,
) -> LinkWrites {
    let mut w = LinkWrites::default();
    let mut count = |name: String| *w.counts.entry(name).or_default() += 1;
    for pair in pairs {
        let mut row = AuditRow::new(run_id, "LINK", &pair.key, now);
        row.user_id = user.map(str::to_string);
        row.source_ids = vec![pair.source.clone(), pair.target.clone()];
        row.target_id = Some(pair.target.clone());
        row.after_state = Some(json!({"served_by": pair.served_by}).to_string());
        match &pair.verdict {
            PairVerdict::Failed(reason) => {
                row.classification = Some("FAILED".into());
                row.reasoning = Some(reason.clone());
                count("pairs_failed".into());
            }
            PairVerdict::Typed {
                link_type,
                confidence,
                reasoning,
            } => {
                row.classification = Some(link_type.clone());
                row.confidence = Some(*confidence);
                row.reasoning = Some(reasoning.clone());
                count("pairs_judged".into());
                if link_type != "null" {
                    count(format!("links_{link_type}"));
                    w.links.push(LinkRow {
                        source_id: pair.source.clone(),
                        target_id: pair.target.clone(),
                        user_id: user.unwrap_or_default().to_string(),
                        link_type: link_type.clone(),
                        confidence: *confidence,
                        reasoning: Some(reasoning.clone()),
                        origin: "llm".into(),
                        created_at: now,
                    });
                }
                if link_type == "supersedes" {
                    if *confidence >= chain_min_confidence {
                        w.chains.push((pair.source.clone(), pair.target.clone()));
                    } else {
                        count("supersedes_under_min_confidence".into());
                    }
                }
            }
        }
        w.audit.push(row);
    }
    w
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(index: u32, score: f32) -> Neighbour {
        Neighbour { index, score }
    }

    #[test]
    fn pairs_run_newer_to_older_most_similar_first_once_each() {
        // Memory 0 is the newest, 2 the oldest.
        let order = [
            ("2026-03-01", "a"),
            ("2026-02-01", "b"),
            ("2026-01-01", "c"),
        ];
        let neighbours = vec![
            vec![n(1, 0.9), n(2, 0.5)],
            vec![n(0, 0.9), n(2, 0.7)],
            vec![n(1, 0.7), n(0, 0.5)],
        ];
        let none = BTreeSet::new();
        assert_eq!(
            candidate_pairs(&neighbours, &order, 0.6, &none),
            [(0, 1), (1, 2)]
        );
        assert_eq!(candidate_pairs(&neighbours, &order, 0.4, &none).len(), 3);
        let judged = BTreeSet::from([("a".to_string(), "b".to_string())]);
        assert_eq!(candidate_pairs(&neighbours, &order, 0.6, &judged), [(1, 2)]);
        // Same time: the greater id is the source.
        let tied = [("t", "x"), ("t", "y")];
        let neighbours = vec![vec![n(1, 0.8)], vec![n(0, 0.8)]];
        assert_eq!(candidate_pairs(&neighbours, &tied, 0.6, &none), [(1, 0)]);
    }

    fn pair(source: &str, verdict: PairVerdict) -> JudgedPair {
        JudgedPair {
            source: source.into(),
            target: "t".into(),
            key: format!("k|{source}"),
            verdict,
            served_by: Some("offline".into()),
        }
    }

    fn typed(link_type: &str, confidence: f64) -> PairVerdict {
        PairVerdict::Typed {
            link_type: link_type.into(),
            confidence,
            reasoning: "because".into(),
        }
    }

    #[test]
    fn new_memories_get_the_pairs_a_pass_over_every_memory_would_give_them() {
        use crate::similarity::{AllPairs, all_pairs_top_k, normalise};
        let (n, dim, k, min_score) = (120usize, 8usize, 4usize, 0.5f32);
        let mut state = 0x2545_f491_4f6c_dd1du64;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5
        };
        let mut vectors: Vec<f32> = (0..n * dim).map(|_| next()).collect();
        vectors.chunks_mut(dim).for_each(normalise);
        let exact = AllPairs {
            exact: true,
            ..AllPairs::default()
        };
        let full = all_pairs_top_k(&vectors, dim, k, exact).0;
        let created: Vec<String> = (0..n).map(|i| format!("{:04}", (i * 37) % n)).collect();
        let ids: Vec<String> = (0..n).map(|i| format!("m{i:03}")).collect();
        let order: Vec<(&str, &str)> = created
            .iter()
            .zip(&ids)
            .map(|(c, i)| (c.as_str(), i.as_str()))
            .collect();
        let none = BTreeSet::new();
        let every = candidate_pairs(&full, &order, min_score, &none);
        // Few new (the scored path) and many new (the all-pairs path).
        for step in [13usize, 3, 1] {
            let fresh: Vec<bool> = (0..n).map(|i| i % step == 0).collect();
            let lists = fresh_neighbours(&vectors, dim, &fresh, (k, min_score), || full.clone());
            let got = candidate_pairs(&lists, &order, min_score, &none);
            let want: Vec<(usize, usize)> = every
                .iter()
                .copied()
                .filter(|&(s, t)| fresh[s] || fresh[t])
                .collect();
            assert!(!want.is_empty(), "step {step}: the case has pairs");
            assert_eq!(got, want, "step {step}");
        }
        let none_new = vec![false; n];
        assert!(
            fresh_neighbours(&vectors, dim, &none_new, (k, min_score), || full.clone())
                .iter()
                .all(Vec::is_empty)
        );
    }

    #[test]
    fn a_mark_changes_with_the_vector_the_model_and_the_options() {
        let v = [0.6f32, 0.8, 0.0];
        let mark = link_mark(&v, "m", 5, 0.75);
        assert_eq!(mark, link_mark(&v, "m", 5, 0.75));
        assert_ne!(mark, link_mark(&[0.6, 0.8, 1e-7], "m", 5, 0.75));
        assert_ne!(mark, link_mark(&v, "m2", 5, 0.75));
        assert_ne!(mark, link_mark(&v, "m", 6, 0.75));
        assert_ne!(mark, link_mark(&v, "m", 5, 0.7));
    }

    #[test]
    fn verdicts_write_links_chains_and_one_audit_row_per_pair() {
        let pairs = [
            pair("a", typed("causes", 0.9)),
            pair("b", typed("null", 0.9)),
            pair("c", typed("supersedes", 0.95)),
            pair("d", typed("supersedes", 0.5)),
            pair("e", PairVerdict::Failed("timeout".into())),
        ];
        let w = plan_links(("run", Some("u")), &pairs, 0.8, 7);
        let linked: Vec<&str> = w.links.iter().map(|l| l.source_id.as_str()).collect();
        assert_eq!(linked, ["a", "c", "d"], "null and failed make no link");
        assert_eq!(w.chains, [("c".to_string(), "t".to_string())]);
        assert_eq!(w.audit.len(), 5);
        assert_eq!(w.audit[4].classification.as_deref(), Some("FAILED"));
        assert_eq!(w.audit[4].reasoning.as_deref(), Some("timeout"));
        assert_eq!(w.audit[1].classification.as_deref(), Some("null"));
        let counts: Vec<(&str, u64)> = w.counts.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        assert_eq!(
            counts,
            [
                ("links_causes", 1),
                ("links_supersedes", 2),
                ("pairs_failed", 1),
                ("pairs_judged", 4),
                ("supersedes_under_min_confidence", 1),
            ]
        );
        // The same verdicts planned again are the same rows (keyed): a rerun changes nothing.
        let again = plan_links(("run", Some("u")), &pairs, 0.8, 7);
        let ids = |w: &LinkWrites| w.audit.iter().map(|r| r.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&w), ids(&again));
    }
}
