//! `memlife prune`'s decisions (seed 004 "Memory Pruner", with seed 002's governance and the
//! store's own references): which memories stay, which are archived and which are deleted.
//!
//! A memory is a candidate when it has decayed below the threshold (salience), its emotional
//! salience is low, nothing used it for the idle window and it is older than the minimum age.
//! Whatever a rule protects stays: `keep_forever`, emotional memories (above the keep bar),
//! core memories and the evidence of a learning pattern or a core memory, memories a review
//! item waits on, and versions of a supersession chain (point-in-time queries read them).
//! Of the candidates, a member of a narrative or of any consolidated memory, and a memory
//! that holds members itself, is archived (its provenance must stay readable); only the rest
//! is deleted, and the job writes each deleted row to an export file first.

use std::collections::{BTreeMap, BTreeSet};

use crate::scores::MICROS_PER_DAY;

/// The thresholds (seed 004's `ConsolidationConfig`).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct PruneParams {
    /// A candidate's salience is below this.
    pub decay_threshold: f64,
    /// A candidate's emotional salience is below this.
    pub emotional_max: f64,
    /// Emotional salience above this keeps a memory whatever else holds.
    pub emotional_keep: f64,
    /// A candidate was not used for this many days.
    pub idle_days: f64,
    /// A candidate is older than this many days.
    pub min_age_days: f64,
    /// Where deleted memories are exported (Parquet) before they go; default: a folder
    /// `<db>.prune-archive` beside a local store (`--archive-dir` overrides).
    pub archive_dir: Option<String>,
    /// The storage trigger: prune only when `memories` holds more rows than this, or
    /// (`trigger_bytes`) more bytes; neither set: prune whenever run.
    pub trigger_rows: Option<u64>,
    pub trigger_bytes: Option<u64>,
}

impl Default for PruneParams {
    fn default() -> Self {
        PruneParams {
            decay_threshold: 0.1,
            emotional_max: 0.3,
            emotional_keep: 0.5,
            idle_days: 30.0,
            min_age_days: 30.0,
            archive_dir: None,
            trigger_rows: None,
            trigger_bytes: None,
        }
    }
}

impl PruneParams {
    /// Thresholds that make sense, or what is wrong with them.
    pub fn validate(&self) -> Result<(), String> {
        let unit = [
            ("decay_threshold", self.decay_threshold),
            ("emotional_max", self.emotional_max),
            ("emotional_keep", self.emotional_keep),
        ];
        for (name, value) in unit {
            if !(0.0..=1.0).contains(&value) {
                return Err(format!("prune.{name} is {value}; it must be in [0, 1]"));
            }
        }
        for (name, value) in [
            ("idle_days", self.idle_days),
            ("min_age_days", self.min_age_days),
        ] {
            if !(value >= 0.0 && value.is_finite()) {
                return Err(format!(
                    "prune.{name} is {value}; it must be a number of days >= 0"
                ));
            }
        }
        if self.emotional_max > self.emotional_keep {
            return Err(format!(
                "prune.emotional_max ({}) is above prune.emotional_keep ({}): a memory could be \
                 both kept for its emotion and pruned for the lack of it",
                self.emotional_max, self.emotional_keep
            ));
        }
        Ok(())
    }
}

/// What prune reads of a memory (times in microseconds).
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
pub struct PruneRow {
    pub id: String,
    pub user_id: String,
    pub kind: String,
    pub state: String,
    pub ttl_policy: String,
    pub salience: f64,
    pub emotional_salience: f64,
    pub created_at: i64,
    pub last_accessed_at: Option<i64>,
    pub archived_at: Option<i64>,
    pub supersession_chain_id: Option<String>,
    pub consolidates_memory_ids: Option<Vec<String>>,
}

/// The strongest kind of memory that holds another in its `consolidates_memory_ids`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Holder {
    /// A consolidated memory (`memlife consolidate`) or any other fold.
    Fold,
    /// A session's narrative.
    Narrative,
    /// A learning pattern (its evidence) or a core memory.
    Evidence,
}

