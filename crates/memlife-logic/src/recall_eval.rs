//! Recall measured against labelled evidence (`memlife eval recall`): a question's evidence is
//! a set of units (LoCoMo dialogue turns, `D3:7`); each recalled memory stands for the units
//! it was made from (an observation for its turn; a consolidated memory for its members'
//! turns). Pure: the command recalls, this counts.
//!
//! - hit@k: the top k hold at least one memory of an evidence unit;
//! - evidence recall@k: the share of the question's evidence units (those any memory stands
//!   for) that some memory of the top k stands for;
//! - MRR: the mean of 1 / the rank of the first memory of an evidence unit (0 when none is
//!   recalled within the largest k).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

/// The rank (1-based) of the first result that stands for an evidence unit.
pub fn first_hit(results: &[BTreeSet<String>], evidence: &BTreeSet<String>) -> Option<usize> {
    results
        .iter()
        .position(|units| !units.is_disjoint(evidence))
        .map(|i| i + 1)
}

/// The share of `evidence` the first `k` results stand for (0 for no evidence).
pub fn evidence_recall(results: &[BTreeSet<String>], evidence: &BTreeSet<String>, k: usize) -> f64 {
    if evidence.is_empty() {
        return 0.0;
    }
    let covered: BTreeSet<&String> = results
        .iter()
        .take(k)
        .flat_map(|units| units.intersection(evidence))
        .collect();
    covered.len() as f64 / evidence.len() as f64
}

/// Sums over questions, for the figures at each k.
#[derive(Clone, Debug, Default)]
pub struct Tally {
    pub questions: usize,
    hits: BTreeMap<usize, usize>,
    recall: BTreeMap<usize, f64>,
    reciprocal_rank: f64,
}

/// The figures of a tally: per k, hit@k and evidence recall@k; and MRR.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Figures {
    pub questions: usize,
    pub hit: BTreeMap<usize, f64>,
    pub evidence_recall: BTreeMap<usize, f64>,
    pub mrr: f64,
}

impl Tally {
    /// Counts one question's results (best first) against its evidence, at each of `ks`.
    pub fn add(&mut self, results: &[BTreeSet<String>], evidence: &BTreeSet<String>, ks: &[usize]) {
        self.questions += 1;
        let first = first_hit(results, evidence);
        for &k in ks {
            *self.hits.entry(k).or_default() += usize::from(first.is_some_and(|r| r <= k));
            *self.recall.entry(k).or_default() += evidence_recall(results, evidence, k);
        }
        if let Some(r) = first {
            self.reciprocal_rank += 1.0 / r as f64;
        }
    }

    pub fn figures(&self) -> Figures {
        let n = self.questions.max(1) as f64;
        let round = |x: f64| (x * 1e4).round() / 1e4;
        Figures {
            questions: self.questions,
            hit: self
                .hits
                .iter()
                .map(|(k, h)| (*k, round(*h as f64 / n)))
                .collect(),
            evidence_recall: self
                .recall
                .iter()
                .map(|(k, r)| (*k, round(r / n)))
                .collect(),
            mrr: round(self.reciprocal_rank / n),
        }
    }
}

/// What each memory stands for: its own units, and those of the memories it was made from
/// (`made_of`: a memory's `consolidates_memory_ids`, what consolidation, merges and splits
/// record), followed to any depth, each memory once (a cycle ends the walk).
pub fn units_of(
    own: &BTreeMap<String, Vec<String>>,
    made_of: &BTreeMap<String, Vec<String>>,
) -> BTreeMap<String, BTreeSet<String>> {
    let mut out = BTreeMap::new();
    for id in own.keys().chain(made_of.keys()) {
        let mut units = BTreeSet::new();
        let mut seen = BTreeSet::new();
        let mut stack = vec![id.as_str()];
        while let Some(m) = stack.pop() {
            if !seen.insert(m) {
                continue;
            }
            units.extend(own.get(m).into_iter().flatten().cloned());
            stack.extend(made_of.get(m).into_iter().flatten().map(String::as_str));
        }
        out.insert(id.clone(), units);
    }
    out
}

