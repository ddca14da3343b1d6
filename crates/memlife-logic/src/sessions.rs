//! `memlife sessions`'s decisions (seed 004 "Session Consolidator"): which sessions have ended
//! (no new memory for the gap) and have no narrative yet, which of their memories the
//! narrative is told from (episodes first, then facts, at most the configured number), the
//! narrative's text from its parts (summary, key interactions, emotional arc, unresolved
//! threads), its row, and the compression the run achieved. The job reads, asks the LLM
//! layer (or the offline judge) for each session's parts, plans with these and writes.

use std::collections::BTreeMap;

use crate::rows::{MemoryRow, derived_id};

/// Seed 004's session settings.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SessionParams {
    /// A session has ended when its newest memory is at least this old.
    pub gap_minutes: f64,
    /// The most memories one narrative is told from (episodes first).
    pub max_memories: usize,
    /// A session with fewer memories is not told (one memory is its own narrative).
    pub min_memories: usize,
}

impl Default for SessionParams {
    fn default() -> Self {
        SessionParams {
            gap_minutes: 30.0,
            max_memories: 50,
            min_memories: 2,
        }
    }
}

impl SessionParams {
    pub fn validate(&self) -> Result<(), String> {
        if !(self.gap_minutes >= 0.0 && self.gap_minutes.is_finite()) {
            return Err(format!(
                "sessions.gap_minutes is {}; it must be a number of minutes >= 0",
                self.gap_minutes
            ));
        }
        if self.max_memories < 1 || self.min_memories > self.max_memories {
            return Err(format!(
                "sessions.min_memories ({}) and max_memories ({}) must satisfy 1 <= min <= max",
                self.min_memories, self.max_memories
            ));
        }
        Ok(())
    }
}

/// The kinds a narrative is told from, in priority order (seed 004 filters a session's
/// experiences by type; narratives, patterns and summaries are not told again).
pub const TOLD_KINDS: &[&str] = &["episode", "fact"];

/// What sessions reads of a memory (times in microseconds).
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
pub struct SessionMemory {
    pub id: String,
    pub user_id: String,
    pub session_id: Option<String>,
    pub kind: String,
    pub text: String,
    pub created_at: i64,
    pub emotional_salience: f64,
    pub archived_at: Option<i64>,
}

/// The id of the narrative of `user`'s session `session`: one per session, so a rerun finds
/// it written.
pub fn narrative_id(user: &str, session: &str) -> String {
    derived_id(&format!("narrative|{user}|{session}"))
}

/// A session to tell: its user and id, and the memories the narrative is told from, oldest
/// first.
#[derive(Debug, Clone, PartialEq)]
pub struct EndedSession<'a> {
    pub user: &'a str,
    pub session: &'a str,
    pub narrative_id: String,
    pub memories: Vec<&'a SessionMemory>,
    /// The session's told-kind memories left out past `max_memories`.
    pub left_out: usize,
}

/// The sessions that ended by `now` and have no narrative (`told`: narrative ids present),
/// each with the memories to tell, by (user, session). Archived memories and memories of
/// other kinds are not told; a session of fewer than `min_memories` is skipped.
pub fn ended_sessions<'a>(
    memories: &'a [SessionMemory],
    told: &std::collections::BTreeSet<String>,
    p: &SessionParams,
    now: i64,
) -> Vec<EndedSession<'a>> {
    let mut by_session: BTreeMap<(&str, &str), Vec<&SessionMemory>> = BTreeMap::new();
    for m in memories {
        if let Some(session) = m.session_id.as_deref() {
            by_session
                .entry((m.user_id.as_str(), session))
                .or_default()
                .push(m);
        }
    }
    let gap = (p.gap_minutes * 60_000_000.0) as i64;
    let mut out = Vec::new();
    for ((user, session), all) in by_session {
        // Any memory of the session, told or not, keeps it open.
        let newest = all.iter().map(|m| m.created_at).max().unwrap_or(i64::MAX);
        if now - newest < gap {
            continue;
        }
        let id = narrative_id(user, session);
        if told.contains(&id) {
            continue;
        }
        let priority = |m: &SessionMemory| TOLD_KINDS.iter().position(|k| *k == m.kind);
        let mut candidates: Vec<&SessionMemory> = all
            .into_iter()
            .filter(|m| m.archived_at.is_none() && priority(m).is_some())
            .collect();
        if candidates.len() < p.min_memories {
            continue;
        }
        candidates.sort_by_key(|m| (priority(m), m.created_at, m.id.clone()));
        let left_out = candidates.len().saturating_sub(p.max_memories);
        candidates.truncate(p.max_memories);
        candidates.sort_by_key(|m| (m.created_at, m.id.clone()));
        out.push(EndedSession {
            user,
            session,
            narrative_id: id,
            memories: candidates,
            left_out,
        });
    }
    out
}

/// A narrative's parts, as the LLM layer (or the offline judge) gives them.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct NarrativeParts {
    pub summary: String,
    pub key_interactions: Vec<String>,
    pub emotional_arc: String,
    pub unresolved_threads: Vec<String>,
}

/// The narrative's text: the summary, then each part on its own line when there is one.
pub fn narrative_text(parts: &NarrativeParts) -> String {
    let mut lines = vec![parts.summary.trim().to_string()];
    let list = |items: &[String]| {
        items
            .iter()
            .map(|s| s.trim())
            .filter(|s| !s.is_empty())
            .collect::<Vec<_>>()
            .join("; ")
    };
    let interactions = list(&parts.key_interactions);
    if !interactions.is_empty() {
        lines.push(format!("Key interactions: {interactions}"));
    }
    if !parts.emotional_arc.trim().is_empty() {
        lines.push(format!("Emotional arc: {}", parts.emotional_arc.trim()));
    }
    let threads = list(&parts.unresolved_threads);
    if !threads.is_empty() {
        lines.push(format!("Unresolved: {threads}"));
    }
    lines.join("\n")
}

