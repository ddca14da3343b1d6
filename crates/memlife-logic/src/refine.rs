//! Refinement's decision about one memory (seed 000's "Memory Refinement"): the judge's
//! answer in, the audit row that records it out. A TRIM rewrites the memory's text (logged as
//! UPDATE), a SPLIT makes one new memory per part, each `split_from` the original (the
//! original stays); a KEEP, a failure or a memory that changed since the judge read it
//! writes nothing. The row's `after_state` holds what applying it writes, so a killed run's
//! refinements are finished from the log.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::rows::{AuditRow, LinkRow, MemoryRow, derived_id};

/// What the judge may answer about a verbose memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RefineAction {
    Keep,
    Trim,
    Split,
}

/// The judge's answer about one memory, as refinement reads it.
pub enum RefineAnswer<'a> {
    /// The call failed (asked again later).
    Failed(&'a str),
    /// No refine reply came.
    Missing,
    Reply {
        action: RefineAction,
        parts: &'a [String],
        confidence: f64,
        reasoning: &'a str,
    },
}

/// An answer planned: its audit row, and what it counts for the run's report.
pub struct RefinePlan {
    pub audit: AuditRow,
    /// "kept", "trimmed", "split", "stale" (none for a failure).
    pub counted: Option<&'static str>,
    /// Memories a SPLIT creates.
    pub created: usize,
    /// Why the answer failed, for the report's failures.
    pub failure: Option<String>,
}

/// The id of the audit row of one answer about `memory_id`: keyed by the memory and where
/// the answer was given (the run's clock online, so a rerun at the same clock finds it; the
/// batch in batch mode), whatever the answer.
pub fn answer_id(memory_id: &str, origin: &str) -> String {
    derived_id(&format!("refine|{memory_id}|{origin}"))
}

/// The part `k` of a SPLIT of `memory`: a new memory with the original's owner, kind,
/// importance, times and tags, made from it (within the refinement cooldown, like it).
fn part_of(memory: &MemoryRow, k: usize, part: &str, now: i64) -> MemoryRow {
    let id = &memory.id;
    MemoryRow {
        id: derived_id(&format!("split|{id}|{k}|{part}")),
        kind: memory.kind.clone(),
        source: Some("refine".into()),
        importance: memory.importance,
        updated_at: now,
        valid_from: memory.valid_from,
        happens_at: memory.happens_at,
        tags: memory.tags.clone(),
        consolidates_memory_ids: vec![id.clone()],
        last_refined_at: Some(now),
        ..MemoryRow::new(&memory.user_id, part, memory.created_at)
    }
}

