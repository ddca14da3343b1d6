//! What `memlife undo` decides about an `integrate` or `review` run without the store: what
//! the run's decisions wrote (read from their audit rows: the memories as the run left them,
//! the changed ones as they were, the ones it created, its links and queued review items),
//! which later changes forbid the undo, and the `UNDO` audit row of each reverted decision.
//! The command reads the rows, asks these, logs, and reverts.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::rows::{AuditRow, MemoryRow, derived_id};

/// The id of the `UNDO` audit row that reverts the audit row `undone`.
pub fn undo_id(undone: &str) -> String {
    derived_id(&format!("undo|{undone}"))
}

/// An audit row of a decision the run applied, as undo reads it.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct LoggedDecision {
    pub id: String,
    pub user_id: Option<String>,
    pub operation: String,
    pub target_id: Option<String>,
    pub before_state: Option<String>,
    pub after_state: Option<String>,
}

/// A link by its key: (source, target, link type).
pub type LinkKey = (String, String, String);

/// What a run's decisions wrote: the memories as the run left them, the ones it changed as
/// they were before, the ones it created, its links and the review items it queued.
#[derive(Debug, Default)]
pub struct Written {
    pub memories: BTreeMap<String, MemoryRow>,
    pub restore: BTreeMap<String, MemoryRow>,
    pub created: BTreeSet<String>,
    pub links: Vec<LinkKey>,
    pub queued: Vec<String>,
}

/// Reads the decisions' logged rows; `read` turns logged memory objects into rows (the
/// table's defaults fill what an older log lacks) or says why it cannot.
pub fn written_by(
    decisions: &[LoggedDecision],
    read: impl Fn(&[Value]) -> Result<Vec<MemoryRow>, String>,
) -> Result<Written, String> {
    let mut w = Written::default();
    let memories = |values: &[Value], d: &LoggedDecision| {
        read(values)
            .map_err(|e| format!("audit row {} holds a memory that does not read: {e}", d.id))
    };
    for d in decisions {
        let after: Value = serde_json::from_str(d.after_state.as_deref().unwrap_or("{}"))
            .map_err(|e| format!("audit row {}: after_state is not JSON: {e}", d.id))?;
        let before: Option<Value> = d
            .before_state
            .as_deref()
            .and_then(|b| serde_json::from_str::<Value>(b).ok())
            .filter(Value::is_object);
        let before_id = before.as_ref().and_then(|b| b["id"].as_str());
        let objects: Vec<Value> = after["memories"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|m| m.is_object())
            .cloned()
            .collect();
        for m in memories(&objects, d)? {
            let id = m.id.clone();
            w.memories.insert(id.clone(), m);
            match &before {
                // The memory the decision changed: its row as it was before.
                Some(b) if before_id == Some(id.as_str()) => {
                    let was = memories(std::slice::from_ref(b), d)?;
                    w.restore.extend(was.into_iter().map(|r| (id.clone(), r)));
                }
                _ => {
                    w.created.insert(id);
                }
            }
        }
        for l in after["links"].as_array().into_iter().flatten() {
            let end = |k: &str| l[k].as_str().unwrap_or("").to_string();
            w.links
                .push((end("source_id"), end("target_id"), end("link_type")));
        }
        if let Some(id) = after["review"]["id"].as_str() {
            w.queued.push(id.to_string());
        }
    }
    Ok(w)
}

/// Whether two versions of a memory agree in the columns a later run's change shows in:
/// text, update time, validity, chain, archival and what it consolidates.
pub fn unchanged_since(a: &MemoryRow, b: &MemoryRow) -> bool {
    let watched = |m: &MemoryRow| {
        (
            m.text.clone(),
            m.updated_at,
            m.valid_until,
            m.superseded_by.clone(),
            m.supersession_chain_id.clone(),
            m.archived_at,
            m.consolidates_memory_ids.clone(),
        )
    };
    watched(a) == watched(b)
}

/// A review item decided since the run queued it: (id, status, deciding run).
pub type DecidedItem = (String, String, Option<String>);

/// What later runs changed of what run `run_id` wrote, each one a reason to refuse the whole
/// undo. `current`: the written memories as they are now; `links`: the stored links touching
/// a memory the run created; `decided`: its queued items no longer pending.
pub fn conflicts(
    run_id: &str,
    w: &Written,
    current: &BTreeMap<String, MemoryRow>,
    links: &[LinkKey],
    decided: &[DecidedItem],
) -> Vec<String> {
    let mut found: Vec<String> = Vec::new();
    for (id, after) in &w.memories {
        match current.get(id) {
            // Already deleted by a killed undo of this run.
            None if w.created.contains(id) => {}
            None => found.push(format!("memory {id} no longer exists")),
            Some(now) if unchanged_since(now, after) => {}
            // Restored already by a killed undo of this run.
            Some(now) if w.restore.get(id).is_some_and(|b| unchanged_since(now, b)) => {}
            Some(_) => found.push(format!(
                "memory {id} changed after run {run_id} (a later run rewrote it)"
            )),
        }
    }
    let own: BTreeSet<&LinkKey> = w.links.iter().collect();
    for key in links.iter().filter(|k| !own.contains(k)) {
        found.push(format!(
            "link {} -> {} ({}) was made by a later run to a memory run {run_id} created",
            key.0, key.1, key.2
        ));
    }
    for (id, status, by) in decided {
        found.push(format!(
            "review item {id} was {status} by run {} since: undo that run first",
            by.as_deref().unwrap_or("")
        ));
    }
    found
}

