//! Consolidation decisions that need no store: which approved groups of one run may apply,
//! what the consolidated memory takes from its members, and where the members' links and
//! entity rows go; each approved group's audit row (`judge_groups`), the `consolidates`
//! links and the archive times of its members. The job reads the rows, asks these, logs the
//! plan and writes it.
//!
//! Full-mode clustering lets a memory join more than one cluster (its layers), so two
//! approved groups of one run may share a memory. Folding it into both would tell its fact
//! twice in two memories; the first group (in the order the run approved them: the first
//! layer's clusters come first) takes it, and each later group holding a taken memory is
//! recorded stale. The next run clusters the new memory with what is left.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::json;

use crate::rows::{AuditRow, LinkRow, MemoryRow, format_timestamp};

/// For each group in order: whether it applies (none of its members went into an earlier
/// group that applies).
pub fn first_claims<S: AsRef<str>>(groups: &[Vec<S>]) -> Vec<bool> {
    let mut claimed: BTreeSet<&str> = BTreeSet::new();
    groups
        .iter()
        .map(|members| {
            let free = members.iter().all(|m| !claimed.contains(m.as_ref()));
            if free {
                claimed.extend(members.iter().map(AsRef::as_ref));
            }
            free
        })
        .collect()
}

/// A member memory as consolidation reads it (timestamps in microseconds).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FoldMember<'a> {
    pub id: &'a str,
    pub text: &'a str,
    /// Not archived.
    pub live: bool,
    pub kind: Option<&'a str>,
    pub state: Option<&'a str>,
    pub importance: Option<f64>,
    pub salience: Option<f64>,
    pub confidence: Option<f64>,
    pub retention: Option<f64>,
    pub access_count: Option<i64>,
    pub recall_frequency: Option<i64>,
    pub last_accessed_at: Option<i64>,
    pub created_at: Option<i64>,
    pub valid_from: Option<i64>,
    pub tags: Vec<&'a str>,
}

/// An approved group as the judge saw it: its members and the texts it read.
pub struct Group<'a> {
    pub members: &'a [String],
    pub texts: &'a BTreeMap<String, String>,
}

/// What becomes of an approved group when its run writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fate {
    /// Every member is there, live, with the text the judge read: fold them.
    Apply,
    /// A member is gone, archived or changed since the judge read it: record it stale.
    Stale,
    /// Unchanged, but a member went into an earlier group of the run: stale too.
    Overlapping,
}

/// The fate of each group, in order, given the members as read now (by id).
pub fn fates(groups: &[Group], current: &BTreeMap<&str, FoldMember>) -> Vec<Fate> {
    let unchanged: Vec<bool> = groups
        .iter()
        .map(|g| {
            g.members.iter().all(|id| {
                current
                    .get(id.as_str())
                    .is_some_and(|m| m.live && g.texts.get(id).map(String::as_str) == Some(m.text))
            })
        })
        .collect();
    let claims: Vec<Vec<&str>> = groups
        .iter()
        .zip(&unchanged)
        .map(|(g, &unchanged)| match unchanged {
            true => g.members.iter().map(String::as_str).collect(),
            false => Vec::new(),
        })
        .collect();
    unchanged
        .iter()
        .zip(first_claims(&claims))
        .map(|(&unchanged, unclaimed)| match (unchanged, unclaimed) {
            (true, true) => Fate::Apply,
            (_, false) => Fate::Overlapping,
            (false, true) => Fate::Stale,
        })
        .collect()
}

/// The consolidated memory's fields taken from its members.
#[derive(Debug, Clone, PartialEq)]
pub struct Merged<'a> {
    /// The members' kind when they share one, else `fact`.
    pub kind: &'a str,
    /// The median of the members' importance (0.5 when none has one).
    pub importance: f64,
    /// The highest salience (0.5 when none has one).
    pub salience: f64,
    /// The lowest confidence (0.8 when none has one): the fold is as sure as its least sure
    /// member.
    pub confidence: f64,
    /// The highest retention (1.0 when none has one).
    pub retention: f64,
    /// The furthest state a member reached (candidate < active < core; `active` when none).
    pub state: &'a str,
    pub access_count: i64,
    pub recall_frequency: i64,
    /// The latest telling or use of any member.
    pub last_accessed_at: Option<i64>,
    pub created_at: Option<i64>,
    pub valid_from: Option<i64>,
    pub tags: BTreeSet<&'a str>,
}

