//! Entity garbage collection rules (seed 000's monthly entity GC): which of one user's
//! entities are the same thing under two names, which one survives a merge, and the sparse
//! `shares_entity` chain a merged entity's memories get. Pure: the `entity-gc` job reads and
//! writes, this decides.
//!
//! Merge rules, each between two entities of one user whose types agree (equal, or one of them
//! `other`); when a rule is unsure, nothing is merged:
//! - `same-name`: a normalised name or alias is shared ("Dr. Smith" / "Smith", "The Louvre" /
//!   "Louvre": honorifics and leading articles are dropped by `normalise_name`).
//! - `surname`: a one-word person name is the last word of exactly one longer person name of
//!   the user ("Smith" / "Alice Smith"). First names are never merged this way: "John" and
//!   "John Lennon" are as likely two people as one.
//! - `abbreviation`: for tools, organisations, projects and untyped names (not people, pets or
//!   places: "Niger" / "Nigeria", "Mali" / "Malibu" are other places), one name written without
//!   spaces or punctuation is the other's start plus a product or company suffix (`ql`, `sql`,
//!   `db`, `js`, `io`, `app`, `hq`, `inc`, `corp`, `ltd`, `llc`, `co`), the shorter at least four
//!   characters long: "Postgres" / "PostgreSQL", "Mongo" / "MongoDB", "Acme" / "Acme Inc"; not
//!   "Swift" / "SwiftUI" or "Java" / "JavaScript", which are other things.
//! - `embedding` (only when a similarity is given): the names' embeddings are at least that
//!   close, same type.
//!
//! Groups are closed transitively; a group that would join two different specific types
//! (a person and a pet both called Max, through an `other` Max) is left alone. The survivor of
//! a group: a specific type over `other`, then the most live memories, then the longer name,
//! then the smaller id.

use std::collections::{BTreeMap, BTreeSet};

use super::entities::normalise_name;
use super::similarity::dot;

/// What the rules need of one entity.
#[derive(Clone, Debug)]
pub struct GcEntity {
    pub id: String,
    pub name: String,
    pub entity_type: String,
    pub aliases: Vec<String>,
    /// Live memories naming it.
    pub references: usize,
}

/// One entity folded into another, and the rule that found them the same.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Merge {
    pub survivor: usize,
    pub merged: usize,
    pub rule: &'static str,
}

fn keys(e: &GcEntity) -> BTreeSet<String> {
    std::iter::once(&e.name)
        .chain(&e.aliases)
        .map(|n| normalise_name(n))
        .filter(|k| !k.is_empty())
        .collect()
}

fn compact(key: &str) -> String {
    key.chars().filter(|c| c.is_alphanumeric()).collect()
}

fn types_agree(a: &GcEntity, b: &GcEntity) -> bool {
    a.entity_type == b.entity_type || a.entity_type == "other" || b.entity_type == "other"
}

/// What may follow a product's or company's short name in its full name.
const SUFFIXES: &[&str] = &[
    "ql", "sql", "db", "js", "io", "app", "hq", "inc", "corp", "ltd", "llc", "co",
];

/// Types whose names may be shortened by a few letters (products and bodies, not beings or
/// places).
fn abbreviates(e: &GcEntity) -> bool {
    matches!(
        e.entity_type.as_str(),
        "tool" | "organization" | "project" | "other"
    )
}

struct UnionFind(Vec<usize>);

impl UnionFind {
    fn find(&mut self, i: usize) -> usize {
        let mut root = i;
        while self.0[root] != root {
            root = self.0[root];
        }
        let mut at = i;
        while self.0[at] != root {
            let next = self.0[at];
            self.0[at] = root;
            at = next;
        }
        root
    }

    fn union(&mut self, a: usize, b: usize) {
        let (ra, rb) = (self.find(a), self.find(b));
        if ra != rb {
            self.0[ra.max(rb)] = ra.min(rb);
        }
    }
}