/// A LoCoMo dialogue id as evidence names it, made canonical: "D30:05" -> "D30:5",
/// "D:11:26" -> "D11:26"; `None` for what names no turn ("D").
pub fn canonical_turn(id: &str) -> Option<String> {
    let rest = id.trim().strip_prefix('D')?.trim_start_matches(':');
    let (session, turn) = rest.split_once(':')?;
    let session: u32 = session.trim().parse().ok()?;
    let turn: u32 = turn.trim().parse().ok()?;
    Some(format!("D{session}:{turn}"))
}

/// Every turn an evidence entry names ("D8:6; D9:17" names two).
pub fn evidence_turns(entry: &str) -> Vec<String> {
    entry
        .split([';', ',', ' '])
        .filter_map(canonical_turn)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(units: &[&str]) -> BTreeSet<String> {
        units.iter().map(|u| u.to_string()).collect()
    }

    #[test]
    fn hits_recall_and_reciprocal_rank_count_evidence_units() {
        let evidence = set(&["D1:3", "D2:5"]);
        let results = [
            set(&["D9:1"]),
            set(&["D2:5", "D4:4"]),
            set(&[]),
            set(&["D1:3"]),
        ];
        assert_eq!(first_hit(&results, &evidence), Some(2));
        assert_eq!(evidence_recall(&results, &evidence, 1), 0.0);
        assert_eq!(evidence_recall(&results, &evidence, 2), 0.5);
        assert_eq!(evidence_recall(&results, &evidence, 4), 1.0);
        let mut t = Tally::default();
        t.add(&results, &evidence, &[1, 5]);
        t.add(&[set(&["D7:7"])], &set(&["D1:1"]), &[1, 5]);
        let f = t.figures();
        assert_eq!(f.questions, 2);
        assert_eq!(f.hit[&1], 0.0);
        assert_eq!(f.hit[&5], 0.5);
        assert_eq!(f.evidence_recall[&5], 0.5);
        assert_eq!(f.mrr, 0.25);
    }

    #[test]
    fn a_memory_made_of_several_turns_covers_each() {
        let results = [set(&["D1:3", "D2:5"])];
        assert_eq!(
            evidence_recall(&results, &set(&["D1:3", "D2:5", "D3:1"]), 1),
            2.0 / 3.0
        );
    }

    #[test]
    fn a_memory_made_of_others_stands_for_their_units() {
        let own: BTreeMap<String, Vec<String>> = [
            ("a".to_string(), vec!["D1:1".to_string()]),
            ("b".to_string(), vec!["D2:4".to_string()]),
        ]
        .into();
        // c consolidates a and b; d was split from c; e and f name each other.
        let made_of: BTreeMap<String, Vec<String>> = [
            ("c".to_string(), vec!["a".to_string(), "b".to_string()]),
            ("d".to_string(), vec!["c".to_string()]),
            ("e".to_string(), vec!["f".to_string()]),
            ("f".to_string(), vec!["e".to_string(), "a".to_string()]),
        ]
        .into();
        let units = units_of(&own, &made_of);
        assert_eq!(units["c"], set(&["D1:1", "D2:4"]));
        assert_eq!(units["d"], set(&["D1:1", "D2:4"]));
        assert_eq!(units["e"], set(&["D1:1"]));
        assert_eq!(units["a"], set(&["D1:1"]));
    }

    #[test]
    fn dialogue_ids_are_made_canonical() {
        assert_eq!(canonical_turn("D30:05").as_deref(), Some("D30:5"));
        assert_eq!(canonical_turn("D:11:26").as_deref(), Some("D11:26"));
        assert_eq!(canonical_turn("D"), None);
        assert_eq!(evidence_turns("D8:6; D9:17"), ["D8:6", "D9:17"]);
    }
}