/// Each held memory's strongest holder, over all memories (archived holders too: an archived
/// narrative still tells where its episodes went).
pub fn strongest_holders(rows: &[PruneRow]) -> BTreeMap<&str, Holder> {
    let mut out: BTreeMap<&str, Holder> = BTreeMap::new();
    for row in rows {
        let holder = match (row.kind.as_str(), row.state.as_str()) {
            ("learning_pattern", _) | (_, "core") => Holder::Evidence,
            ("narrative", _) => Holder::Narrative,
            _ => Holder::Fold,
        };
        for member in row.consolidates_memory_ids.iter().flatten() {
            let entry = out.entry(member.as_str()).or_insert(holder);
            *entry = (*entry).max(holder);
        }
    }
    out
}

/// What becomes of a memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum PruneAction {
    Keep,
    Archive,
    Delete,
}

/// A memory's action and the rule that chose it (the report counts them by rule).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PruneVerdict {
    pub action: PruneAction,
    pub rule: &'static str,
}

impl PruneVerdict {
    fn keep(rule: &'static str) -> PruneVerdict {
        PruneVerdict {
            action: PruneAction::Keep,
            rule,
        }
    }
}

/// The verdict on one memory at `now`; `holder` its strongest holder, `under_review` whether
/// a pending review item names it.
pub fn verdict(
    row: &PruneRow,
    holder: Option<Holder>,
    under_review: bool,
    p: &PruneParams,
    now: i64,
) -> PruneVerdict {
    let days = |since: i64| (now - since) as f64 / MICROS_PER_DAY;
    // Protected, whatever its scores.
    if row.ttl_policy == "keep_forever" {
        return PruneVerdict::keep("keep_forever");
    }
    if row.emotional_salience > p.emotional_keep {
        return PruneVerdict::keep("emotional");
    }
    if row.state == "core" || holder == Some(Holder::Evidence) {
        return PruneVerdict::keep("evidence_or_core");
    }
    if under_review {
        return PruneVerdict::keep("under_review");
    }
    if row.supersession_chain_id.is_some() {
        return PruneVerdict::keep("supersession_history");
    }
    // Not a candidate.
    if row.salience >= p.decay_threshold {
        return PruneVerdict::keep("not_decayed");
    }
    if row.emotional_salience >= p.emotional_max {
        return PruneVerdict::keep("not_low_emotion");
    }
    if row
        .last_accessed_at
        .is_some_and(|at| days(at) < p.idle_days)
    {
        return PruneVerdict::keep("recently_used");
    }
    if days(row.created_at) < p.min_age_days {
        return PruneVerdict::keep("too_young");
    }
    // A candidate: provenance is archived, the rest deleted.
    let holds = row
        .consolidates_memory_ids
        .as_ref()
        .is_some_and(|m| !m.is_empty());
    if holder.is_some() || holds {
        let live = row.archived_at.is_none() && row.state != "archived";
        return match live {
            true => PruneVerdict {
                action: PruneAction::Archive,
                rule: "provenance_archived",
            },
            false => PruneVerdict::keep("provenance_already_archived"),
        };
    }
    PruneVerdict {
        action: PruneAction::Delete,
        rule: "deleted",
    }
}

/// A run's plan: the memories to archive and to delete (ids, in order), and how many
/// memories each rule decided.
#[derive(Debug, Default, PartialEq)]
pub struct PrunePlan {
    pub archive: Vec<String>,
    pub delete: Vec<String>,
    pub rules: BTreeMap<&'static str, u64>,
    /// The rule that archived or deleted each memory of `archive` and `delete`.
    pub reasons: BTreeMap<String, &'static str>,
}

