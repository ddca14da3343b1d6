//! Scoring a judge against hand-labelled pairs: the confusion matrix, per-class precision and
//! recall, the destructive error rate (the mistakes that lose information), the dev/held-out
//! split, and the share of each class's pairs whose embedding similarity reaches a candidate
//! threshold. Pure: `memlife eval judge` reads the pairs and asks the judge; this counts.

use std::collections::BTreeMap;

use serde::Serialize;

use super::hash::fnv1a;

/// The classes of `integrate.classify`, in report order.
pub const INTEGRATE_LABELS: &[&str] = &["DUPLICATE", "SUPERSEDE", "MERGE", "COEXIST"];

/// The link types of `link.classify`, in report order (`null`: no link).
pub const LINK_LABELS: &[&str] = &[
    "conflicts",
    "supersedes",
    "causes",
    "instance_of",
    "invalidated_by",
    "motivated_by",
    "null",
];

/// The outcomes of the two-pass consolidation (`consolidate.propose` then
/// `consolidate.verify`) of a set of memories: all of them folded into one approved memory,
/// some of them, or none. Gold labels are CONSOLIDATE or KEEP.
pub const CONSOLIDATE_LABELS: &[&str] = &["CONSOLIDATE", "PARTIAL", "KEEP"];

/// The answers of `consolidate.verify` to a given proposal.
pub const VERIFY_LABELS: &[&str] = &["APPROVE", "REJECT"];

/// The actions of `refine` on one memory.
pub const REFINE_LABELS: &[&str] = &["SPLIT", "TRIM", "KEEP"];

/// The task names `memlife eval judge` scores, with their labels; `consolidate` is the
/// two-pass pipeline, `consolidate.verify` the second pass alone on a given proposal.
pub const EVAL_TASKS: &[(&str, &[&str])] = &[
    ("integrate.classify", INTEGRATE_LABELS),
    ("link.classify", LINK_LABELS),
    ("consolidate", CONSOLIDATE_LABELS),
    ("consolidate.verify", VERIFY_LABELS),
    ("refine", REFINE_LABELS),
];

/// The labels of an eval task.
pub fn labels_of(task: &str) -> &'static [&'static str] {
    EVAL_TASKS
        .iter()
        .find(|(t, _)| *t == task)
        .map_or(&[], |(_, labels)| labels)
}

/// The thresholds of the similarity table.
pub const THRESHOLDS: &[f32] = &[0.3, 0.4, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75, 0.8, 0.85, 0.9];

/// Which half of the labelled pairs a pair belongs to. The split is a hash of the two texts,
/// so it never depends on file order and a pair keeps its half when others are added.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Split {
    Dev,
    HeldOut,
}

impl Split {
    pub fn of(first: &str, second: &str) -> Split {
        if fnv1a(&["memlife-eval-split", first, second]).is_multiple_of(2) {
            Split::Dev
        } else {
            Split::HeldOut
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Split::Dev => "dev",
            Split::HeldOut => "held-out",
        }
    }
}

/// A mistake that loses information: for `integrate.classify`, a distinct or an outdated fact
/// judged the same as, or folded into, the other (COEXIST or SUPERSEDE judged DUPLICATE or
/// MERGE); for `link.classify`, any link whose type is not the gold one (a wrong link is
/// worse than none; a missed link, judged null, is not destructive); for `consolidate`, any
/// memory folded into another when the gold says keep them apart; for `consolidate.verify`,
/// approving a proposal that should be rejected; for `refine`, changing a memory that should be
/// kept, or splitting one that only needed a trim.
pub fn is_destructive(task: &str, gold: &str, judged: &str) -> bool {
    match task {
        "link.classify" => judged != "null" && judged != gold,
        "consolidate" => gold == "KEEP" && judged != "KEEP",
        "consolidate.verify" => gold == "REJECT" && judged == "APPROVE",
        "refine" => (gold == "KEEP" && judged != "KEEP") || (gold == "TRIM" && judged == "SPLIT"),
        _ => matches!(gold, "COEXIST" | "SUPERSEDE") && matches!(judged, "DUPLICATE" | "MERGE"),
    }
}

/// Precision and recall of one class.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct ClassScore {
    pub label: String,
    /// Pairs whose gold label is this class.
    pub gold: usize,
    /// Pairs the judge put in this class.
    pub judged: usize,
    pub correct: usize,
    /// correct / judged; None when the judge never chose the class.
    pub precision: Option<f64>,
    /// correct / gold; None when no pair has the class.
    pub recall: Option<f64>,
}

/// The scores of one task on one set of pairs.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct Scores {
    pub pairs: usize,
    pub correct: usize,
    pub accuracy: f64,
    pub destructive_errors: usize,
    pub destructive_error_rate: f64,
    /// confusion[gold][judged] = count, every label present.
    pub confusion: BTreeMap<String, BTreeMap<String, usize>>,
    pub classes: Vec<ClassScore>,
}

/// Scores (gold, judged) label pairs of `task` over `labels`.
pub fn score_answers(task: &str, labels: &[&str], outcomes: &[(&str, &str)]) -> Scores {
    let mut confusion: BTreeMap<String, BTreeMap<String, usize>> = labels
        .iter()
        .map(|g| {
            (
                g.to_string(),
                labels.iter().map(|j| (j.to_string(), 0)).collect(),
            )
        })
        .collect();
    for (gold, judged) in outcomes {
        *confusion
            .entry(gold.to_string())
            .or_default()
            .entry(judged.to_string())
            .or_default() += 1;
    }
    let correct = outcomes.iter().filter(|(g, j)| g == j).count();
    let destructive = outcomes
        .iter()
        .filter(|(g, j)| is_destructive(task, g, j))
        .count();
    let classes = labels
        .iter()
        .map(|label| {
            let gold = outcomes.iter().filter(|(g, _)| g == label).count();
            let judged = outcomes.iter().filter(|(_, j)| j == label).count();
            let hits = outcomes
                .iter()
                .filter(|(g, j)| g == label && j == label)
                .count();
            ClassScore {
                label: label.to_string(),
                gold,
                judged,
                correct: hits,
                precision: (judged > 0).then(|| hits as f64 / judged as f64),
                recall: (gold > 0).then(|| hits as f64 / gold as f64),
            }
        })
        .collect();
    let n = outcomes.len();
    Scores {
        pairs: n,
        correct,
        accuracy: correct as f64 / n.max(1) as f64,
        destructive_errors: destructive,
        destructive_error_rate: destructive as f64 / n.max(1) as f64,
        confusion,
        classes,
    }
}

