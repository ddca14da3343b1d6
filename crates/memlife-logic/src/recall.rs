//! Recall's rules (seed 001 RetrievalMode, seed 002 salience on retrieval): which tiers a mode
//! searches and how candidates are ranked. Pure.
//!
//! - reflexive: hot memories only; standard (the default): hot and warm; deep: hot, warm and
//!   cold; exhaustive: every tier, archived memories included.
//! - rank = 0.70 x similarity + 0.20 x salience + 0.10 x recency, where similarity is the
//!   cosine of the query and the memory, salience the stored salience (importance when a
//!   memory has none), and recency exp(-days since last access, else creation, / 30). Ties go
//!   to the newer memory, then the smaller id.
//! - Reasoned answers offline (`answer_offline`): a date question ("when did", "what date",
//!   "what day", "how long ago") is answered from the first recalled memory, in rank order,
//!   whose text names a time (resolved against when it was written, `logic::temporal`); with
//!   none, from the day the best memory was written, marked as needing inference and at low
//!   confidence.

/// How far a recall searches.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Reflexive,
    Standard,
    Deep,
    Exhaustive,
}

impl Mode {
    /// The tiers searched.
    pub fn tiers(self) -> &'static [&'static str] {
        match self {
            Mode::Reflexive => &["hot"],
            Mode::Standard => &["hot", "warm"],
            Mode::Deep => &["hot", "warm", "cold"],
            Mode::Exhaustive => &["hot", "warm", "cold", "archived"],
        }
    }

    /// Whether archived memories are searched.
    pub fn archived(self) -> bool {
        self == Mode::Exhaustive
    }
}

pub const SIMILARITY_WEIGHT: f64 = 0.70;
pub const SALIENCE_WEIGHT: f64 = 0.20;
pub const RECENCY_WEIGHT: f64 = 0.10;
/// Days for recency to fall to 1/e.
pub const RECENCY_DAYS: f64 = 30.0;

/// A candidate as ranking reads it.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub similarity: f64,
    pub salience: f64,
    /// Days since last access (else creation) at the recall's clock.
    pub age_days: f64,
    /// For ties: created_at (microseconds) and id.
    pub created_at: i64,
    pub id: String,
}

pub fn rank_score(c: &Candidate) -> f64 {
    let recency = (-c.age_days.max(0.0) / RECENCY_DAYS).exp();
    SIMILARITY_WEIGHT * c.similarity
        + SALIENCE_WEIGHT * c.salience.clamp(0.0, 1.0)
        + RECENCY_WEIGHT * recency
}

/// The indexes of the `k` best candidates, best first.
pub fn rank(candidates: &[Candidate], k: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..candidates.len()).collect();
    order.sort_by(|&a, &b| {
        let (x, y) = (&candidates[a], &candidates[b]);
        rank_score(y)
            .total_cmp(&rank_score(x))
            .then(y.created_at.cmp(&x.created_at))
            .then(x.id.cmp(&y.id))
    });
    order.truncate(k);
    order
}

/// Questions about a time, which recall answers with a `ReasonedAnswer` by itself.
pub fn is_date_question(question: &str) -> bool {
    let q = question.to_lowercase();
    [
        "when did",
        "when was",
        "when were",
        "when is",
        "when will",
        "what date",
        "what day",
        "which day",
        "how long ago",
        "in which month",
        "what month",
        "what year",
    ]
    .iter()
    .any(|m| q.contains(m))
}

/// seed 001's TemporalReference: a time expression of a memory and what it means.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemporalReference {
    pub memory_id: String,
    /// The words of the memory, as written.
    pub expression: String,
    /// What they mean, counted from when the memory was written: a date (YYYY-MM-DD) or an
    /// interval.
    pub resolved: String,
}

/// seed 001's ReasonedAnswer (also the reply of the `recall.answer` LLM task).
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReasonedAnswer {
    pub answer: String,
    pub confidence: f64,
    pub reasoning: String,
    pub temporal_resolutions: Vec<TemporalReference>,
    pub source_memory_ids: Vec<String>,
    pub requires_inference: bool,
}

/// A recalled memory as the offline answer reads it.
pub struct Evidence<'a> {
    pub id: &'a str,
    pub text: &'a str,
    pub written: chrono::NaiveDate,
}