/// The better survivor of two (see the module comment): `Less` when `a` survives.
fn rank(a: &GcEntity, b: &GcEntity) -> std::cmp::Ordering {
    (b.entity_type != "other")
        .cmp(&(a.entity_type != "other"))
        .then(b.references.cmp(&a.references))
        .then(b.name.chars().count().cmp(&a.name.chars().count()))
        .then(a.id.cmp(&b.id))
}

/// The merges among one user's entities. `vectors` (one per entity, `None` when it has none)
/// and `similarity` switch the `embedding` rule on.
pub fn plan_merges(
    entities: &[GcEntity],
    vectors: Option<(&[Option<Vec<f32>>], f32)>,
) -> Vec<Merge> {
    let n = entities.len();
    // Pairs (i, j, rule), i < j, found by index lookups rather than all pairs.
    let mut pairs: BTreeMap<(usize, usize), &'static str> = BTreeMap::new();
    let mut add = |i: usize, j: usize, rule: &'static str| {
        if i != j && types_agree(&entities[i], &entities[j]) {
            pairs.entry((i.min(j), i.max(j))).or_insert(rule);
        }
    };
    let all_keys: Vec<BTreeSet<String>> = entities.iter().map(keys).collect();
    let mut by_key: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, ks) in all_keys.iter().enumerate() {
        for k in ks {
            by_key.entry(k.as_str()).or_default().push(i);
        }
    }
    for list in by_key.values() {
        for (x, &i) in list.iter().enumerate() {
            for &j in &list[x + 1..] {
                add(i, j, "same-name");
            }
        }
    }
    // surname: one-word person (or other) names against the last word of longer person names.
    let mut by_surname: BTreeMap<&str, BTreeSet<usize>> = BTreeMap::new();
    for (i, e) in entities.iter().enumerate() {
        if e.entity_type != "person" {
            continue;
        }
        for k in &all_keys[i] {
            if let Some((_, last)) = k.rsplit_once(' ') {
                by_surname.entry(last).or_default().insert(i);
            }
        }
    }
    for (i, e) in entities.iter().enumerate() {
        if !matches!(e.entity_type.as_str(), "person" | "other") {
            continue;
        }
        let single: Vec<&String> = all_keys[i].iter().filter(|k| !k.contains(' ')).collect();
        for k in single {
            if let Some(longer) = by_surname.get(k.as_str()) {
                let others: Vec<usize> = longer.iter().copied().filter(|&j| j != i).collect();
                if others.len() == 1 {
                    add(i, others[0], "surname");
                }
            }
        }
    }
    // abbreviation: sorted compact keys; a key's extensions follow it in the order.
    let mut compacts: Vec<(String, usize)> = entities
        .iter()
        .enumerate()
        .filter(|(_, e)| abbreviates(e))
        .flat_map(|(i, _)| all_keys[i].iter().map(move |k| (compact(k), i)))
        .filter(|(c, _)| c.chars().count() >= 4)
        .collect();
    compacts.sort();
    compacts.dedup();
    for (x, (short, i)) in compacts.iter().enumerate() {
        for (long, j) in &compacts[x + 1..] {
            if !long.starts_with(short.as_str()) {
                break;
            }
            if SUFFIXES.contains(&&long[short.len()..]) {
                add(*i, *j, "abbreviation");
            }
        }
    }
    if let Some((vectors, threshold)) = vectors {
        let mut by_type: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, e) in entities.iter().enumerate() {
            if vectors[i].is_some() {
                by_type.entry(e.entity_type.as_str()).or_default().push(i);
            }
        }
        for list in by_type.values() {
            for (x, &i) in list.iter().enumerate() {
                for &j in &list[x + 1..] {
                    let (Some(a), Some(b)) = (&vectors[i], &vectors[j]) else {
                        continue;
                    };
                    if dot(a, b) >= threshold {
                        add(i, j, "embedding");
                    }
                }
            }
        }
    }

    let mut groups = UnionFind((0..n).collect());
    for &(i, j) in pairs.keys() {
        groups.union(i, j);
    }
    let mut members: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for i in 0..n {
        let root = groups.find(i);
        members.entry(root).or_default().push(i);
    }
    let mut merges = Vec::new();
    for list in members.values().filter(|l| l.len() > 1) {
        let specific: BTreeSet<&str> = list
            .iter()
            .map(|&i| entities[i].entity_type.as_str())
            .filter(|t| *t != "other")
            .collect();
        if specific.len() > 1 {
            continue; // two different things sharing a name: left alone
        }
        let survivor = *list
            .iter()
            .min_by(|&&a, &&b| rank(&entities[a], &entities[b]))
            .expect("a group has members");
        for &i in list.iter().filter(|&&i| i != survivor) {
            // The rule that tied it into the group (to the survivor if direct, else any).
            let rule = pairs
                .get(&(i.min(survivor), i.max(survivor)))
                .or_else(|| {
                    pairs
                        .iter()
                        .find(|((a, b), _)| *a == i || *b == i)
                        .map(|(_, r)| r)
                })
                .copied()
                .unwrap_or("same-name");
            merges.push(Merge {
                survivor,
                merged: i,
                rule,
            });
        }
    }
    merges
}