/// The `UNDO` audit rows of undo run `undo_run` at `now`, one per reverted decision of run
/// `run_id`, each with its target as it is now and as it will be restored; written before
/// anything changes.
pub fn undo_rows(
    (undo_run, run_id): (&str, &str),
    decisions: &[LoggedDecision],
    w: &Written,
    current: &BTreeMap<String, MemoryRow>,
    now: i64,
) -> Vec<AuditRow> {
    decisions
        .iter()
        .map(|d| {
            let target = d.target_id.clone().unwrap_or_default();
            let mut row = AuditRow::new(undo_run, "UNDO", "", now);
            row.id = undo_id(&d.id);
            row.user_id = d.user_id.clone();
            row.source_ids = vec![d.id.clone()];
            row.target_id = Some(target.clone());
            row.classification = Some(format!("REVERTED {}", d.operation));
            row.before_state = current.get(&target).map(|r| r.to_json().to_string());
            row.after_state = w.restore.get(&target).map(|r| r.to_json().to_string());
            row.reasoning = Some(format!("undo of run {run_id}"));
            row
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn memory(id: &str, text: &str, updated_at: i64) -> MemoryRow {
        MemoryRow {
            id: id.into(),
            updated_at,
            ..MemoryRow::new("u", text, 1)
        }
    }

    /// Reads logged memories as the table would: id and text, the rest default.
    fn read(values: &[Value]) -> Result<Vec<MemoryRow>, String> {
        values
            .iter()
            .map(|v| match (v["id"].as_str(), v["text"].as_str()) {
                (Some(id), Some(text)) => {
                    Ok(memory(id, text, v["updated_at"].as_i64().unwrap_or(0)))
                }
                _ => Err("no id or text".to_string()),
            })
            .collect()
    }

    fn decision(id: &str, before: Option<Value>, after: Value) -> LoggedDecision {
        LoggedDecision {
            id: id.into(),
            operation: "UPDATE".into(),
            target_id: Some("m1".into()),
            before_state: before.map(|b| b.to_string()),
            after_state: Some(after.to_string()),
            ..LoggedDecision::default()
        }
    }

    fn written() -> Written {
        let decisions = [
            decision(
                "d1",
                Some(json!({"id": "m1", "text": "lives in Oslo", "updated_at": 1})),
                json!({"memories": [{"id": "m1", "text": "lives in Bergen", "updated_at": 5}]}),
            ),
            decision(
                "d2",
                None,
                json!({
                    "memories": [{"id": "m2", "text": "has a cat", "updated_at": 5}],
                    "links": [{"source_id": "m2", "target_id": "m1", "link_type": "related"}],
                    "review": {"id": "r1"},
                }),
            ),
        ];
        written_by(&decisions, read).unwrap()
    }

    #[test]
    fn a_run_wrote_what_its_decisions_logged() {
        let w = written();
        assert_eq!(w.memories.len(), 2);
        assert_eq!(w.restore["m1"].text, "lives in Oslo");
        assert_eq!(w.created, BTreeSet::from(["m2".to_string()]));
        assert_eq!(w.links, [("m2".into(), "m1".into(), "related".into())]);
        assert_eq!(w.queued, ["r1"]);
        let bad = [decision("d3", None, json!({"memories": [{"id": "x"}]}))];
        let err = written_by(&bad, read).unwrap_err();
        assert!(err.contains("audit row d3"), "{err}");
    }

    #[test]
    fn an_undo_refuses_what_later_runs_changed_and_finishes_what_it_began() {
        let w = written();
        let as_left: BTreeMap<String, MemoryRow> = w.memories.clone();
        assert!(conflicts("r", &w, &as_left, &w.links, &[]).is_empty());
        // A killed undo restored m1 and deleted m2: rerunning it is no conflict.
        let half = BTreeMap::from([("m1".to_string(), w.restore["m1"].clone())]);
        assert!(conflicts("r", &w, &half, &[], &[]).is_empty());
        // A later run rewrote m1, linked to m2 and decided the queued item.
        let later = BTreeMap::from([
            ("m1".to_string(), memory("m1", "lives in Bergen", 9)),
            ("m2".to_string(), w.memories["m2"].clone()),
        ]);
        let theirs = ("m3".to_string(), "m2".to_string(), "related".to_string());
        let decided = [(
            "r1".to_string(),
            "approved".to_string(),
            Some("r9".to_string()),
        )];
        let found = conflicts("r", &w, &later, &[theirs], &decided);
        assert_eq!(found.len(), 3, "{found:#?}");
        assert!(found[0].contains("memory m1 changed after run r"));
        assert!(found[1].contains("link m3 -> m2"));
        assert!(found[2].contains("review item r1 was approved by run r9"));
        // A memory the run changed that is gone is a conflict; a created one is not.
        let gone = BTreeMap::new();
        let found = conflicts("r", &w, &gone, &[], &[]);
        assert_eq!(found, ["memory m1 no longer exists"]);
    }

    #[test]
    fn each_reverted_decision_is_logged_with_its_target_now_and_after() {
        let w = written();
        let decisions = [decision("d1", None, json!({}))];
        let rows = undo_rows(("u1", "r"), &decisions, &w, &w.memories, 7);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].id, undo_id("d1"));
        assert_eq!(rows[0].classification.as_deref(), Some("REVERTED UPDATE"));
        assert!(rows[0].before_state.as_deref().unwrap().contains("Bergen"));
        assert!(rows[0].after_state.as_deref().unwrap().contains("Oslo"));
        assert_ne!(undo_id("d1"), undo_id("d2"));
    }
}