/// For one class: how many pairs, and the share whose similarity reaches each threshold.
#[derive(Clone, Debug, Serialize, PartialEq)]
pub struct SimilarityRow {
    pub label: String,
    pub pairs: usize,
    pub median: Option<f32>,
    /// (threshold, share of the class's pairs with cosine >= threshold)
    pub reaching: Vec<(f32, f64)>,
}

/// The similarity table: per label, the share of pairs at or above each threshold.
pub fn similarity_table(labels: &[&str], pairs: &[(&str, f32)]) -> Vec<SimilarityRow> {
    labels
        .iter()
        .map(|label| {
            let mut values: Vec<f32> = pairs
                .iter()
                .filter(|(l, _)| l == label)
                .map(|(_, s)| *s)
                .collect();
            values.sort_by(f32::total_cmp);
            let n = values.len();
            SimilarityRow {
                label: label.to_string(),
                pairs: n,
                median: (n > 0).then(|| values[n / 2]),
                reaching: THRESHOLDS
                    .iter()
                    .map(|t| {
                        let at = values.iter().filter(|s| **s >= *t - 1e-6).count();
                        (*t, at as f64 / n.max(1) as f64)
                    })
                    .collect(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destructive_means_information_lost() {
        let t = "integrate.classify";
        assert!(is_destructive(t, "COEXIST", "DUPLICATE"));
        assert!(is_destructive(t, "SUPERSEDE", "MERGE"));
        assert!(
            !is_destructive(t, "DUPLICATE", "COEXIST"),
            "a missed duplicate keeps both"
        );
        assert!(!is_destructive(t, "MERGE", "COEXIST"));
        let l = "link.classify";
        assert!(is_destructive(l, "null", "supersedes"));
        assert!(is_destructive(l, "causes", "motivated_by"));
        assert!(
            !is_destructive(l, "causes", "null"),
            "a missed link loses nothing"
        );
        assert!(!is_destructive(l, "causes", "causes"));
        assert!(is_destructive("consolidate", "KEEP", "PARTIAL"));
        assert!(
            !is_destructive("consolidate", "CONSOLIDATE", "PARTIAL"),
            "folding fewer memories than asked loses nothing"
        );
        assert!(is_destructive("consolidate.verify", "REJECT", "APPROVE"));
        assert!(!is_destructive("consolidate.verify", "APPROVE", "REJECT"));
        assert!(is_destructive("refine", "KEEP", "TRIM"));
        assert!(is_destructive("refine", "TRIM", "SPLIT"));
        assert!(!is_destructive("refine", "SPLIT", "KEEP"));
    }

    #[test]
    fn scores_count_the_confusion_matrix() {
        let outcomes = [
            ("DUPLICATE", "DUPLICATE"),
            ("DUPLICATE", "COEXIST"),
            ("COEXIST", "MERGE"),
            ("COEXIST", "COEXIST"),
        ];
        let s = score_answers("integrate.classify", INTEGRATE_LABELS, &outcomes);
        assert_eq!((s.pairs, s.correct, s.destructive_errors), (4, 2, 1));
        assert_eq!(s.confusion["DUPLICATE"]["COEXIST"], 1);
        assert_eq!(s.confusion["SUPERSEDE"]["SUPERSEDE"], 0);
        let dup = &s.classes[0];
        assert_eq!((dup.precision, dup.recall), (Some(1.0), Some(0.5)));
        let merge = &s.classes[2];
        assert_eq!((merge.precision, merge.recall), (Some(0.0), None));
        let coexist = &s.classes[3];
        assert_eq!(coexist.precision, Some(0.5));
    }

    #[test]
    fn the_similarity_table_counts_shares_at_or_above_each_threshold() {
        let pairs = [
            ("MERGE", 0.55),
            ("MERGE", 0.7),
            ("MERGE", 0.9),
            ("COEXIST", 0.2),
        ];
        let table = similarity_table(&["MERGE", "COEXIST"], &pairs);
        let at = |row: &SimilarityRow, t: f32| {
            row.reaching
                .iter()
                .find(|(x, _)| (*x - t).abs() < 1e-6)
                .unwrap()
                .1
        };
        assert_eq!(table[0].pairs, 3);
        assert!((at(&table[0], 0.5) - 1.0).abs() < 1e-9);
        assert!((at(&table[0], 0.7) - 2.0 / 3.0).abs() < 1e-9);
        assert!((at(&table[0], 0.9) - 1.0 / 3.0).abs() < 1e-9);
        assert_eq!(at(&table[1], 0.3), 0.0);
        assert_eq!(table[0].median, Some(0.7));
    }

    #[test]
    fn the_split_is_stable_and_roughly_even() {
        assert_eq!(Split::of("a", "b"), Split::of("a", "b"));
        let dev = (0..1000)
            .filter(|i| Split::of(&format!("old {i}"), "new") == Split::Dev)
            .count();
        assert!((400..600).contains(&dev), "{dev}");
    }
}