/// The sparse `shares_entity` chain of one entity's memories, ordered by (created_at, id):
/// each memory to the (at most) `per_memory` memories just before it, newer as source. The
/// same links `memlife entities` writes.
pub fn shares_entity_chain(members: &[(i64, String)], per_memory: usize) -> Vec<(usize, usize)> {
    let mut order: Vec<usize> = (0..members.len()).collect();
    order.sort_by(|&a, &b| members[a].cmp(&members[b]));
    let mut links = Vec::new();
    for (x, &i) in order.iter().enumerate() {
        for &j in order[x.saturating_sub(per_memory)..x].iter().rev() {
            links.push((i, j));
        }
    }
    links
}

/// An entity as the whole GC reads it: the rules' view, its owner, when it was archived, and
/// its name vector (for the `embedding` rule).
#[derive(Clone, Debug)]
pub struct StoredEntity {
    pub entity: GcEntity,
    pub user: String,
    pub archived_at: Option<i64>,
    pub vector: Option<Vec<f32>>,
}

/// What one GC run does, by index into its entities: merges (survivor, merged, rule), then
/// archives, revivals and deletions of the entities no merge folds away.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GcPlan {
    pub merges: Vec<(usize, usize, &'static str)>,
    /// Survivor -> the entities folded into it.
    pub absorbed: BTreeMap<usize, Vec<usize>>,
    pub archive: Vec<usize>,
    pub revive: Vec<usize>,
    pub delete: Vec<usize>,
}

impl GcPlan {
    /// The entities folded into others.
    pub fn merged(&self) -> BTreeSet<usize> {
        self.merges.iter().map(|m| m.1).collect()
    }
}

