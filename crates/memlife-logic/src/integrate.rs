//! New-fact integration (seed 003): which operation a new fact becomes, from the judge's
//! answers about its candidates, and how a MERGE combines the two memories' metadata.
//!
//! Pure: answers and values in, a decision out.
//!
//! The judge (`integrate.classify`) is asked about the fact against each candidate (the
//! user's current memories at least as similar as the threshold, most similar first, at most
//! `top_k`), all at once. The decision:
//! 1. answers at or above `min_confidence` that change something (DUPLICATE, SUPERSEDE,
//!    MERGE; SUPERSEDE and MERGE only when enabled) decide, in that order of precedence, the
//!    most similar candidate first among equals: a fact that restates one memory is not also
//!    a change of another;
//! 2. otherwise, a change-making answer below `min_confidence` sends the fact to the review
//!    queue with that answer (the most precedent one);
//! 3. otherwise the fact is added (COEXIST) with a `related_to` link to the most similar
//!    candidate the judge called COEXIST, or to none when every answer failed: a failed or
//!    unparsable answer never changes a memory (the safe choice), and says why.

use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

/// `[integrate]` in memlife.toml.
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct IntegrateParams {
    /// Candidates asked about per fact (seed 003: K = 5).
    pub top_k: usize,
    /// Answers below this confidence go to the review queue instead of being applied.
    pub min_confidence: f64,
    pub enable_merge: bool,
    pub enable_supersede: bool,
    /// Off by default: when on, a superseded memory is also archived (never erased).
    pub enable_delete: bool,
    /// Days a review item waits before it expires (then the fact is kept beside the memory,
    /// as COEXIST: the safe choice).
    pub review_ttl_days: i64,
}

impl Default for IntegrateParams {
    fn default() -> Self {
        IntegrateParams {
            top_k: 5,
            min_confidence: 0.8,
            enable_merge: true,
            enable_supersede: true,
            enable_delete: false,
            review_ttl_days: 14,
        }
    }
}

/// The judge's classes (seed 003).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum Class {
    Duplicate,
    Supersede,
    Merge,
    Coexist,
}

impl Class {
    pub fn as_str(self) -> &'static str {
        match self {
            Class::Duplicate => "DUPLICATE",
            Class::Supersede => "SUPERSEDE",
            Class::Merge => "MERGE",
            Class::Coexist => "COEXIST",
        }
    }

    pub fn parse(text: &str) -> Option<Class> {
        match text {
            "DUPLICATE" => Some(Class::Duplicate),
            "SUPERSEDE" => Some(Class::Supersede),
            "MERGE" => Some(Class::Merge),
            "COEXIST" => Some(Class::Coexist),
            _ => None,
        }
    }

    /// Whether applying it changes an existing memory.
    pub fn changes_memory(self) -> bool {
        self != Class::Coexist
    }
}

/// The judge's answer about the fact and one candidate (`None` class: the call failed).
#[derive(Clone, Debug, PartialEq)]
pub struct Answer {
    /// Index of the candidate, most similar first.
    pub candidate: usize,
    pub class: Option<Class>,
    pub confidence: f64,
    pub reasoning: String,
}

/// What becomes of a fact.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// No candidate: a new memory.
    Add,
    /// Applied against `candidate` (its index).
    Apply {
        class: Class,
        candidate: usize,
        confidence: f64,
        reasoning: String,
    },
    /// Unsure: queued for a person with the judge's answer about `candidate`.
    Review {
        class: Class,
        candidate: usize,
        confidence: f64,
        reasoning: String,
    },
    /// Added beside the candidates; `related` is the candidate it is linked to.
    Coexist {
        related: Option<usize>,
        confidence: f64,
        reasoning: String,
    },
}