/// Answers a date question from recalled memories, best first (see the module doc); `None`
/// when nothing was recalled.
pub fn answer_offline(
    question: &str,
    memories: &[Evidence<'_>],
    today: chrono::NaiveDate,
) -> Option<ReasonedAnswer> {
    let best = memories.first()?;
    let how_long = question.to_lowercase().contains("how long ago");
    let resolved = memories.iter().find_map(|m| {
        let found = crate::temporal::resolve(m.text, m.written);
        let pick = found.iter().find(|r| !r.implied).or(found.first()).cloned();
        pick.map(|r| (m, r))
    });
    Some(match resolved {
        Some((m, r)) => {
            let label = r.label();
            let answer = if how_long {
                let days = (today - r.start).num_days();
                format!("{days} days ago ({label})")
            } else {
                label.clone()
            };
            let confidence = match r.granularity {
                crate::temporal::Granularity::Day => 0.8,
                _ => 0.6,
            };
            ReasonedAnswer {
                answer,
                confidence,
                reasoning: format!(
                    "offline: memory {} (written {}) says \"{}\", which is {label}",
                    m.id, m.written, r.expression
                ),
                temporal_resolutions: vec![TemporalReference {
                    memory_id: m.id.to_string(),
                    expression: r.expression.clone(),
                    resolved: label.clone(),
                }],
                source_memory_ids: vec![m.id.to_string()],
                requires_inference: false,
            }
        }
        None => ReasonedAnswer {
            answer: format!("on or before {}", best.written),
            confidence: 0.3,
            reasoning: format!(
                "offline: no recalled memory names a time; the best match, {}, was written on {}",
                best.id, best.written
            ),
            temporal_resolutions: Vec::new(),
            source_memory_ids: vec![best.id.to_string()],
            requires_inference: true,
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn c(id: &str, similarity: f64, salience: f64, age_days: f64) -> Candidate {
        Candidate {
            similarity,
            salience,
            age_days,
            created_at: 0,
            id: id.into(),
        }
    }

    #[test]
    fn similarity_leads_salience_and_recency_break_near_ties() {
        let cands = [
            c("far", 0.40, 1.0, 0.0),
            c("close", 0.90, 0.1, 400.0),
            c("close-fresh", 0.88, 0.6, 1.0),
        ];
        assert_eq!(rank(&cands, 3), vec![2, 1, 0]);
        assert_eq!(rank(&cands, 1), vec![2]);
    }

    #[test]
    fn date_questions_are_answered_from_the_first_memory_that_names_a_time() {
        let d = |s: &str| chrono::NaiveDate::parse_from_str(s, "%Y-%m-%d").unwrap();
        assert!(is_date_question("When did Ana adopt the kitten?"));
        assert!(!is_date_question("What does Ana like?"));
        let mems = [
            Evidence {
                id: "a",
                text: "Ana has a kitten called Miso",
                written: d("2023-05-10"),
            },
            Evidence {
                id: "b",
                text: "Ana adopted a kitten yesterday",
                written: d("2023-05-10"),
            },
        ];
        let a = answer_offline("When did Ana adopt the kitten?", &mems, d("2023-06-01")).unwrap();
        assert_eq!(a.answer, "2023-05-09");
        assert_eq!(a.source_memory_ids, ["b"]);
        assert!(!a.requires_inference);
        let a = answer_offline("How long ago did Ana adopt it?", &mems, d("2023-06-01")).unwrap();
        assert_eq!(a.answer, "23 days ago (2023-05-09)");
        let a = answer_offline("When?", &mems[..1], d("2023-06-01")).unwrap();
        assert!(a.requires_inference && a.confidence < 0.5, "{a:?}");
        assert!(answer_offline("When?", &[], d("2023-06-01")).is_none());
    }

    #[test]
    fn modes_widen_the_tiers() {
        assert_eq!(Mode::Reflexive.tiers(), ["hot"]);
        assert_eq!(Mode::Standard.tiers(), ["hot", "warm"]);
        assert!(Mode::Deep.tiers().contains(&"cold") && !Mode::Deep.archived());
        assert!(Mode::Exhaustive.archived());
    }
}