/// One answer about the memory the judge was shown (`seen_id`, `seen_text`) as its audit row:
/// SPLIT or UPDATE (TRIM), applied once it is written; NOOP with KEEP (a refusal), FAILED
/// (asked again later) or STALE (`memory`, the row as it is now, changed or was archived
/// since the judge read it, or is gone).
pub fn plan_answer(
    (run_id, origin): (&str, &str),
    memory: Option<&MemoryRow>,
    (seen_id, seen_text): (&str, &str),
    answer: &RefineAnswer,
    now: i64,
) -> RefinePlan {
    let id = seen_id.to_string();
    let noop = |classification: &str, reasoning: String| {
        let mut row = AuditRow::new(run_id, "NOOP", "", now);
        row.id = answer_id(&id, origin);
        row.source_ids = vec![id.clone()];
        row.target_id = Some(id.clone());
        row.classification = Some(classification.to_string());
        row.reasoning = Some(reasoning);
        row.user_id = memory.map(|m| m.user_id.clone());
        row
    };
    let planned = |audit, counted, created, failure| RefinePlan {
        audit,
        counted,
        created,
        failure,
    };
    let current =
        memory.filter(|m| m.text == seen_text && m.archived_at.is_none() && m.state != "archived");
    match (answer, current) {
        (RefineAnswer::Failed(failure), _) => planned(
            noop("FAILED", failure.to_string()),
            None,
            0,
            Some(format!("refine: {failure}")),
        ),
        (_, None) => planned(
            noop(
                "STALE",
                "the memory changed or was archived since the judge read it".into(),
            ),
            Some("stale"),
            0,
            None,
        ),
        (RefineAnswer::Missing, Some(_)) => {
            planned(noop("FAILED", "no refine reply".into()), None, 0, None)
        }
        (
            RefineAnswer::Reply {
                action,
                parts,
                confidence,
                reasoning,
            },
            Some(memory),
        ) => {
            let (operation, rows, links, counted) = match action {
                RefineAction::Keep => {
                    return planned(noop("KEEP", reasoning.to_string()), Some("kept"), 0, None);
                }
                RefineAction::Trim => {
                    let mut row = memory.clone();
                    row.text = parts[0].clone();
                    row.updated_at = now;
                    ("UPDATE", vec![row], Vec::new(), "trimmed")
                }
                RefineAction::Split => {
                    let rows: Vec<MemoryRow> = parts
                        .iter()
                        .enumerate()
                        .map(|(k, part)| part_of(memory, k, part, now))
                        .collect();
                    let links = rows
                        .iter()
                        .map(|r| {
                            let ends = (r.id.as_str(), id.as_str(), memory.user_id.as_str());
                            let why = "split from the target by refine";
                            LinkRow::judged(ends, "split_from", *confidence, why, now).to_json()
                        })
                        .collect::<Vec<_>>();
                    ("SPLIT", rows, links, "split")
                }
            };
            let created = if *action == RefineAction::Split {
                rows.len()
            } else {
                0
            };
            let mut row = AuditRow::new(run_id, operation, "", now);
            row.id = answer_id(&id, origin);
            row.user_id = Some(memory.user_id.clone());
            row.source_ids = vec![id.clone()];
            row.target_id = Some(id.clone());
            row.classification = Some(format!("{action:?}").to_uppercase());
            row.confidence = Some(confidence.clamp(0.0, 1.0));
            row.reasoning = Some(reasoning.to_string());
            row.before_state = Some(json!({"text": memory.text}).to_string());
            let rows: Vec<Value> = rows.iter().map(MemoryRow::to_json).collect();
            row.after_state =
                Some(json!({"original": id, "memories": rows, "links": links}).to_string());
            planned(row, Some(counted), created, None)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verbose() -> MemoryRow {
        MemoryRow {
            id: "m1".into(),
            kind: "episode".into(),
            importance: 0.7,
            tags: vec!["trips".into()],
            happens_at: Some(7),
            state: "active".into(),
            ..MemoryRow::new("u1", "Ana went to Porto, and she also bought a bike.", 100)
        }
    }

    fn reply<'a>(action: RefineAction, parts: &'a [String]) -> RefineAnswer<'a> {
        RefineAnswer::Reply {
            action,
            parts,
            confidence: 0.9,
            reasoning: "two facts",
        }
    }

    fn after(plan: &RefinePlan) -> Value {
        serde_json::from_str(plan.audit.after_state.as_deref().unwrap()).unwrap()
    }

    #[test]
    fn a_split_makes_one_memory_per_part_from_the_original() {
        let m = verbose();
        let parts = vec![
            "Ana went to Porto.".to_string(),
            "Ana bought a bike.".to_string(),
        ];
        let plan = plan_answer(
            ("r", "o"),
            Some(&m),
            ("m1", &m.text),
            &reply(RefineAction::Split, &parts),
            500,
        );
        assert_eq!(
            (plan.audit.operation, plan.counted, plan.created),
            ("SPLIT", Some("split"), 2)
        );
        assert_eq!(plan.audit.id, answer_id("m1", "o"));
        let logged = after(&plan);
        assert_eq!(logged["original"], "m1");
        let made = logged["memories"].as_array().unwrap();
        assert_eq!(made.len(), 2);
        assert_eq!(made[1]["text"], "Ana bought a bike.");
        assert_eq!(made[1]["kind"], "episode");
        assert_eq!(made[1]["importance"], 0.7);
        assert_eq!(made[1]["consolidates_memory_ids"], json!(["m1"]));
        assert_eq!(
            made[1]["last_refined_at"],
            crate::rows::format_timestamp(500)
        );
        assert_eq!(made[1]["created_at"], crate::rows::format_timestamp(100));
        assert_eq!(made[1]["state"], "candidate", "a new memory starts as one");
        assert_eq!(logged["links"][0]["link_type"], "split_from");
        assert_eq!(logged["links"][0]["target_id"], "m1");
        assert_ne!(made[0]["id"], made[1]["id"]);
    }

    #[test]
    fn a_trim_rewrites_the_text_and_a_keep_writes_nothing() {
        let m = verbose();
        let parts = vec!["Ana went to Porto and bought a bike.".to_string()];
        let plan = plan_answer(
            ("r", "o"),
            Some(&m),
            ("m1", &m.text),
            &reply(RefineAction::Trim, &parts),
            500,
        );
        assert_eq!(
            (plan.audit.operation, plan.counted),
            ("UPDATE", Some("trimmed"))
        );
        let logged = after(&plan);
        assert_eq!(logged["memories"][0]["id"], "m1");
        assert_eq!(logged["memories"][0]["text"], parts[0].as_str());
        let keep = plan_answer(
            ("r", "o"),
            Some(&m),
            ("m1", &m.text),
            &reply(RefineAction::Keep, &[]),
            500,
        );
        assert_eq!((keep.audit.operation, keep.counted), ("NOOP", Some("kept")));
        assert_eq!(keep.audit.classification.as_deref(), Some("KEEP"));
        assert_eq!(keep.audit.after_state, None);
    }

    #[test]
    fn a_memory_changed_since_the_judge_read_it_is_left_alone() {
        let m = verbose();
        let parts = vec!["Ana went to Porto.".to_string()];
        let answer = reply(RefineAction::Trim, &parts);
        let edited = plan_answer(("r", "o"), Some(&m), ("m1", "an older text"), &answer, 500);
        assert_eq!(edited.audit.classification.as_deref(), Some("STALE"));
        let archived = MemoryRow {
            archived_at: Some(1),
            ..verbose()
        };
        let plan = plan_answer(("r", "o"), Some(&archived), ("m1", &m.text), &answer, 500);
        assert_eq!(plan.audit.classification.as_deref(), Some("STALE"));
        let gone = plan_answer(
            ("r", "o"),
            None,
            ("m1", &m.text),
            &RefineAnswer::Missing,
            500,
        );
        assert_eq!(
            (gone.audit.classification.as_deref(), gone.counted),
            (Some("STALE"), Some("stale"))
        );
        let failed = plan_answer(
            ("r", "o"),
            Some(&m),
            ("m1", &m.text),
            &RefineAnswer::Failed("timeout"),
            500,
        );
        assert_eq!(failed.audit.classification.as_deref(), Some("FAILED"));
        assert_eq!(failed.failure.as_deref(), Some("refine: timeout"));
        assert_eq!(failed.audit.user_id.as_deref(), Some("u1"));
    }
}