/// What a consolidated memory takes from its members.
pub fn fold<'a>(members: &[FoldMember<'a>]) -> Merged<'a> {
    let mut importance: Vec<f64> = members.iter().filter_map(|m| m.importance).collect();
    importance.sort_by(f64::total_cmp);
    let median = match importance.len() {
        0 => 0.5,
        n if n % 2 == 1 => importance[n / 2],
        n => (importance[n / 2 - 1] + importance[n / 2]) / 2.0,
    };
    let values = |f: fn(&FoldMember) -> Option<f64>| members.iter().filter_map(f);
    let max = |f: fn(&FoldMember) -> Option<f64>, default: f64| {
        values(f).reduce(f64::max).unwrap_or(default)
    };
    let min = |f: fn(&FoldMember) -> Option<f64>, default: f64| {
        values(f).reduce(f64::min).unwrap_or(default)
    };
    let kinds: BTreeSet<&str> = members.iter().filter_map(|m| m.kind).collect();
    // Folding candidates nobody has used yet makes no active memory, which `scores` would
    // archive as it fades.
    let rank = |s: &str| ["candidate", "active", "core"].iter().position(|x| *x == s);
    let state = members
        .iter()
        .filter_map(|m| m.state)
        .filter_map(|s| rank(s).map(|r| (r, s)))
        .max()
        .map_or("active", |(_, s)| s);
    Merged {
        kind: match kinds.len() {
            1 => kinds.first().copied().unwrap_or("fact"),
            _ => "fact",
        },
        importance: median,
        salience: max(|m| m.salience, 0.5),
        confidence: min(|m| m.confidence, 0.8),
        retention: max(|m| m.retention, 1.0),
        state,
        access_count: members.iter().filter_map(|m| m.access_count).sum(),
        recall_frequency: members.iter().filter_map(|m| m.recall_frequency).sum(),
        // A fact told again is used again: decay runs from the last telling (or use) of any
        // member, not from the first, or folding a fact told in February and in August would
        // leave it as faded as February's telling and `scores` would cool it at once.
        last_accessed_at: members
            .iter()
            .flat_map(|m| [m.last_accessed_at, m.created_at])
            .flatten()
            .max(),
        created_at: members.iter().filter_map(|m| m.created_at).min(),
        valid_from: members.iter().filter_map(|m| m.valid_from).min(),
        tags: members
            .iter()
            .flat_map(|m| m.tags.iter().copied())
            .collect(),
    }
}

/// A link as consolidation moves it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LinkEnds<'a> {
    pub source: &'a str,
    pub target: &'a str,
    pub link_type: &'a str,
    pub confidence: f64,
}

/// A link moved to the consolidated memories: the index of the link it comes from, and its
/// new ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Moved<'a> {
    pub from: usize,
    pub source: &'a str,
    pub target: &'a str,
}

/// Where links touching members go: each end that is a member moves to the memory that holds
/// it (`holder`: member -> consolidated memory). A link between members of one consolidation
/// goes; of links that become one (same ends and type), the most confident stays (the first
/// on a tie). In order of (source, target, type).
pub fn relink<'a>(links: &[LinkEnds<'a>], holder: &BTreeMap<&str, &'a str>) -> Vec<Moved<'a>> {
    let mut moved: BTreeMap<(&str, &str, &str), (Moved, f64)> = BTreeMap::new();
    for (from, link) in links.iter().enumerate() {
        let end = |id: &'a str| holder.get(id).copied().unwrap_or(id);
        let (source, target) = (end(link.source), end(link.target));
        if source == target {
            continue;
        }
        let key = (source, target, link.link_type);
        if moved
            .get(&key)
            .is_none_or(|(_, kept)| *kept < link.confidence)
        {
            moved.insert(
                key,
                (
                    Moved {
                        from,
                        source,
                        target,
                    },
                    link.confidence,
                ),
            );
        }
    }
    moved.into_values().map(|(m, _)| m).collect()
}

