//! What one reading of memories writes to the entity side of the graph, decided without the
//! store: mentions resolved by name to the user's known entities or new ones, the
//! `memory_entities` pairs, the sparse `shares_entity` chain links, the entity rows to write
//! (new ones whole; existing ones only when they gain an alias or a type or come back from
//! archive) and the existing entities `memlife describe` must look at again. The `entities`
//! job reads, matches new names by embedding, plans with these and writes.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use crate::entities::{Mention, normalise_name, vote};
use crate::rows::{EntityRow, derived_id};

/// The key of most rows in `counts` (ties: the first in order); empty when there is none.
pub fn most_used<M: AsRef<str> + Ord>(counts: &BTreeMap<M, usize>) -> String {
    counts
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .map(|(m, _)| m.as_ref().to_string())
        .unwrap_or_default()
}

/// An existing entity, as far as matching needs it.
#[derive(Clone, Debug)]
pub struct Known {
    pub id: String,
    pub name: String,
    pub entity_type: String,
    /// Normalised name and aliases.
    pub keys: Vec<String>,
}

impl Known {
    /// An entity row's name and aliases as matching reads them.
    pub fn new(id: String, name: String, entity_type: String, aliases: &[String]) -> Known {
        let mut keys = vec![normalise_name(&name)];
        keys.extend(aliases.iter().map(|a| normalise_name(a)));
        Known {
            id,
            name,
            entity_type,
            keys,
        }
    }
}

/// One entity a reading resolved: existing (maybe retyped or with a new alias) or new.
#[derive(Clone, Debug, PartialEq)]
pub struct Resolved {
    pub id: String,
    pub user: String,
    pub name: String,
    pub entity_type: String,
    pub new: bool,
    /// Names seen this run that are not the entity's name (kept as aliases).
    pub aliases: BTreeSet<String>,
    pub changed_type: bool,
}

impl Resolved {
    /// The known entity `k` of `user`, found under the name `alias`.
    pub fn known_as(k: &Known, user: &str, alias: &str) -> Resolved {
        Resolved {
            id: k.id.clone(),
            user: user.to_string(),
            name: k.name.clone(),
            entity_type: k.entity_type.clone(),
            new: false,
            aliases: BTreeSet::from([alias.to_string()]),
            changed_type: false,
        }
    }
}

/// Mentions resolved to entities: one `Resolved` per (user, normalised name), `by_key` its
/// position, `unmatched` the positions of names no known entity has (new, unless their
/// vector matches one), `matched_by_name` how many names found a known entity.
#[derive(Debug, Default)]
pub struct Names {
    pub resolved: Vec<Resolved>,
    pub by_key: BTreeMap<(String, String), usize>,
    pub unmatched: Vec<usize>,
    pub matched_by_name: u64,
}

/// Resolves each read memory's mentions (`read`: its user and mentions) by name: one entity
/// per (user, normalised name), its type voted over this reading's mentions, matched to a
/// known entity of that name (of the same type, or either side `other`), else new, its id
/// derived from user, name and type.
pub fn resolve_by_name<'a>(
    read: impl IntoIterator<Item = (&'a str, &'a [Mention])>,
    known: &BTreeMap<String, Vec<Known>>,
) -> Names {
    let mut groups: BTreeMap<(String, String), Vec<&Mention>> = BTreeMap::new();
    for (user, found) in read {
        for mention in found {
            groups
                .entry((user.to_string(), normalise_name(&mention.name)))
                .or_default()
                .push(mention);
        }
    }
    let mut names = Names::default();
    for ((user, key), group) in &groups {
        let voted = vote(group.iter().copied());
        // The name as most often written (ties: first in order).
        let mut spellings: BTreeMap<&str, usize> = BTreeMap::new();
        for m in group {
            *spellings.entry(m.name.as_str()).or_default() += 1;
        }
        let name = most_used(&spellings);
        let candidates = known.get(user).map(Vec::as_slice).unwrap_or(&[]);
        let by_name: Vec<&Known> = candidates.iter().filter(|k| k.keys.contains(key)).collect();
        let exact = by_name.iter().find(|k| k.entity_type == voted);
        let loose = || {
            (by_name.len() == 1 && (voted == "other" || by_name[0].entity_type == "other"))
                .then(|| by_name[0])
        };
        let entry = match exact.copied().or_else(loose) {
            Some(k) => {
                let changed_type = k.entity_type == "other" && voted != "other";
                let mut aliases = BTreeSet::new();
                if normalise_name(&k.name) != *key {
                    aliases.insert(name.clone());
                }
                names.matched_by_name += 1;
                Resolved {
                    entity_type: if changed_type {
                        voted.to_string()
                    } else {
                        k.entity_type.clone()
                    },
                    aliases,
                    changed_type,
                    ..Resolved::known_as(k, user, "")
                }
            }
            None => {
                names.unmatched.push(names.resolved.len());
                Resolved {
                    id: derived_id(&format!("entity|{user}|{key}|{voted}")),
                    user: user.clone(),
                    name,
                    entity_type: voted.to_string(),
                    new: true,
                    aliases: BTreeSet::new(),
                    changed_type: false,
                }
            }
        };
        names
            .by_key
            .insert((user.clone(), key.clone()), names.resolved.len());
        names.resolved.push(entry);
    }
    names
}