impl Decision {
    /// The audit operation the decision is logged as.
    pub fn operation(&self) -> &'static str {
        match self {
            Decision::Add | Decision::Coexist { .. } => "ADD",
            Decision::Review { .. } => "REVIEW",
            Decision::Apply { class, .. } => match class {
                Class::Duplicate => "NOOP",
                Class::Supersede => "SUPERSEDE",
                Class::Merge => "MERGE",
                Class::Coexist => "ADD",
            },
        }
    }

    /// The classification as the audit log and reports name it.
    pub fn classification(&self) -> &'static str {
        match self {
            Decision::Add => "NEW",
            Decision::Coexist { .. } => "COEXIST",
            Decision::Apply { class, .. } | Decision::Review { class, .. } => class.as_str(),
        }
    }

    /// The candidate the decision names (by position): the one applied to, the one under
    /// review, or the one a kept fact is related to.
    pub fn candidate(&self) -> Option<usize> {
        match self {
            Decision::Apply { candidate, .. }
            | Decision::Review { candidate, .. }
            | Decision::Coexist {
                related: Some(candidate),
                ..
            } => Some(*candidate),
            _ => None,
        }
    }
}

fn precedence(class: Class) -> u8 {
    match class {
        Class::Duplicate => 0,
        Class::Supersede => 1,
        Class::Merge => 2,
        Class::Coexist => 3,
    }
}

/// The decision for a fact with `candidates` candidates from the judge's `answers` (any
/// order; one per candidate at most).
pub fn decide(candidates: usize, answers: &[Answer], p: &IntegrateParams) -> Decision {
    if candidates == 0 {
        return Decision::Add;
    }
    let allowed = |c: Class| match c {
        Class::Supersede => p.enable_supersede,
        Class::Merge => p.enable_merge,
        _ => true,
    };
    let mut changing: Vec<&Answer> = answers
        .iter()
        .filter(|a| a.class.is_some_and(|c| c.changes_memory() && allowed(c)))
        .filter(|a| a.candidate < candidates)
        .collect();
    changing.sort_by_key(|a| (precedence(a.class.unwrap_or(Class::Coexist)), a.candidate));
    if let Some(a) = changing
        .iter()
        .find(|a| a.confidence >= p.min_confidence)
        .or(changing.first())
    {
        let class = a.class.unwrap_or(Class::Coexist);
        let (candidate, confidence, reasoning) = (a.candidate, a.confidence, a.reasoning.clone());
        return if confidence >= p.min_confidence {
            Decision::Apply {
                class,
                candidate,
                confidence,
                reasoning,
            }
        } else {
            Decision::Review {
                class,
                candidate,
                confidence,
                reasoning,
            }
        };
    }
    let related = answers
        .iter()
        .filter(|a| a.class == Some(Class::Coexist) && a.candidate < candidates)
        .min_by_key(|a| a.candidate);
    match related {
        Some(a) => Decision::Coexist {
            related: Some(a.candidate),
            confidence: a.confidence,
            reasoning: a.reasoning.clone(),
        },
        None => {
            let why: Vec<&str> = answers
                .iter()
                .filter(|a| a.class.is_none())
                .map(|a| a.reasoning.as_str())
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            Decision::Coexist {
                related: None,
                confidence: 0.0,
                reasoning: if why.is_empty() {
                    "no usable answer from the judge: kept as a new memory".into()
                } else {
                    format!(
                        "no usable answer from the judge ({}): kept as a new memory",
                        why.join("; ")
                    )
                },
            }
        }
    }
}

/// Tags of both memories, trimmed, lower-cased and deduplicated, in first-seen order.
pub fn union_tags(a: &[String], b: &[String]) -> Vec<String> {
    let mut seen = BTreeSet::new();
    a.iter()
        .chain(b)
        .map(|t| t.trim().to_lowercase())
        .filter(|t| !t.is_empty() && seen.insert(t.clone()))
        .collect()
}

/// Whether a memory is true at `t` (microseconds): valid_from <= t < valid_until.
pub fn valid_at(valid_from: Option<i64>, valid_until: Option<i64>, t: i64) -> bool {
    valid_from.is_none_or(|f| f <= t) && valid_until.is_none_or(|u| u > t)
}