/// Where the members' entity rows go: `(index of the row, its new memory)` for each pair of
/// consolidated memory and entity once (the last row of a pair), in order of (memory, entity).
pub fn moved_entity_rows<'a>(
    rows: &[(&'a str, &'a str)],
    holder: &BTreeMap<&str, &'a str>,
) -> Vec<(usize, &'a str)> {
    let mut moved: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for (i, (memory, entity)) in rows.iter().enumerate() {
        let memory = holder.get(memory).copied().unwrap_or("");
        moved.insert((memory, entity), i);
    }
    moved.into_iter().map(|((m, _), i)| (i, m)).collect()
}

/// Packs clusters (each a user and its member ids), in order, into pass-1 requests of at
/// least `per_call` memories: the indexes of the clusters of each pack. A cluster is never
/// split; a pack holds one user's clusters, and a cluster that shares a memory with the open
/// pack (full mode's layers) starts a new one.
pub fn pack<S: AsRef<str>>(clusters: &[(&str, &[S])], per_call: usize) -> Vec<Vec<usize>> {
    let mut packs: Vec<Vec<usize>> = Vec::new();
    let mut open: Option<(&str, BTreeSet<&str>, Vec<usize>)> = None;
    for (i, (user, members)) in clusters.iter().enumerate() {
        let seal = open.as_ref().is_some_and(|(open_user, pooled, _)| {
            open_user != user
                || pooled.len() >= per_call
                || members.iter().any(|m| pooled.contains(m.as_ref()))
        });
        if seal && let Some((.., indexes)) = open.take() {
            packs.push(indexes);
        }
        let (_, pooled, indexes) = open.get_or_insert_with(|| (user, BTreeSet::new(), Vec::new()));
        pooled.extend(members.iter().map(AsRef::as_ref));
        indexes.push(i);
    }
    packs.extend(open.map(|(.., indexes)| indexes));
    packs
}

impl<'a> FoldMember<'a> {
    /// A member's row as consolidation reads it.
    pub fn of(row: &'a MemoryRow) -> FoldMember<'a> {
        FoldMember {
            id: &row.id,
            text: &row.text,
            live: row.is_live(),
            kind: Some(&row.kind),
            state: Some(&row.state),
            importance: Some(row.importance),
            salience: Some(row.salience),
            confidence: Some(row.confidence),
            retention: Some(row.retention),
            access_count: Some(row.access_count),
            recall_frequency: Some(row.recall_frequency),
            last_accessed_at: row.last_accessed_at,
            created_at: Some(row.created_at),
            valid_from: Some(row.valid_from),
            tags: row.tags.iter().map(String::as_str).collect(),
        }
    }
}

/// One group the judges approved, as a run writes it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ApprovedGroup {
    /// Its audit row's key (`{origin}|{custom id}`).
    pub key: String,
    pub user: String,
    /// The consolidated memory's id.
    pub new_id: String,
    pub members: Vec<String>,
    /// The members' texts as the judge read them: a member changed since is not folded.
    pub texts: BTreeMap<String, String>,
    /// The consolidated memory's text.
    pub text: String,
    /// The cluster's signature (a stale group is remembered by it).
    pub signature: String,
    pub confidence: f64,
    pub reasoning: String,
}

/// The consolidated memory's row (without its embedding): the group's text, the fields its
/// members give (`fold`), written at `now`.
pub fn consolidated_memory(group: &ApprovedGroup, merged: &Merged, now: i64) -> MemoryRow {
    let created_at = merged.created_at.unwrap_or(now);
    MemoryRow {
        id: group.new_id.clone(),
        kind: merged.kind.to_string(),
        source: Some("consolidate".into()),
        importance: merged.importance,
        salience: merged.salience,
        confidence: merged.confidence,
        retention: merged.retention,
        state: merged.state.to_string(),
        access_count: merged.access_count,
        recall_frequency: merged.recall_frequency,
        last_accessed_at: merged.last_accessed_at,
        updated_at: now,
        valid_from: merged.valid_from.unwrap_or(created_at),
        tags: merged.tags.iter().map(|t| t.to_string()).collect(),
        consolidates_memory_ids: group.members.clone(),
        ..MemoryRow::new(&group.user, &group.text, created_at)
    }
}