/// The narrative memory of `s` (without its embedding), written at `now`: created when the
/// session ended (its newest told memory), holding the told memories as what it consolidates,
/// as emotional as its most emotional memory.
pub fn narrative_row(s: &EndedSession<'_>, parts: &NarrativeParts, now: i64) -> MemoryRow {
    let ended = s.memories.iter().map(|m| m.created_at).max().unwrap_or(now);
    let emotional = s
        .memories
        .iter()
        .map(|m| m.emotional_salience)
        .fold(0.0, f64::max);
    MemoryRow {
        id: s.narrative_id.clone(),
        kind: "narrative".into(),
        session_id: Some(s.session.to_string()),
        source: Some("sessions".into()),
        emotional_salience: emotional,
        updated_at: now,
        consolidates_memory_ids: s.memories.iter().map(|m| m.id.clone()).collect(),
        ..MemoryRow::new(s.user, &narrative_text(parts), ended)
    }
}

/// Memories told per narrative over a run's sessions (seed 004 aims at 10:1); none told: 0.
pub fn compression(sessions: &[EndedSession<'_>]) -> f64 {
    let told: usize = sessions.iter().map(|s| s.memories.len()).sum();
    match sessions.len() {
        0 => 0.0,
        n => told as f64 / n as f64,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    const MINUTE: i64 = 60_000_000;

    fn memory(id: &str, session: &str, kind: &str, at: i64) -> SessionMemory {
        SessionMemory {
            id: id.into(),
            user_id: "u".into(),
            session_id: Some(session.into()),
            kind: kind.into(),
            text: format!("text of {id}"),
            created_at: at,
            ..SessionMemory::default()
        }
    }

    #[test]
    fn a_session_is_told_once_it_ended_and_only_from_its_episodes_and_facts() {
        let now = 1000 * MINUTE;
        let memories = vec![
            memory("a1", "s-a", "episode", 100 * MINUTE),
            memory("a2", "s-a", "fact", 110 * MINUTE),
            memory("a3", "s-a", "summary", 120 * MINUTE),
            // Still going: its newest memory is 10 minutes old.
            memory("b1", "s-b", "episode", 900 * MINUTE),
            memory("b2", "s-b", "episode", 990 * MINUTE),
            // Too short to tell.
            memory("c1", "s-c", "episode", 100 * MINUTE),
            SessionMemory {
                session_id: None,
                ..memory("x", "", "episode", 100 * MINUTE)
            },
        ];
        let p = SessionParams::default();
        let ended = ended_sessions(&memories, &BTreeSet::new(), &p, now);
        assert_eq!(ended.len(), 1);
        let ids: Vec<&str> = ended[0].memories.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["a1", "a2"]);
        assert_eq!(ended[0].narrative_id, narrative_id("u", "s-a"));
        // Told already: nothing to do.
        let told = BTreeSet::from([narrative_id("u", "s-a")]);
        assert!(ended_sessions(&memories, &told, &p, now).is_empty());
        // Later, the second session has ended too.
        assert_eq!(
            ended_sessions(&memories, &BTreeSet::new(), &p, 1020 * MINUTE).len(),
            2
        );
    }

    #[test]
    fn a_long_session_keeps_its_episodes_first_and_tells_them_in_order() {
        let mut memories: Vec<SessionMemory> = (0..4)
            .map(|i| memory(&format!("f{i}"), "s", "fact", i * MINUTE))
            .collect();
        memories
            .extend((0..3).map(|i| memory(&format!("e{i}"), "s", "episode", (10 + i) * MINUTE)));
        let p = SessionParams {
            max_memories: 5,
            ..SessionParams::default()
        };
        let ended = ended_sessions(&memories, &BTreeSet::new(), &p, 500 * MINUTE);
        let ids: Vec<&str> = ended[0].memories.iter().map(|m| m.id.as_str()).collect();
        assert_eq!(ids, ["f0", "f1", "e0", "e1", "e2"]);
        assert_eq!(ended[0].left_out, 2);
        assert_eq!(compression(&ended), 5.0);
    }

    #[test]
    fn the_narrative_row_holds_its_memories_and_reads_as_one_text() {
        let memories = vec![
            SessionMemory {
                emotional_salience: 0.7,
                ..memory("a1", "s", "episode", 10 * MINUTE)
            },
            memory("a2", "s", "episode", 20 * MINUTE),
        ];
        let ended = ended_sessions(
            &memories,
            &BTreeSet::new(),
            &SessionParams::default(),
            100 * MINUTE,
        );
        let parts = NarrativeParts {
            summary: "Talked about the move to Utrecht.".into(),
            key_interactions: vec!["asked about movers".into(), " ".into()],
            emotional_arc: "anxious, then relieved".into(),
            unresolved_threads: vec![],
        };
        let row = narrative_row(&ended[0], &parts, 100 * MINUTE);
        assert_eq!(row.kind, "narrative");
        assert_eq!(row.consolidates_memory_ids, ["a1", "a2"]);
        assert_eq!(
            row.created_at,
            20 * MINUTE,
            "the narrative is dated when the session ended"
        );
        assert_eq!(row.emotional_salience, 0.7);
        assert_eq!(row.session_id.as_deref(), Some("s"));
        assert_eq!(
            row.text,
            "Talked about the move to Utrecht.\nKey interactions: asked about movers\nEmotional arc: anxious, then relieved"
        );
        assert!(SessionParams::default().validate().is_ok());
        let bad = SessionParams {
            min_memories: 9,
            max_memories: 3,
            ..SessionParams::default()
        };
        assert!(bad.validate().is_err());
    }
}