/// The versions of a supersession chain in order, from `(id, superseded_by)` pairs: starts
/// at the version nobody points to and follows `superseded_by`. Errors name what breaks the
/// chain (a fork, a cycle, a missing successor, a version not reached).
pub fn chain_order(versions: &[(String, Option<String>)]) -> Result<Vec<String>, String> {
    use std::collections::BTreeMap;
    let ids: BTreeSet<&str> = versions.iter().map(|(id, _)| id.as_str()).collect();
    let mut next: BTreeMap<&str, &str> = BTreeMap::new();
    let mut has_predecessor: BTreeMap<&str, &str> = BTreeMap::new();
    for (id, successor) in versions {
        let Some(s) = successor.as_deref() else {
            continue;
        };
        if !ids.contains(s) {
            return Err(format!(
                "{id} is superseded by {s}, which is not in the chain"
            ));
        }
        if let Some(other) = has_predecessor.insert(s, id) {
            return Err(format!("{s} supersedes both {other} and {id}"));
        }
        next.insert(id, s);
    }
    let heads: Vec<&str> = ids
        .iter()
        .copied()
        .filter(|id| !has_predecessor.contains_key(id))
        .collect();
    let [head] = heads.as_slice() else {
        return Err(if heads.is_empty() {
            "the chain is a cycle".to_string()
        } else {
            format!(
                "the chain has {} first versions: {}",
                heads.len(),
                heads.join(", ")
            )
        });
    };
    let mut order = vec![head.to_string()];
    let mut at = *head;
    while let Some(n) = next.get(at) {
        if order.len() > versions.len() {
            return Err("the chain is a cycle".into());
        }
        order.push(n.to_string());
        at = n;
    }
    if order.len() != ids.len() {
        return Err(format!(
            "{} of {} versions are not reached from {head}",
            ids.len() - order.len(),
            ids.len()
        ));
    }
    Ok(order)
}

#[cfg(test)]
mod tests {

    #[test]
    fn a_decision_names_its_candidate_only_when_it_has_one() {
        let apply = Decision::Apply {
            class: Class::Merge,
            candidate: 2,
            confidence: 0.9,
            reasoning: String::new(),
        };
        assert_eq!(apply.candidate(), Some(2));
        let beside = Decision::Coexist {
            related: Some(1),
            confidence: 0.5,
            reasoning: String::new(),
        };
        assert_eq!(beside.candidate(), Some(1));
        let alone = Decision::Coexist {
            related: None,
            confidence: 0.0,
            reasoning: String::new(),
        };
        assert_eq!(alone.candidate(), None);
        assert_eq!(Decision::Add.candidate(), None);
    }

    use super::*;

    fn answer(candidate: usize, class: Option<Class>, confidence: f64) -> Answer {
        Answer {
            candidate,
            class,
            confidence,
            reasoning: format!("r{candidate}"),
        }
    }

    #[test]
    fn no_candidate_is_an_add() {
        assert_eq!(decide(0, &[], &IntegrateParams::default()), Decision::Add);
    }

    #[test]
    fn a_confident_duplicate_wins_over_a_more_similar_coexist() {
        let p = IntegrateParams::default();
        let d = decide(
            2,
            &[
                answer(0, Some(Class::Coexist), 0.9),
                answer(1, Some(Class::Duplicate), 0.9),
            ],
            &p,
        );
        assert!(matches!(
            d,
            Decision::Apply {
                class: Class::Duplicate,
                candidate: 1,
                ..
            }
        ));
        assert_eq!(d.operation(), "NOOP");
    }

    #[test]
    fn precedence_is_duplicate_then_supersede_then_merge() {
        let p = IntegrateParams::default();
        let d = decide(
            3,
            &[
                answer(0, Some(Class::Merge), 0.95),
                answer(1, Some(Class::Supersede), 0.9),
                answer(2, Some(Class::Duplicate), 0.85),
            ],
            &p,
        );
        assert_eq!(d.classification(), "DUPLICATE");
        let d = decide(
            2,
            &[
                answer(0, Some(Class::Merge), 0.95),
                answer(1, Some(Class::Supersede), 0.9),
            ],
            &p,
        );
        assert_eq!(d.operation(), "SUPERSEDE");
    }