/// What a run's approved groups come to: an audit row each (`APPROVED` with the members and
/// their links as they were and the new memory, or `STALE` with why), the groups that fold
/// with their new memories, and how many were stale (and of those, overlapping).
#[derive(Debug, Default)]
pub struct Judged {
    pub audit: Vec<AuditRow>,
    pub ready: Vec<(ApprovedGroup, MemoryRow)>,
    pub stale: u64,
    pub overlapping: u64,
}

/// Judges each approved group of run `run_id` against its members as read now (`rows`, by
/// id; `links`: each user's links), in the order the run approved them (`fates`).
pub fn judge_groups(
    run_id: &str,
    groups: Vec<ApprovedGroup>,
    rows: &BTreeMap<String, MemoryRow>,
    links: &BTreeMap<String, Vec<LinkRow>>,
    now: i64,
) -> Judged {
    let current: BTreeMap<&str, FoldMember> = groups
        .iter()
        .flat_map(|g| &g.members)
        .filter_map(|id| rows.get(id))
        .map(|row| (row.id.as_str(), FoldMember::of(row)))
        .collect();
    let heads: Vec<Group> = groups
        .iter()
        .map(|g| Group {
            members: &g.members,
            texts: &g.texts,
        })
        .collect();
    let group_fates = fates(&heads, &current);
    let mut judged = Judged::default();
    for (group, fate) in groups.iter().zip(group_fates) {
        let mut row = AuditRow::new(run_id, "CONSOLIDATE", &group.key, now);
        row.user_id = Some(group.user.clone());
        row.source_ids = group.members.clone();
        row.confidence = Some(group.confidence.clamp(0.0, 1.0));
        row.reasoning = Some(group.reasoning.clone());
        if fate != Fate::Apply {
            judged.stale += 1;
            if fate == Fate::Overlapping {
                judged.overlapping += 1;
                let why = "a member went into another group of this run";
                row.reasoning = Some(format!("{why}; {}", group.reasoning));
            }
            row.target_id = Some(format!("cluster:{}", group.signature));
            row.classification = Some("STALE".into());
            judged.audit.push(row);
            continue;
        }
        let members = || group.members.iter().filter_map(|id| rows.get(id));
        let folded: Vec<FoldMember> = members().map(FoldMember::of).collect();
        let memory = consolidated_memory(group, &fold(&folded), now);
        let touching = |l: &&LinkRow| {
            [&l.source_id, &l.target_id]
                .iter()
                .any(|end| group.members.contains(end))
        };
        let own_links = links.get(&group.user).into_iter().flatten();
        let before = json!({
            "signature": group.signature,
            "memories": members().map(MemoryRow::to_json).collect::<Vec<_>>(),
            "links": own_links.filter(touching).map(LinkRow::to_json).collect::<Vec<_>>(),
        });
        row.target_id = Some(group.new_id.clone());
        row.classification = Some("APPROVED".into());
        row.before_state = Some(before.to_string());
        let after = json!({"memory": memory.to_json(), "archived_at": format_timestamp(now)});
        row.after_state = Some(after.to_string());
        judged.audit.push(row);
        judged.ready.push((group.clone(), memory));
    }
    judged
}

/// Member -> consolidated memory, over groups with disjoint members.
pub fn holders<'a>(
    groups: impl IntoIterator<Item = &'a ApprovedGroup>,
) -> BTreeMap<&'a str, &'a str> {
    groups
        .into_iter()
        .flat_map(|g| {
            g.members
                .iter()
                .map(move |m| (m.as_str(), g.new_id.as_str()))
        })
        .collect()
}

/// A `consolidates` link from each consolidated memory to each of its members, at `now`.
pub fn provenance_links<'a>(
    groups: impl IntoIterator<Item = &'a ApprovedGroup>,
    now: i64,
) -> Vec<LinkRow> {
    let mut links = Vec::new();
    for g in groups {
        for member in &g.members {
            links.push(LinkRow {
                source_id: g.new_id.clone(),
                target_id: member.clone(),
                user_id: g.user.clone(),
                link_type: "consolidates".into(),
                confidence: g.confidence,
                reasoning: Some("consolidated into the source".into()),
                origin: "llm".into(),
                created_at: now,
            });
        }
    }
    links
}