/// A memory as the entity writes read it.
#[derive(Clone, Copy, Debug)]
pub struct ReadMemory<'a> {
    pub id: &'a str,
    pub user: &'a str,
    pub created_at: i64,
}

/// (memory, entity, user) for each read memory's mentions (`read`), resolved by `names`.
pub fn memory_entity_pairs<'a>(
    read: impl IntoIterator<Item = (ReadMemory<'a>, &'a [Mention])>,
    names: &Names,
) -> BTreeSet<(String, String, String)> {
    let mut pairs = BTreeSet::new();
    for (m, found) in read {
        for mention in found {
            let key = (m.user.to_string(), normalise_name(&mention.name));
            if let Some(&r) = names.by_key.get(&key) {
                let entity = names.resolved[r].id.clone();
                pairs.insert((m.id.to_string(), entity, m.user.to_string()));
            }
        }
    }
    pairs
}

/// The `shares_entity:{Name}` links a reading makes, keyed by (source, target, link type),
/// with the user: each newly read memory (in `pairs`) to the (at most `per_memory`) memories
/// naming the entity just before it in time (created at, then id), and later memories that
/// now have it among their nearest earlier ones. `memories`: every live memory in scope;
/// `existing`: the stored (memory, entity) pairs of the memories not read now (a new reading
/// replaces a memory's old one, even when it names nothing any more).
pub fn shares_entity_links(
    memories: &[ReadMemory<'_>],
    existing: &[(String, String)],
    pairs: &BTreeSet<(String, String, String)>,
    resolved: &[Resolved],
    (prefix, per_memory): (&str, usize),
) -> BTreeMap<(String, String, String), String> {
    let at: BTreeMap<&str, i64> = memories.iter().map(|m| (m.id, m.created_at)).collect();
    let mut members: BTreeMap<&str, BTreeSet<(i64, &str)>> = BTreeMap::new();
    for (memory, entity) in existing {
        if let Some(&t) = at.get(memory.as_str()) {
            members.entry(entity).or_default().insert((t, memory));
        }
    }
    for (memory, entity, _) in pairs {
        if let Some(&t) = at.get(memory.as_str()) {
            members.entry(entity).or_default().insert((t, memory));
        }
    }
    let names: BTreeMap<&str, &str> = resolved
        .iter()
        .map(|e| (e.id.as_str(), e.name.as_str()))
        .collect();
    let mut links = BTreeMap::new();
    for (memory, entity, user) in pairs {
        let (Some(list), Some(&t)) = (members.get(entity.as_str()), at.get(memory.as_str())) else {
            continue;
        };
        let me = (t, memory.as_str());
        let link_type = format!("{prefix}{}", names.get(entity.as_str()).unwrap_or(&""));
        for (_, earlier) in list.range(..me).rev().take(per_memory) {
            let key = (memory.clone(), earlier.to_string(), link_type.clone());
            links.insert(key, user.clone());
        }
        // Memories after it that now have it among their nearest earlier ones.
        let after = (Bound::Excluded(me), Bound::Unbounded);
        for &(later_at, later) in list.range(after).take(per_memory) {
            let nearest = list.range(..(later_at, later)).rev().take(per_memory);
            if nearest.clone().any(|&(_, m)| m == memory) {
                let key = (later.to_string(), memory.clone(), link_type.clone());
                links.insert(key, user.clone());
            }
        }
    }
    links
}

/// The resolved names grouped by entity: several names may have become one entity (a new
/// name matched by its vector), and the entity table has one row per id.
#[derive(Debug)]
pub struct EntityPlan<'a> {
    resolved: &'a [Resolved],
    by_entity: BTreeMap<String, Vec<usize>>,
}

