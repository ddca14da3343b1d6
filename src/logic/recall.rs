//! Recall's rules (seed 001 RetrievalMode, seed 002 salience on retrieval): which tiers a mode
//! searches and how candidates are ranked. Pure.
//!
//! - reflexive: hot memories only; standard (the default): hot and warm; deep: hot, warm and
//!   cold; exhaustive: every tier, archived memories included.
//! - rank = 0.70 x similarity + 0.20 x salience + 0.10 x recency, where similarity is the
//!   cosine of the query and the memory, salience the stored salience (importance when a
//!   memory has none), and recency exp(-days since last access, else creation, / 30). Ties go
//!   to the newer memory, then the smaller id.

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
    fn modes_widen_the_tiers() {
        assert_eq!(Mode::Reflexive.tiers(), ["hot"]);
        assert_eq!(Mode::Standard.tiers(), ["hot", "warm"]);
        assert!(Mode::Deep.tiers().contains(&"cold") && !Mode::Deep.archived());
        assert!(Mode::Exhaustive.archived());
    }
}