/// The members to archive, grouped by the time each group's audit row recorded (a group a
/// killed run approved is archived at that run's time, not the rerun's).
pub fn archive_times<'a>(
    groups: impl IntoIterator<Item = (&'a ApprovedGroup, i64)>,
) -> BTreeMap<i64, Vec<String>> {
    let mut by_time: BTreeMap<i64, Vec<String>> = BTreeMap::new();
    for (g, at) in groups {
        by_time
            .entry(at)
            .or_default()
            .extend(g.members.iter().cloned());
    }
    by_time
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_memory_goes_into_the_first_group_that_holds_it_only() {
        let groups = vec![
            vec!["a", "b"],
            vec!["a", "c"], // a is taken: stale
            vec!["c", "d"], // c was not taken (its group did not apply)
            vec!["d", "e"], // d is taken
            vec!["f", "g"],
        ];
        assert_eq!(first_claims(&groups), [true, false, true, false, true]);
        assert!(first_claims::<&str>(&[]).is_empty());
    }

    fn member<'a>(id: &'a str, text: &'a str) -> FoldMember<'a> {
        FoldMember {
            id,
            text,
            live: true,
            ..FoldMember::default()
        }
    }

    #[test]
    fn a_group_applies_only_as_the_judge_read_it() {
        let texts = |pairs: &[(&str, &str)]| -> BTreeMap<String, String> {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        let now = [
            member("a", "likes tea"),
            member("b", "drinks tea"),
            FoldMember {
                live: false,
                ..member("c", "lives in Oslo")
            },
            member("d", "moved to Bergen"),
            member("e", "has a cat"),
        ];
        let current: BTreeMap<&str, FoldMember> = now.iter().map(|m| (m.id, m.clone())).collect();
        let ab = vec!["a".to_string(), "b".to_string()];
        let cd = vec!["c".to_string(), "d".to_string()];
        let de = vec!["d".to_string(), "e".to_string()];
        let bx = vec!["b".to_string(), "x".to_string()];
        let (ab_seen, cd_seen, de_seen) = (
            texts(&[("a", "likes tea"), ("b", "drinks tea")]),
            texts(&[("c", "lives in Oslo"), ("d", "moved to Bergen")]),
            texts(&[("d", "moved to Bergen"), ("e", "has a dog")]),
        );
        let bx_seen = texts(&[("b", "drinks tea"), ("x", "gone")]);
        let group = |members, texts| Group { members, texts };
        let groups = [
            group(&ab, &ab_seen),
            group(&cd, &cd_seen), // c archived since
            group(&de, &de_seen), // e's text changed since
            group(&ab, &ab_seen), // a and b went into the first
            group(&bx, &bx_seen), // x is gone: stale, not overlapping
        ];
        assert_eq!(
            fates(&groups, &current),
            [
                Fate::Apply,
                Fate::Stale,
                Fate::Stale,
                Fate::Overlapping,
                Fate::Stale
            ]
        );
    }

    #[test]
    fn the_fold_takes_each_field_by_its_rule() {
        let day = 86_400_000_000i64;
        let members = [
            FoldMember {
                kind: Some("fact"),
                state: Some("candidate"),
                importance: Some(0.2),
                salience: Some(0.3),
                confidence: Some(0.9),
                retention: Some(0.4),
                access_count: Some(2),
                recall_frequency: Some(1),
                created_at: Some(10 * day),
                last_accessed_at: Some(12 * day),
                valid_from: Some(9 * day),
                tags: vec!["food", "home"],
                ..member("a", "likes tea")
            },
            FoldMember {
                kind: Some("fact"),
                state: Some("core"),
                importance: Some(0.8),
                salience: Some(0.7),
                confidence: Some(0.6),
                access_count: Some(3),
                created_at: Some(40 * day),
                tags: vec!["food"],
                ..member("b", "drinks tea")
            },
            FoldMember {
                kind: Some("fact"),
                state: Some("active"),
                importance: Some(0.5),
                ..member("c", "tea daily")
            },
        ];
        let m = fold(&members);
        assert_eq!(m.kind, "fact");
        assert_eq!(m.importance, 0.5, "the median");
        assert_eq!((m.salience, m.confidence, m.retention), (0.7, 0.6, 0.4));
        assert_eq!(m.state, "core", "the furthest state reached");
        assert_eq!((m.access_count, m.recall_frequency), (5, 1));
        assert_eq!(m.created_at, Some(10 * day), "the earliest telling");
        assert_eq!(
            m.last_accessed_at,
            Some(40 * day),
            "the last telling or use"
        );
        assert_eq!(m.valid_from, Some(9 * day));
        assert_eq!(m.tags.into_iter().collect::<Vec<_>>(), ["food", "home"]);

        // Mixed kinds fold into a fact; members that know nothing give the defaults.
        let bare = [
            FoldMember {
                kind: Some("episode"),
                ..member("a", "x")
            },
            FoldMember {
                kind: Some("preference"),
                importance: Some(0.2),
                ..member("b", "y")
            },
            FoldMember {
                importance: Some(0.6),
                ..member("c", "z")
            },
        ];
        let m = fold(&bare);
        assert_eq!(m.kind, "fact");
        assert!(
            (m.importance - 0.4).abs() < 1e-12,
            "even count: the mean of the middle two"
        );
        assert_eq!((m.salience, m.confidence, m.retention), (0.5, 0.8, 1.0));
        assert_eq!(m.state, "active");
        assert_eq!((m.created_at, m.last_accessed_at), (None, None));
    }

    #[test]
    fn links_follow_their_members_and_the_strongest_of_a_pair_stays() {
        let holder: BTreeMap<&str, &str> = [("a", "N"), ("b", "N"), ("c", "M")].into();
        let link = |source, target, link_type, confidence| LinkEnds {
            source,
            target,
            link_type,
            confidence,
        };
        let links = [
            link("a", "b", "related", 0.9),     // inside one fold: goes
            link("a", "z", "related", 0.5),     // -> N z
            link("b", "z", "related", 0.7),     // -> N z, stronger: stays
            link("z", "c", "supports", 0.4),    // -> z M
            link("a", "z", "contradicts", 0.3), // another type: its own link
            link("b", "z", "related", 0.7),     // a tie: the first stays
        ];
        let moved = relink(&links, &holder);
        let ends: Vec<(usize, &str, &str)> =
            moved.iter().map(|m| (m.from, m.source, m.target)).collect();
        assert_eq!(ends, [(4, "N", "z"), (2, "N", "z"), (3, "z", "M")]);
    }

    #[test]
    fn packs_hold_one_users_clusters_up_to_the_size_and_never_a_memory_twice() {
        let c = |user, members: &'static [&'static str]| (user, members);
        let clusters = [
            c("u1", &["a", "b"]),
            c("u1", &["c"]),
            c("u1", &["d", "e"]), // the pack holds 3 >= 3: a new one
            c("u1", &["e", "f"]), // shares e: a new one
            c("u2", &["g"]),      // another user: a new one
            c("u2", &["h"]),
        ];
        assert_eq!(
            pack(&clusters, 3),
            [vec![0, 1], vec![2], vec![3], vec![4, 5]]
        );
        assert_eq!(pack(&clusters, 1).len(), 6, "one cluster per request");
        assert!(pack::<&str>(&[], 3).is_empty());
    }

    #[test]
    fn entity_rows_move_once_per_memory_and_entity() {
        let holder: BTreeMap<&str, &str> = [("a", "N"), ("b", "N")].into();
        let rows = [("a", "e1"), ("b", "e1"), ("b", "e2")];
        assert_eq!(moved_entity_rows(&rows, &holder), [(1, "N"), (2, "N")]);
    }

    fn approved(key: &str, new_id: &str, members: &[(&str, &str)]) -> ApprovedGroup {
        ApprovedGroup {
            key: key.into(),
            user: "u".into(),
            new_id: new_id.into(),
            members: members.iter().map(|(id, _)| id.to_string()).collect(),
            texts: members
                .iter()
                .map(|(id, text)| (id.to_string(), text.to_string()))
                .collect(),
            text: "the fold".into(),
            signature: format!("sig-{key}"),
            confidence: 1.4,
            reasoning: "same fact".into(),
        }
    }

    fn stored(id: &str, text: &str, created_at: i64) -> MemoryRow {
        MemoryRow {
            id: id.into(),
            importance: 0.2,
            ..MemoryRow::new("u", text, created_at)
        }
    }

    #[test]
    fn judged_groups_log_what_they_fold_and_stale_ones_say_why() {
        let rows: BTreeMap<String, MemoryRow> = [
            stored("a", "likes tea", 10),
            stored("b", "drinks tea", 20),
            stored("c", "has a cat", 30),
        ]
        .into_iter()
        .map(|r| (r.id.clone(), r))
        .collect();
        let link = |s: &str, t: &str| LinkRow::structural((s, t, "u"), "related", 5);
        let links = BTreeMap::from([(
            "u".to_string(),
            vec![link("a", "c"), link("c", "x"), link("x", "b")],
        )]);
        let groups = vec![
            approved("k1", "n1", &[("a", "likes tea"), ("b", "drinks tea")]),
            approved("k2", "n2", &[("b", "drinks tea"), ("c", "has a cat")]),
            approved("k3", "n3", &[("c", "has a dog")]),
        ];
        let judged = judge_groups("run", groups, &rows, &links, 99);
        assert_eq!((judged.stale, judged.overlapping), (2, 1));
        let classes: Vec<&str> = judged
            .audit
            .iter()
            .map(|r| r.classification.as_deref().unwrap())
            .collect();
        assert_eq!(classes, ["APPROVED", "STALE", "STALE"]);
        assert_eq!(judged.audit[1].target_id.as_deref(), Some("cluster:sig-k2"));
        assert!(
            judged.audit[1]
                .reasoning
                .as_deref()
                .unwrap()
                .starts_with("a member went")
        );
        assert_eq!(judged.audit[0].confidence, Some(1.0), "logged clamped");
        // The approved group: its new memory folds the members, its audit row holds what
        // undo needs (the members and their links as they were).
        let (group, memory) = &judged.ready[0];
        assert_eq!(group.new_id, "n1");
        assert_eq!(
            (memory.id.as_str(), memory.text.as_str()),
            ("n1", "the fold")
        );
        assert_eq!(memory.created_at, 10, "the earliest member's time");
        assert_eq!(memory.consolidates_memory_ids, ["a", "b"]);
        let before: serde_json::Value =
            serde_json::from_str(judged.audit[0].before_state.as_deref().unwrap()).unwrap();
        assert_eq!(before["memories"].as_array().unwrap().len(), 2);
        let ends: Vec<(&str, &str)> = before["links"]
            .as_array()
            .unwrap()
            .iter()
            .map(|l| {
                (
                    l["source_id"].as_str().unwrap(),
                    l["target_id"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(ends, [("a", "c"), ("x", "b")]);
        let after: serde_json::Value =
            serde_json::from_str(judged.audit[0].after_state.as_deref().unwrap()).unwrap();
        assert_eq!(after["memory"]["id"], "n1");
        assert_eq!(after["archived_at"], format_timestamp(99));
    }

    #[test]
    fn applying_links_each_fold_to_its_members_and_archives_at_the_logged_time() {
        let g1 = approved("k1", "n1", &[("a", ""), ("b", "")]);
        let g2 = approved("k2", "n2", &[("c", "")]);
        let holder = holders([&g1, &g2]);
        assert_eq!(
            holder,
            BTreeMap::from([("a", "n1"), ("b", "n1"), ("c", "n2")])
        );
        let links = provenance_links([&g1, &g2], 7);
        let ends: Vec<(&str, &str, &str)> = links
            .iter()
            .map(|l| {
                (
                    l.source_id.as_str(),
                    l.target_id.as_str(),
                    l.link_type.as_str(),
                )
            })
            .collect();
        assert_eq!(
            ends,
            [
                ("n1", "a", "consolidates"),
                ("n1", "b", "consolidates"),
                ("n2", "c", "consolidates")
            ]
        );
        assert!(links.iter().all(|l| l.created_at == 7));
        let times = archive_times([(&g1, 5), (&g2, 9)]);
        assert_eq!(times[&5], ["a", "b"]);
        assert_eq!(times[&9], ["c"]);
    }
}