/// Plans a run over `rows` (every memory in scope, archived ones too; holders are found among
/// them); `under_review`: memories a pending review item names.
pub fn plan_prune(
    rows: &[PruneRow],
    under_review: &BTreeSet<&str>,
    p: &PruneParams,
    now: i64,
) -> PrunePlan {
    let held = strongest_holders(rows);
    let mut plan = PrunePlan::default();
    for row in rows {
        let v = verdict(
            row,
            held.get(row.id.as_str()).copied(),
            under_review.contains(row.id.as_str()),
            p,
            now,
        );
        *plan.rules.entry(v.rule).or_default() += 1;
        match v.action {
            PruneAction::Keep => continue,
            PruneAction::Archive => plan.archive.push(row.id.clone()),
            PruneAction::Delete => plan.delete.push(row.id.clone()),
        }
        plan.reasons.insert(row.id.clone(), v.rule);
    }
    plan
}

/// Whether a table of `rows` rows and `bytes` bytes passes the storage trigger (none set:
/// always).
pub fn storage_triggered(
    (rows, bytes): (u64, u64),
    (max_rows, max_bytes): (Option<u64>, Option<u64>),
) -> bool {
    match (max_rows, max_bytes) {
        (None, None) => true,
        _ => max_rows.is_some_and(|m| rows > m) || max_bytes.is_some_and(|m| bytes > m),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DAY: i64 = 86_400_000_000;
    const NOW: i64 = 400 * DAY;

    /// A memory every candidate rule lets through: decayed, flat, unused, old.
    fn stale(id: &str) -> PruneRow {
        PruneRow {
            id: id.into(),
            user_id: "u".into(),
            kind: "episode".into(),
            state: "active".into(),
            ttl_policy: "decay".into(),
            salience: 0.05,
            emotional_salience: 0.1,
            created_at: NOW - 100 * DAY,
            last_accessed_at: Some(NOW - 60 * DAY),
            ..PruneRow::default()
        }
    }

    fn rule(row: PruneRow, holder: Option<Holder>, review: bool) -> (PruneAction, &'static str) {
        let v = verdict(&row, holder, review, &PruneParams::default(), NOW);
        (v.action, v.rule)
    }

    /// A case: its name, the row, what holds it, whether it is under review, and the
    /// action with the reason's start.
    type KeepCase<'a> = (
        &'a str,
        PruneRow,
        Option<Holder>,
        bool,
        (PruneAction, &'a str),
    );

    #[test]
    fn each_keep_rule_protects_what_it_should() {
        use PruneAction::*;
        let cases: Vec<KeepCase> = vec![
            (
                "a candidate nothing holds",
                stale("a"),
                None,
                false,
                (Delete, "deleted"),
            ),
            (
                "keep_forever",
                PruneRow {
                    ttl_policy: "keep_forever".into(),
                    ..stale("a")
                },
                None,
                false,
                (Keep, "keep_forever"),
            ),
            (
                "emotional above the keep bar",
                PruneRow {
                    emotional_salience: 0.6,
                    ..stale("a")
                },
                None,
                false,
                (Keep, "emotional"),
            ),
            (
                "emotional between the bars is no candidate",
                PruneRow {
                    emotional_salience: 0.4,
                    ..stale("a")
                },
                None,
                false,
                (Keep, "not_low_emotion"),
            ),
            (
                "a core memory",
                PruneRow {
                    state: "core".into(),
                    ..stale("a")
                },
                None,
                false,
                (Keep, "evidence_or_core"),
            ),
            (
                "a pattern's evidence",
                stale("a"),
                Some(Holder::Evidence),
                false,
                (Keep, "evidence_or_core"),
            ),
            (
                "under review",
                stale("a"),
                None,
                true,
                (Keep, "under_review"),
            ),
            (
                "a version of a chain",
                PruneRow {
                    supersession_chain_id: Some("c".into()),
                    ..stale("a")
                },
                None,
                false,
                (Keep, "supersession_history"),
            ),
            (
                "salience at the threshold",
                PruneRow {
                    salience: 0.1,
                    ..stale("a")
                },
                None,
                false,
                (Keep, "not_decayed"),
            ),
            (
                "used 29 days ago",
                PruneRow {
                    last_accessed_at: Some(NOW - 29 * DAY),
                    ..stale("a")
                },
                None,
                false,
                (Keep, "recently_used"),
            ),
            (
                "never used, but 20 days old",
                PruneRow {
                    last_accessed_at: None,
                    created_at: NOW - 20 * DAY,
                    ..stale("a")
                },
                None,
                false,
                (Keep, "too_young"),
            ),
            (
                "never used and old",
                PruneRow {
                    last_accessed_at: None,
                    ..stale("a")
                },
                None,
                false,
                (Delete, "deleted"),
            ),
            (
                "a narrative's episode",
                stale("a"),
                Some(Holder::Narrative),
                false,
                (Archive, "provenance_archived"),
            ),
            (
                "a consolidated member",
                stale("a"),
                Some(Holder::Fold),
                false,
                (Archive, "provenance_archived"),
            ),
            (
                "a narrative holding episodes",
                PruneRow {
                    kind: "narrative".into(),
                    consolidates_memory_ids: Some(vec!["e".into()]),
                    ..stale("a")
                },
                None,
                false,
                (Archive, "provenance_archived"),
            ),
            (
                "an archived member stays archived",
                PruneRow {
                    state: "archived".into(),
                    archived_at: Some(NOW - 50 * DAY),
                    ..stale("a")
                },
                Some(Holder::Fold),
                false,
                (Keep, "provenance_already_archived"),
            ),
            (
                "an archived memory nothing holds",
                PruneRow {
                    state: "archived".into(),
                    archived_at: Some(NOW - 50 * DAY),
                    ..stale("a")
                },
                None,
                false,
                (Delete, "deleted"),
            ),
        ];
        for (name, row, holder, review, want) in cases {
            assert_eq!(rule(row, holder, review), want, "{name}");
        }
    }

    #[test]
    fn the_strongest_holder_counts_and_a_plan_sorts_memories_by_action() {
        let pattern = PruneRow {
            kind: "learning_pattern".into(),
            salience: 0.9,
            consolidates_memory_ids: Some(vec!["n".into()]),
            ..stale("p")
        };
        let narrative = PruneRow {
            kind: "narrative".into(),
            salience: 0.9,
            consolidates_memory_ids: Some(vec!["e1".into(), "e2".into()]),
            ..stale("n")
        };
        let fold = PruneRow {
            kind: "fact".into(),
            salience: 0.9,
            consolidates_memory_ids: Some(vec!["e2".into()]),
            ..stale("f")
        };
        let rows = vec![
            pattern,
            narrative,
            fold,
            stale("e1"),
            stale("e2"),
            stale("x"),
        ];
        let held = strongest_holders(&rows);
        assert_eq!(held["n"], Holder::Evidence);
        assert_eq!(held["e1"], Holder::Narrative);
        assert_eq!(held["e2"], Holder::Narrative, "a narrative outranks a fold");
        let plan = plan_prune(&rows, &BTreeSet::new(), &PruneParams::default(), NOW);
        assert_eq!(plan.archive, ["e1", "e2"]);
        assert_eq!(plan.delete, ["x"]);
        assert_eq!(plan.rules["not_decayed"], 2);
        assert_eq!(plan.rules["evidence_or_core"], 1);
        let review = BTreeSet::from(["x"]);
        let plan = plan_prune(&rows, &review, &PruneParams::default(), NOW);
        assert!(plan.delete.is_empty());
    }

    #[test]
    fn thresholds_are_checked_and_the_trigger_fires_past_either_bound() {
        assert!(PruneParams::default().validate().is_ok());
        let bad = PruneParams {
            emotional_max: 0.7,
            ..PruneParams::default()
        };
        assert!(bad.validate().unwrap_err().contains("emotional_max"));
        let bad = PruneParams {
            idle_days: -1.0,
            ..PruneParams::default()
        };
        assert!(bad.validate().is_err());
        assert!(storage_triggered((10, 10), (None, None)));
        assert!(!storage_triggered((10, 10), (Some(10), Some(10))));
        assert!(storage_triggered((11, 10), (Some(10), None)));
        assert!(storage_triggered((1, 11), (Some(10), Some(10))));
    }
}