    #[test]
    fn a_confident_change_beats_an_unsure_one_and_unsure_alone_goes_to_review() {
        let p = IntegrateParams::default();
        let d = decide(
            2,
            &[
                answer(0, Some(Class::Duplicate), 0.6),
                answer(1, Some(Class::Merge), 0.9),
            ],
            &p,
        );
        assert_eq!(d.operation(), "MERGE");
        let d = decide(1, &[answer(0, Some(Class::Supersede), 0.79)], &p);
        assert!(matches!(
            d,
            Decision::Review {
                class: Class::Supersede,
                candidate: 0,
                ..
            }
        ));
        assert_eq!(d.operation(), "REVIEW");
    }

    #[test]
    fn disabled_operations_are_not_chosen() {
        let p = IntegrateParams {
            enable_merge: false,
            enable_supersede: false,
            ..IntegrateParams::default()
        };
        let d = decide(
            2,
            &[
                answer(0, Some(Class::Merge), 0.95),
                answer(1, Some(Class::Supersede), 0.95),
            ],
            &p,
        );
        assert_eq!(
            d,
            Decision::Coexist {
                related: None,
                confidence: 0.0,
                reasoning: "no usable answer from the judge: kept as a new memory".into()
            }
        );
    }

    #[test]
    fn failures_never_change_a_memory_and_say_why() {
        let p = IntegrateParams::default();
        let mut failed = answer(0, None, 0.0);
        failed.reasoning = "reply is not JSON".into();
        let d = decide(2, &[failed, answer(1, Some(Class::Coexist), 0.5)], &p);
        assert_eq!(
            d,
            Decision::Coexist {
                related: Some(1),
                confidence: 0.5,
                reasoning: "r1".into()
            }
        );
        let mut failed = answer(0, None, 0.0);
        failed.reasoning = "timeout".into();
        match decide(1, &[failed], &p) {
            Decision::Coexist {
                related: None,
                reasoning,
                ..
            } => assert!(reasoning.contains("timeout"), "{reasoning}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn tags_are_united_normalised_and_deduplicated() {
        let a = vec!["Work".to_string(), "pets".to_string()];
        let b = vec!["work ".to_string(), "dogs".to_string(), "".to_string()];
        assert_eq!(union_tags(&a, &b), vec!["work", "pets", "dogs"]);
    }

    #[test]
    fn validity_is_half_open() {
        assert!(valid_at(Some(10), Some(20), 10));
        assert!(valid_at(Some(10), Some(20), 19));
        assert!(!valid_at(Some(10), Some(20), 20));
        assert!(!valid_at(Some(10), Some(20), 9));
        assert!(valid_at(Some(10), None, i64::MAX));
    }

    fn v(id: &str, next: Option<&str>) -> (String, Option<String>) {
        (id.to_string(), next.map(str::to_string))
    }

    #[test]
    fn chains_are_ordered_and_broken_ones_named() {
        let chain = [v("c", None), v("a", Some("b")), v("b", Some("c"))];
        assert_eq!(chain_order(&chain).unwrap(), vec!["a", "b", "c"]);
        let cycle = [v("a", Some("b")), v("b", Some("a"))];
        assert!(chain_order(&cycle).unwrap_err().contains("cycle"));
        let fork = [v("a", Some("c")), v("b", Some("c")), v("c", None)];
        assert!(chain_order(&fork).unwrap_err().contains("supersedes both"));
        let missing = [v("a", Some("z"))];
        assert!(
            chain_order(&missing)
                .unwrap_err()
                .contains("not in the chain")
        );
        let two = [v("a", None), v("b", None)];
        assert!(chain_order(&two).unwrap_err().contains("2 first versions"));
    }
}
