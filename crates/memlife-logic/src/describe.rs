//! What `memlife describe` decides, apart from what it reads and writes: given the dirty
//! entities and the description each got (the judge's, or the offline rules' when no trusted
//! reply came), which entities change, their DESCRIBE audit rows (the old description kept),
//! the rows to write back, and which only lose their dirty flag.

use serde_json::json;

use crate::rows::{AuditRow, EntityRow};

/// The description one dirty entity got, and whether the offline rules gave it.
pub struct Described {
    pub description: String,
    pub offline: bool,
}

/// The describe plan: rows to write (description set, unflagged; their vectors still to be
/// made from `embedding_text`), the audit rows to log first, and the ids whose description
/// came out as it was (only their flag is cleared).
#[derive(Debug, Default, PartialEq)]
pub struct DescribePlan {
    pub changed: Vec<EntityRow>,
    pub audit: Vec<AuditRow>,
    pub unchanged: Vec<String>,
    pub offline_fallbacks: u64,
}

/// The text an entity's vector is made from: name, description, notes oldest first (at most
/// 1000 characters).
pub fn embedding_text(row: &EntityRow) -> String {
    let mut text = format!("{}: {}", row.name, row.description.as_deref().unwrap_or(""));
    for note in row.notes_oldest_first() {
        text.push(' ');
        text.push_str(&note.text);
    }
    text.chars().take(1000).collect()
}

/// Plans run `run_id`'s updates at `now`: `dirty[i]` got `described[i]`. A description equal
/// to the current one (trimmed) changes nothing but the flag.
pub fn plan_descriptions(
    run_id: &str,
    dirty: &[EntityRow],
    described: &[Described],
    now: i64,
) -> DescribePlan {
    let mut plan = DescribePlan::default();
    for (row, got) in dirty.iter().zip(described) {
        plan.offline_fallbacks += u64::from(got.offline);
        let new = got.description.trim();
        let old = row.description.clone().unwrap_or_default();
        if new == old.trim() {
            plan.unchanged.push(row.id.clone());
            continue;
        }
        let mut audit = AuditRow::new(run_id, "DESCRIBE", &format!("{}|{new}", row.id), now);
        audit.user_id = Some(row.user_id.clone());
        audit.source_ids = vec![row.id.clone()];
        audit.before_state = Some(json!({"description": old}).to_string());
        audit.after_state = Some(json!({"description": new}).to_string());
        plan.audit.push(audit);
        plan.changed.push(EntityRow {
            description: Some(new.to_string()),
            is_dirty: false,
            updated_at: now,
            ..row.clone()
        });
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::Note;

    fn entity(id: &str, description: Option<&str>) -> EntityRow {
        EntityRow {
            id: id.into(),
            description: description.map(str::to_string),
            ..EntityRow::new("u", &format!("name {id}"), "person", 1_000)
        }
    }

    fn got(text: &str, offline: bool) -> Described {
        Described {
            description: text.into(),
            offline,
        }
    }

    #[test]
    fn a_new_description_is_logged_with_the_old_one_and_clears_the_flag() {
        let dirty = [entity("e1", Some("a friend")), entity("e2", None)];
        let plan = plan_descriptions(
            "r1",
            &dirty,
            &[got("  a friend ", false), got("Ana's sister", true)],
            9_000,
        );
        assert_eq!(plan.unchanged, ["e1"]);
        assert_eq!(plan.offline_fallbacks, 1);
        assert_eq!(plan.changed.len(), 1);
        let row = &plan.changed[0];
        assert_eq!(
            (row.id.as_str(), row.description.as_deref()),
            ("e2", Some("Ana's sister"))
        );
        assert!(!row.is_dirty && row.updated_at == 9_000 && row.created_at == 1_000);
        let audit = &plan.audit[0];
        assert_eq!(audit.operation, "DESCRIBE");
        assert_eq!(audit.source_ids, ["e2"]);
        assert_eq!(audit.before_state.as_deref(), Some(r#"{"description":""}"#));
        assert_eq!(
            audit.after_state.as_deref(),
            Some(r#"{"description":"Ana's sister"}"#)
        );
    }

    #[test]
    fn the_vector_text_holds_name_description_and_notes_oldest_first_within_1000_chars() {
        let mut row = entity("e1", Some("a friend"));
        row.notes = vec![
            Note {
                text: "second".into(),
                added_at: 20,
                expires_at: None,
            },
            Note {
                text: "first".into(),
                added_at: 10,
                expires_at: None,
            },
        ];
        assert_eq!(embedding_text(&row), "name e1: a friend first second");
        row.description = Some("é".repeat(2000));
        assert_eq!(embedding_text(&row).chars().count(), 1000);
    }
}