/// The GC of `entities` (any users'): merges per user among entities not archived (`merging`:
/// `None` leaves merging out, `Some(similarity)` merges by the rules, by name vectors too when
/// a similarity is given); then an entity no live memory names is archived (a survivor counts
/// the memories of those it absorbs), an archived one named again is revived, and one archived
/// at or before `grace_cutoff` and still named by none is deleted.
pub fn plan_gc(
    entities: &[StoredEntity],
    merging: Option<Option<f32>>,
    grace_cutoff: i64,
) -> GcPlan {
    let mut plan = GcPlan::default();
    if let Some(similarity) = merging {
        let mut by_user: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
        for (i, e) in entities.iter().enumerate() {
            if e.archived_at.is_none() {
                by_user.entry(e.user.as_str()).or_default().push(i);
            }
        }
        for list in by_user.values() {
            let gc: Vec<GcEntity> = list.iter().map(|&i| entities[i].entity.clone()).collect();
            let vectors: Vec<Option<Vec<f32>>> =
                list.iter().map(|&i| entities[i].vector.clone()).collect();
            let found = plan_merges(&gc, similarity.map(|s| (vectors.as_slice(), s)));
            plan.merges.extend(
                found
                    .into_iter()
                    .map(|m| (list[m.survivor], list[m.merged], m.rule)),
            );
        }
    }
    for &(s, m, _) in &plan.merges {
        plan.absorbed.entry(s).or_default().push(m);
    }
    let merged = plan.merged();
    for (i, e) in entities.iter().enumerate() {
        if merged.contains(&i) {
            continue;
        }
        let refs = e.entity.references
            + plan
                .absorbed
                .get(&i)
                .into_iter()
                .flatten()
                .map(|&m| entities[m].entity.references)
                .sum::<usize>();
        match (e.archived_at, refs) {
            (None, 0) => plan.archive.push(i),
            (Some(_), r) if r > 0 => plan.revive.push(i),
            (Some(at), 0) if at <= grace_cutoff => plan.delete.push(i),
            _ => {}
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entity(id: &str, name: &str, entity_type: &str, references: usize) -> GcEntity {
        GcEntity {
            id: id.into(),
            name: name.into(),
            entity_type: entity_type.into(),
            aliases: Vec::new(),
            references,
        }
    }

    fn merged_names(entities: &[GcEntity], merges: &[Merge]) -> Vec<(String, String, String)> {
        let mut out: Vec<_> = merges
            .iter()
            .map(|m| {
                (
                    entities[m.merged].name.clone(),
                    entities[m.survivor].name.clone(),
                    m.rule.to_string(),
                )
            })
            .collect();
        out.sort();
        out
    }

    #[test]
    fn near_duplicate_names_merge_into_the_best_supported_entity() {
        let entities = vec![
            entity("1", "Postgres", "tool", 5),
            entity("2", "PostgreSQL", "tool", 2),
            entity("3", "Dr. Smith", "person", 1),
            entity("4", "Smith", "other", 3),
            entity("5", "Berlin", "place", 4),
            entity("6", "Bern", "place", 1),
            entity("7", "Louvre", "place", 1),
            entity("8", "The Louvre", "place", 2),
            entity("9", "Mongo", "tool", 1),
            entity("10", "MongoDB", "tool", 3),
            entity("11", "Acme", "organization", 2),
            entity("12", "Acme Inc", "organization", 1),
        ];
        let merges = plan_merges(&entities, None);
        assert_eq!(
            merged_names(&entities, &merges),
            vec![
                ("Acme Inc".into(), "Acme".into(), "abbreviation".into()),
                ("Louvre".into(), "The Louvre".into(), "same-name".into()),
                ("Mongo".into(), "MongoDB".into(), "abbreviation".into()),
                (
                    "PostgreSQL".into(),
                    "Postgres".into(),
                    "abbreviation".into()
                ),
                // A specific type wins over `other`, even with fewer memories.
                ("Smith".into(), "Dr. Smith".into(), "same-name".into()),
            ]
        );
    }

    #[test]
    fn unsure_cases_are_left_alone() {
        let entities = vec![
            // Two Smiths: "Smith" alone could be either.
            entity("1", "Smith", "person", 1),
            entity("2", "Alice Smith", "person", 1),
            entity("3", "Bob Smith", "person", 1),
            // First names are not merged into full names.
            entity("4", "John", "person", 1),
            entity("5", "John Lennon", "person", 1),
            // A person and a pet called Max, bridged by an untyped Max.
            entity("6", "Max", "person", 1),
            entity("7", "Max", "pet", 1),
            entity("8", "Max", "other", 1),
            // People's names are not abbreviations of one another.
            entity("9", "Chris", "person", 1),
            entity("10", "Christa", "person", 1),
            // Java is not JavaScript; short names are not prefixes.
            entity("11", "Java", "tool", 1),
            entity("12", "JavaScript", "tool", 1),
            entity("13", "Go", "tool", 1),
            entity("14", "Gobi", "place", 1),
            // Places a letter or two apart are other places.
            entity("15", "Niger", "place", 1),
            entity("16", "Nigeria", "place", 1),
            // A framework is not its language.
            entity("17", "Swift", "tool", 1),
            entity("18", "SwiftUI", "tool", 1),
        ];
        assert_eq!(plan_merges(&entities, None), vec![]);
        // One Smith only: the surname rule merges it.
        let two = vec![
            entity("1", "Smith", "person", 1),
            entity("2", "Alice Smith", "person", 1),
        ];
        let merges = plan_merges(&two, None);
        assert_eq!(
            merged_names(&two, &merges),
            vec![("Smith".into(), "Alice Smith".into(), "surname".into())]
        );
    }

    #[test]
    fn embedding_rule_only_when_asked_and_within_a_type() {
        let entities = vec![
            entity("1", "Kyiv", "place", 2),
            entity("2", "Kiev", "place", 1),
            entity("3", "Kiev", "organization", 1),
        ];
        let v = |x: f32| Some(vec![x, (1.0 - x * x).sqrt()]);
        let vectors = vec![v(1.0), v(0.99), v(0.99)];
        assert_eq!(plan_merges(&entities[..2], None), vec![]);
        let merges = plan_merges(&entities, Some((&vectors, 0.95)));
        assert_eq!(
            merges,
            vec![Merge {
                survivor: 0,
                merged: 1,
                rule: "embedding"
            }]
        );
    }

    #[test]
    fn chain_links_each_memory_to_its_nearest_earlier_ones() {
        let members: Vec<(i64, String)> = [(3, "c"), (1, "a"), (2, "b"), (4, "d"), (5, "e")]
            .iter()
            .map(|(t, id)| (*t, id.to_string()))
            .collect();
        let links: Vec<(String, String)> = shares_entity_chain(&members, 2)
            .into_iter()
            .map(|(i, j)| (members[i].1.clone(), members[j].1.clone()))
            .collect();
        let expected = [
            ("b", "a"),
            ("c", "b"),
            ("c", "a"),
            ("d", "c"),
            ("d", "b"),
            ("e", "d"),
            ("e", "c"),
        ];
        assert_eq!(
            links,
            expected
                .iter()
                .map(|(a, b)| (a.to_string(), b.to_string()))
                .collect::<Vec<_>>()
        );
    }

    fn stored(
        id: &str,
        user: &str,
        name: &str,
        refs: usize,
        archived_at: Option<i64>,
    ) -> StoredEntity {
        StoredEntity {
            entity: GcEntity {
                id: id.into(),
                name: name.into(),
                entity_type: "person".into(),
                aliases: Vec::new(),
                references: refs,
            },
            user: user.into(),
            archived_at,
            vector: None,
        }
    }

    #[test]
    fn the_gc_plan_archives_revives_deletes_past_grace_and_merges_per_user() {
        let entities = [
            stored("a", "u1", "Alice Smith", 2, None),
            stored("b", "u1", "Smith", 0, None),
            stored("c", "u1", "Bob", 0, None),
            stored("d", "u1", "Carol", 1, Some(50)),
            stored("e", "u1", "Dave", 0, Some(50)),
            stored("f", "u1", "Erin", 0, Some(150)),
            // Another user's "Smith" is never folded into u1's Alice Smith.
            stored("g", "u2", "Smith", 1, None),
        ];
        let plan = plan_gc(&entities, Some(None), 100);
        assert_eq!(plan.merges, vec![(0, 1, "surname")]);
        assert_eq!(plan.absorbed, BTreeMap::from([(0, vec![1])]));
        // Bob is named by nothing: archived; Carol is named again: revived; Dave was archived
        // before the cutoff: deleted; Erin after it: kept archived.
        assert_eq!(
            (plan.archive, plan.revive, plan.delete),
            (vec![2], vec![3], vec![4])
        );
    }

    #[test]
    fn a_survivor_counts_the_memories_of_what_it_absorbs_and_no_merging_merges_nothing() {
        let entities = [
            stored("a", "u1", "Alice Smith", 0, None),
            stored("b", "u1", "Smith", 3, None),
        ];
        let plan = plan_gc(&entities, Some(None), 0);
        assert_eq!(plan.merges.len(), 1);
        assert!(plan.archive.is_empty(), "{plan:?}");
        let plan = plan_gc(&entities, None, 0);
        assert!(plan.merges.is_empty());
        assert_eq!(plan.archive, vec![0]);
    }
}