impl<'a> EntityPlan<'a> {
    pub fn new(resolved: &'a [Resolved]) -> EntityPlan<'a> {
        let mut by_entity: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        for (r, e) in resolved.iter().enumerate() {
            by_entity.entry(e.id.clone()).or_default().push(r);
        }
        EntityPlan {
            resolved,
            by_entity,
        }
    }

    fn is_new(&self, positions: &[usize]) -> bool {
        positions.iter().all(|&r| self.resolved[r].new)
    }

    /// How many entities are new.
    pub fn new_entities(&self) -> usize {
        self.by_entity.values().filter(|rs| self.is_new(rs)).count()
    }

    /// The entities that may exist already (their rows are read before `rows`).
    pub fn existing_ids(&self) -> Vec<String> {
        let existing = self.by_entity.iter().filter(|(_, rs)| !self.is_new(rs));
        existing.map(|(id, _)| id.clone()).collect()
    }

    /// The entity rows to write at `now`: a new entity whole (with the vector of its name, if
    /// it was embedded: `vectors` by position in `resolved`, made by `model`); an existing one
    /// (`current`, by id) only when it gains an alias (compared normalised), a type, or comes
    /// back from archive.
    pub fn rows(
        &self,
        mut current: BTreeMap<String, EntityRow>,
        (vectors, model): (&BTreeMap<usize, Vec<f32>>, &str),
        now: i64,
    ) -> Vec<EntityRow> {
        let mut rows = Vec::new();
        for (id, rs) in &self.by_entity {
            let first = &self.resolved[rs[0]];
            let aliases: BTreeSet<String> = rs
                .iter()
                .flat_map(|&r| self.resolved[r].aliases.iter().cloned())
                .collect();
            match current.remove(id) {
                Some(row) => {
                    let mut list = row.aliases.clone();
                    let before = list.len();
                    for alias in aliases {
                        let key = normalise_name(&alias);
                        if !list.iter().any(|a| normalise_name(a) == key) {
                            list.push(alias);
                        }
                    }
                    let retyped = rs.iter().any(|&r| self.resolved[r].changed_type);
                    if list.len() == before && !retyped && row.archived_at.is_none() {
                        continue;
                    }
                    rows.push(EntityRow {
                        aliases: list,
                        entity_type: first.entity_type.clone(),
                        archived_at: None,
                        updated_at: now,
                        ..row
                    });
                }
                None => {
                    let vector = rs.iter().find_map(|r| vectors.get(r)).cloned();
                    rows.push(EntityRow {
                        id: id.clone(),
                        aliases: aliases.into_iter().collect(),
                        embedding_model: vector.as_ref().map(|_| model.to_string()),
                        embedding: vector.clone(),
                        name_embedding: vector,
                        ..EntityRow::new(&first.user, &first.name, &first.entity_type, now)
                    });
                }
            }
        }
        rows
    }

    /// Existing entities a newly read memory names (`pairs`): `memlife describe` looks again.
    pub fn named_again(&self, pairs: &BTreeSet<(String, String, String)>) -> Vec<String> {
        let named: BTreeSet<&String> = pairs
            .iter()
            .map(|(_, e, _)| e)
            .filter(|e| self.by_entity.get(*e).is_some_and(|rs| !self.is_new(rs)))
            .collect();
        named.into_iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mention(name: &str, entity_type: &'static str) -> Mention {
        Mention {
            name: name.into(),
            entity_type,
            strong: true,
        }
    }

    fn known(id: &str, name: &str, entity_type: &str, aliases: &[&str]) -> Known {
        let aliases: Vec<String> = aliases.iter().map(|a| a.to_string()).collect();
        Known::new(id.into(), name.into(), entity_type.into(), &aliases)
    }

    #[test]
    fn a_known_name_resolves_to_its_entity_and_an_unknown_one_is_new() {
        let known = BTreeMap::from([(
            "u".to_string(),
            vec![known("e1", "Lina", "person", &["Lina K"])],
        )]);
        let read = [mention("lina k", "person"), mention("Utrecht", "place")];
        let names = resolve_by_name([("u", &read[..])], &known);
        assert_eq!(names.resolved.len(), 2);
        let lina = &names.resolved[names.by_key[&("u".into(), "lina k".into())]];
        assert_eq!((lina.id.as_str(), lina.new), ("e1", false));
        // Found under an alias: the name as written is kept as one.
        assert_eq!(lina.aliases, BTreeSet::from(["lina k".to_string()]));
        let city = &names.resolved[names.by_key[&("u".into(), "utrecht".into())]];
        assert!(city.new);
        assert_eq!(
            names.unmatched,
            [names.by_key[&("u".into(), "utrecht".into())]]
        );
        assert_eq!(names.matched_by_name, 1);
        // Another user's entity of the same name is not this user's.
        let other = resolve_by_name([("v", &read[..1])], &known);
        assert!(other.resolved[0].new);
    }

    #[test]
    fn types_must_agree_unless_one_side_is_other() {
        let known = BTreeMap::from([(
            "u".to_string(),
            vec![
                known("p", "Jordan", "person", &[]),
                known("o", "Mercury", "other", &[]),
            ],
        )]);
        let read = [mention("Jordan", "place"), mention("Mercury", "place")];
        let names = resolve_by_name([("u", &read[..])], &known);
        let jordan = &names.resolved[names.by_key[&("u".into(), "jordan".into())]];
        assert!(jordan.new, "a place named Jordan is not the person");
        let mercury = &names.resolved[names.by_key[&("u".into(), "mercury".into())]];
        assert_eq!(mercury.id, "o");
        assert!(mercury.changed_type);
        assert_eq!(mercury.entity_type, "place");
    }

    #[test]
    fn the_spelling_written_most_names_a_new_entity() {
        let read = [
            mention("ACME", "organization"),
            mention("Acme", "organization"),
            mention("Acme", "organization"),
        ];
        let names = resolve_by_name([("u", &read[..])], &BTreeMap::new());
        assert_eq!(names.resolved.len(), 1);
        assert_eq!(names.resolved[0].name, "Acme");
    }

    fn memory(id: &'static str, at: i64) -> ReadMemory<'static> {
        ReadMemory {
            id,
            user: "u",
            created_at: at,
        }
    }

    #[test]
    fn links_chain_each_memory_to_its_nearest_earlier_ones_only() {
        let resolved = vec![Resolved {
            id: "e".into(),
            user: "u".into(),
            name: "Lina".into(),
            entity_type: "person".into(),
            new: false,
            aliases: BTreeSet::new(),
            changed_type: false,
        }];
        let memories = [
            memory("a", 1),
            memory("b", 2),
            memory("c", 3),
            memory("d", 4),
        ];
        let existing = vec![
            ("a".to_string(), "e".to_string()),
            ("b".to_string(), "e".to_string()),
            ("d".to_string(), "e".to_string()),
        ];
        // "c" is read now: it links to "b" (its one nearest earlier), and "d", whose nearest
        // earlier memory it now is, links to it.
        let pairs = BTreeSet::from([("c".to_string(), "e".to_string(), "u".to_string())]);
        let links = shares_entity_links(&memories, &existing, &pairs, &resolved, ("se:", 1));
        let keys: Vec<(&str, &str)> = links
            .keys()
            .map(|(s, t, _)| (s.as_str(), t.as_str()))
            .collect();
        assert_eq!(keys, [("c", "b"), ("d", "c")]);
        assert!(links.keys().all(|(_, _, ty)| ty == "se:Lina"));
        // With two per memory, "c" reaches "a" too, and "d" still has it among its two.
        let links = shares_entity_links(&memories, &existing, &pairs, &resolved, ("se:", 2));
        assert_eq!(links.len(), 3);
    }

    #[test]
    fn existing_entities_are_rewritten_only_when_something_changes() {
        let resolved = vec![
            Resolved {
                aliases: BTreeSet::new(),
                ..Resolved::known_as(&known("same", "Lina", "person", &[]), "u", "")
            },
            Resolved::known_as(&known("alias", "Robert", "person", &[]), "u", "Bob"),
            Resolved {
                new: true,
                ..Resolved::known_as(&known("new", "Utrecht", "place", &[]), "u", "x")
            },
        ];
        let plan = EntityPlan::new(&resolved);
        assert_eq!(plan.new_entities(), 1);
        assert_eq!(plan.existing_ids(), ["alias", "same"]);
        let row = |id: &str, name: &str| EntityRow {
            id: id.into(),
            ..EntityRow::new("u", name, "person", 0)
        };
        let current = BTreeMap::from([
            ("same".to_string(), row("same", "Lina")),
            ("alias".to_string(), row("alias", "Robert")),
        ]);
        let vectors = BTreeMap::from([(2, vec![1.0, 0.0])]);
        let rows = plan.rows(current, (&vectors, "m"), 9);
        let ids: Vec<&str> = rows.iter().map(|r| r.id.as_str()).collect();
        // Lina found by her own name: nothing new to write.
        assert_eq!(ids, ["alias", "new"]);
        assert_eq!(rows[0].aliases, ["Bob"]);
        assert_eq!(rows[0].updated_at, 9);
        assert_eq!(rows[1].name_embedding.as_deref(), Some(&[1.0, 0.0][..]));
        assert_eq!(rows[1].embedding_model.as_deref(), Some("m"));
        let pairs = BTreeSet::from([
            ("m1".to_string(), "same".to_string(), "u".to_string()),
            ("m1".to_string(), "new".to_string(), "u".to_string()),
        ]);
        assert_eq!(plan.named_again(&pairs), ["same"]);
    }

    #[test]
    fn an_archived_entity_named_again_comes_back() {
        let resolved = vec![Resolved::known_as(
            &known("e", "Lina", "person", &[]),
            "u",
            "Lina",
        )];
        let current = BTreeMap::from([(
            "e".to_string(),
            EntityRow {
                id: "e".into(),
                archived_at: Some(5),
                ..EntityRow::new("u", "Lina", "person", 0)
            },
        )]);
        let rows = EntityPlan::new(&resolved).rows(current, (&BTreeMap::new(), ""), 9);
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0].archived_at, None);
    }
}
