//! Hub clustering (seed 000 "Hub-Based Cluster Identification", seed 001 clustering): which
//! memories of one user are candidates for consolidation into one.
//!
//! - **Hubs**: memories with importance >= 0.3 and access_count >= 5, or with >= 5 inbound
//!   non-entity links; the top 50 by importance (ties by id). Each hub, best first, takes its
//!   neighbours at or above the similarity threshold that no earlier cluster took, up to the
//!   maximum size; a cluster smaller than the minimum is dropped and frees its members.
//!   A user nobody has recalled from yet (no memory accessed) has no hub by that rule but
//!   the links one: there the hubs are the well-connected memories (`connected_hubs`):
//!   importance >= 0.3 and at least `hub_min_connections` neighbours at the threshold or
//!   inbound non-entity links, the most connected first.
//! - **Full** mode (seed 001: "regardless of time"), for stores with no access history yet:
//!   complete-linkage agglomeration over scored pairs (`agglomerate`): the closest pairs join
//!   first, and two groups join only when every pair across them reaches the threshold, so a
//!   group is tight rather than a chain, and a pair is a group. A pair's score is its cosine
//!   plus `term_bonus` when both texts hold one specific term (`specific_terms`: a word few of
//!   the user's memories use) and plus `entity_bonus` when both name one entity few of them
//!   name (`shared_names`); two memories naming one such entity are a candidate pair even
//!   when neither is among the other's nearest neighbours. That is where embeddings miss a
//!   paraphrase or a complementary detail of one thing ("User is building Saucier" and
//!   "User writes Saucier in Kotlin").
//! - **Layers** (full mode): one exclusive round leaves out a pair whose halves each joined a
//!   closer group of their own ("User's parrot is named Rex" sits with "User's tortoise is
//!   named Rex", away from "User has a parrot"). Each further round (`layers`, default 2)
//!   agglomerates the pairs no earlier group holds both halves of; within a round a memory
//!   joins one group, so a memory joins at most `layers` clusters and no two memories share
//!   two. Consolidation applies a memory's first approved group and records the other stale.
//!
//! Neighbours are taken from exact top-k lists (the caller's all-pairs search), best first,
//! ties by row; so the same input gives the same clusters. Each cluster carries its pairwise
//! similarities and a consolidation confidence: the mean pairwise similarity of its members
//! (how tight it is), in [-1, 1].
//!
//! Pure: rows, vectors and neighbour lists in, clusters out.

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use super::similarity::{Neighbour, dot};

/// What makes a hub and a cluster (`[cluster]` in memlife.toml; the threshold comes from the
/// embedding model's `[thresholds]` unless given).
#[derive(Clone, Debug, Deserialize, Serialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct ClusterParams {
    pub hub_min_importance: f64,
    pub hub_min_access_count: i64,
    pub hub_min_inbound_links: i64,
    /// For a user with no access history: neighbours at the threshold plus inbound links a
    /// memory needs to be a hub.
    pub hub_min_connections: usize,
    pub max_hubs_per_user: usize,
    pub min_size: usize,
    pub max_size: usize,
    /// Added to a pair's cosine when both texts hold a specific term (full mode).
    pub term_bonus: f32,
    /// A word is specific when at most this share of the user's memories (and at least 2)
    /// hold it.
    pub term_share: f64,
    /// Added to a pair's score when both name one entity (full mode).
    pub entity_bonus: f32,
    /// An entity named by more of the user's memories than this tells none of them apart.
    pub entity_max_memories: usize,
    /// Rounds of agglomeration in full mode: how many clusters a memory may join.
    pub layers: usize,
}

impl Default for ClusterParams {
    fn default() -> Self {
        ClusterParams {
            hub_min_importance: 0.3,
            hub_min_access_count: 5,
            hub_min_inbound_links: 5,
            hub_min_connections: 2,
            max_hubs_per_user: 50,
            min_size: 2,
            max_size: 20,
            term_bonus: 0.1,
            term_share: 0.02,
            entity_bonus: 0.2,
            entity_max_memories: 20,
            layers: 2,
        }
    }
}

impl ClusterParams {
    pub fn validate(&self) -> Result<(), String> {
        if self.min_size < 2 {
            return Err(format!(
                "cluster.min_size = {}: a cluster has at least 2 memories",
                self.min_size
            ));
        }
        if self.max_size < self.min_size {
            return Err(format!(
                "cluster.max_size = {} is below cluster.min_size = {}",
                self.max_size, self.min_size
            ));
        }
        if !(0.0..=1.0).contains(&self.term_share) || !(0.0..=1.0).contains(&self.term_bonus) {
            return Err(format!(
                "cluster.term_share = {} and cluster.term_bonus = {}: expected 0..1",
                self.term_share, self.term_bonus
            ));
        }
        if !(0.0..=1.0).contains(&self.entity_bonus) {
            return Err(format!(
                "cluster.entity_bonus = {}: expected 0..1",
                self.entity_bonus
            ));
        }
        if !(1..=4).contains(&self.layers) {
            return Err(format!(
                "cluster.layers = {}: expected 1 (a memory joins one cluster) to 4",
                self.layers
            ));
        }
        if !(0.0..=1.0).contains(&self.hub_min_importance) {
            return Err(format!(
                "cluster.hub_min_importance = {}: expected 0..1",
                self.hub_min_importance
            ));
        }
        Ok(())
    }
}

/// What clustering reads of one memory.
#[derive(Clone, Debug)]
pub struct Member {
    pub id: String,
    pub importance: f64,
    pub access_count: i64,
    /// Links of other memories pointing at this one, entity links excluded.
    pub inbound_links: i64,
}

/// One cluster: rows of the caller's memories, the seed first.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Cluster {
    pub members: Vec<usize>,
    /// Similarity of each pair (i < j) of `members`, row-major upper triangle.
    pub pairwise: Vec<f32>,
    /// Mean pairwise similarity.
    pub confidence: f32,
}

/// Whether a memory is a hub.
pub fn is_hub(m: &Member, p: &ClusterParams) -> bool {
    (m.importance >= p.hub_min_importance && m.access_count >= p.hub_min_access_count)
        || m.inbound_links >= p.hub_min_inbound_links
}

/// The hubs, best first: importance descending, then id; at most `max_hubs_per_user`.
pub fn hubs(memories: &[Member], p: &ClusterParams) -> Vec<usize> {
    let mut rows: Vec<usize> = (0..memories.len())
        .filter(|&i| is_hub(&memories[i], p))
        .collect();
    rows.sort_by(|&a, &b| {
        memories[b]
            .importance
            .total_cmp(&memories[a].importance)
            .then_with(|| memories[a].id.cmp(&memories[b].id))
    });
    rows.truncate(p.max_hubs_per_user);
    rows
}

/// Whether no memory of a user was ever accessed: the access rule finds no hub there.
pub fn never_recalled(memories: &[Member]) -> bool {
    memories.iter().all(|m| m.access_count <= 0)
}

/// The hubs of a user nobody has recalled from: memories with importance >= the hub minimum
/// and at least `hub_min_connections` connections (neighbours at or above `threshold`, plus
/// inbound non-entity links), the most connected first (then importance, then id); at most
/// `max_hubs_per_user`.
pub fn connected_hubs(
    memories: &[Member],
    neighbours: &[Vec<Neighbour>],
    threshold: f32,
    p: &ClusterParams,
) -> Vec<usize> {
    let connections = |i: usize| {
        neighbours[i]
            .iter()
            .filter(|n| n.score >= threshold)
            .count()
            + memories[i].inbound_links.max(0) as usize
    };
    let mut rows: Vec<(usize, usize)> = (0..memories.len())
        .filter(|&i| memories[i].importance >= p.hub_min_importance)
        .map(|i| (i, connections(i)))
        .filter(|&(_, c)| c >= p.hub_min_connections)
        .collect();
    rows.sort_by(|&(a, ca), &(b, cb)| {
        cb.cmp(&ca)
            .then(memories[b].importance.total_cmp(&memories[a].importance))
            .then_with(|| memories[a].id.cmp(&memories[b].id))
    });
    rows.truncate(p.max_hubs_per_user);
    rows.into_iter().map(|(i, _)| i).collect()
}

/// Greedy clusters from `seeds` in order: each seed not yet taken gathers its neighbours (best
/// first, as listed) at or above `threshold` that are not taken, up to `max_size` in all; kept
/// when it reaches `min_size`.
pub fn assign(
    seeds: &[usize],
    neighbours: &[Vec<Neighbour>],
    threshold: f32,
    p: &ClusterParams,
) -> Vec<Vec<usize>> {
    let mut taken = vec![false; neighbours.len()];
    let mut clusters = Vec::new();
    for &seed in seeds {
        if taken[seed] {
            continue;
        }
        let mut members = vec![seed];
        for n in &neighbours[seed] {
            if members.len() >= p.max_size {
                break;
            }
            let row = n.index as usize;
            if n.score >= threshold && !taken[row] && !members.contains(&row) {
                members.push(row);
            }
        }
        if members.len() >= p.min_size {
            for &m in &members {
                taken[m] = true;
            }
            clusters.push(members);
        }
    }
    clusters
}

/// Words too common to tell two memories apart, whatever the store.
const STOP_WORDS: &[&str] = &[
    "the", "and", "for", "with", "that", "this", "from", "about", "into", "onto", "over", "under",
    "are", "was", "were", "been", "being", "has", "have", "had", "their", "there", "they", "them",
    "his", "her", "hers", "him", "she", "its", "our", "your", "you", "who", "what", "when",
    "where", "which", "while", "will", "would", "can", "could", "not", "but", "also", "very",
    "just", "each", "every", "some", "any", "all", "more", "most", "user", "users",
];

/// The specific terms of each text: its words (lower case, three letters or more, a
/// possessive `'s` dropped, stop words left out) that at most `share` of `texts` hold (and
/// never fewer than 2, so a word two memories share counts).
pub fn specific_terms(texts: &[&str], share: f64) -> Vec<std::collections::BTreeSet<String>> {
    let words: Vec<std::collections::BTreeSet<String>> = texts
        .iter()
        .map(|t| {
            crate::reading::words(t)
                .into_iter()
                .map(|w| w.strip_suffix("'s").map(str::to_string).unwrap_or(w))
                .filter(|w| w.chars().count() >= 3 && !STOP_WORDS.contains(&w.as_str()))
                .collect()
        })
        .collect();
    let mut df: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for set in &words {
        for w in set {
            *df.entry(w.as_str()).or_default() += 1;
        }
    }
    let most = ((share * texts.len() as f64).floor() as usize).max(2);
    words
        .iter()
        .map(|set| {
            set.iter()
                .filter(|w| df[w.as_str()] <= most)
                .cloned()
                .collect()
        })
        .collect()
}

/// The entities each text names (normalised, as the `entities` job reads one user's texts),
/// keeping those at most `max_memories` of the texts name: a name in everything (the
/// speaker's) tells no two apart.
pub fn shared_names(
    texts: &[&str],
    max_memories: usize,
) -> Vec<std::collections::BTreeSet<String>> {
    let names: Vec<std::collections::BTreeSet<String>> =
        crate::entities::read_user(texts, &Default::default())
            .into_iter()
            .map(|found| {
                found
                    .iter()
                    .map(|m| crate::entities::normalise_name(&m.name))
                    .filter(|n| !n.is_empty())
                    .collect()
            })
            .collect();
    let mut df: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for set in &names {
        for n in set {
            *df.entry(n.as_str()).or_default() += 1;
        }
    }
    names
        .iter()
        .map(|set| {
            set.iter()
                .filter(|n| df[n.as_str()] <= max_memories)
                .cloned()
                .collect()
        })
        .collect()
}

/// What full mode scores a pair by, per row.
pub struct PairSignals<'a> {
    pub vectors: &'a [f32],
    pub dim: usize,
    /// `specific_terms` of each row.
    pub terms: &'a [std::collections::BTreeSet<String>],
    /// `shared_names` of each row.
    pub names: &'a [std::collections::BTreeSet<String>],
}

/// The scored pairs of full mode, each once (lower row first): the neighbour pairs and the
/// pairs naming one entity; each scores its cosine, + `term_bonus` when both rows hold a
/// specific term, + `entity_bonus` when both name one entity; kept when the score reaches
/// `threshold`.
pub fn scored_pairs(
    neighbours: &[Vec<Neighbour>],
    signals: &PairSignals<'_>,
    threshold: f32,
    p: &ClusterParams,
) -> Vec<(f32, u32, u32)> {
    use std::collections::{BTreeMap, BTreeSet};
    let mut candidates: BTreeMap<(u32, u32), Option<f32>> = BTreeMap::new();
    for (row, list) in neighbours.iter().enumerate() {
        for n in list {
            let (a, b) = (row.min(n.index as usize), row.max(n.index as usize));
            if a != b {
                candidates.insert((a as u32, b as u32), Some(n.score));
            }
        }
    }
    let mut holders: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
    for (row, set) in signals.names.iter().enumerate() {
        for name in set {
            holders.entry(name.as_str()).or_default().push(row as u32);
        }
    }
    for rows in holders.values() {
        for (i, &a) in rows.iter().enumerate() {
            for &b in &rows[i + 1..] {
                candidates.entry((a, b)).or_insert(None);
            }
        }
    }
    let dim = signals.dim;
    let row = |i: u32| &signals.vectors[i as usize * dim..(i as usize + 1) * dim];
    let shares = |x: &BTreeSet<String>, y: &BTreeSet<String>| x.intersection(y).next().is_some();
    candidates
        .into_iter()
        .filter_map(|((a, b), cosine)| {
            let cosine = cosine.unwrap_or_else(|| dot(row(a), row(b)));
            let (ia, ib) = (a as usize, b as usize);
            let mut score = cosine;
            if shares(&signals.terms[ia], &signals.terms[ib]) {
                score += p.term_bonus;
            }
            if shares(&signals.names[ia], &signals.names[ib]) {
                score += p.entity_bonus;
            }
            (score >= threshold).then_some((score, a, b))
        })
        .collect()
}

/// Full mode's groups in `layers` rounds of `agglomerate`: the first over every pair, each
/// further one over the pairs no earlier group holds both halves of. A memory joins at most
/// one group per round; the first round's groups come first.
pub fn layered(
    rows: usize,
    pairs: &[(f32, u32, u32)],
    max_size: usize,
    layers: usize,
) -> Vec<Vec<usize>> {
    let mut out: Vec<Vec<usize>> = Vec::new();
    let mut left: Vec<(f32, u32, u32)> = pairs.to_vec();
    for _ in 0..layers.max(1) {
        if left.is_empty() {
            break;
        }
        let groups = agglomerate(rows, &left, max_size);
        let mut together: std::collections::HashSet<(u32, u32)> = Default::default();
        for g in &groups {
            for (i, &x) in g.iter().enumerate() {
                for &y in &g[i + 1..] {
                    together.insert((x.min(y) as u32, x.max(y) as u32));
                }
            }
        }
        left.retain(|&(_, a, b)| !together.contains(&(a.min(b), a.max(b))));
        out.extend(groups);
    }
    out
}

/// Complete-linkage agglomeration: pairs join best first (ties by rows); two groups join when
/// every pair across them is among `pairs` (all of which reach the threshold) and together
/// they hold at most `max_size`. Groups of two or more, the best-scored first, each led by
/// the row of its best pair that came first.
pub fn agglomerate(rows: usize, pairs: &[(f32, u32, u32)], max_size: usize) -> Vec<Vec<usize>> {
    let mut sorted: Vec<(f32, u32, u32)> = pairs.to_vec();
    sorted.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)).then(x.2.cmp(&y.2)));
    let known: std::collections::HashSet<(u32, u32)> = sorted
        .iter()
        .map(|&(_, a, b)| (a.min(b), a.max(b)))
        .collect();
    let linked = |a: usize, b: usize| known.contains(&(a.min(b) as u32, a.max(b) as u32));
    let mut group: Vec<usize> = (0..rows).collect();
    let mut members: Vec<Vec<usize>> = (0..rows).map(|r| vec![r]).collect();
    let mut best: Vec<f32> = vec![f32::MIN; rows];
    for &(score, a, b) in &sorted {
        let (mut ga, mut gb) = (group[a as usize], group[b as usize]);
        // The smaller group joins the larger (ties: the lower one), whose lead stays first.
        if (members[gb].len(), std::cmp::Reverse(gb)) > (members[ga].len(), std::cmp::Reverse(ga)) {
            std::mem::swap(&mut ga, &mut gb);
        }
        if ga == gb || members[ga].len() + members[gb].len() > max_size {
            continue;
        }
        if !members[ga]
            .iter()
            .all(|&x| members[gb].iter().all(|&y| linked(x, y)))
        {
            continue;
        }
        let moved = std::mem::take(&mut members[gb]);
        for &m in &moved {
            group[m] = ga;
        }
        members[ga].extend(moved);
        best[ga] = best[ga].max(score).max(best[gb]);
    }
    let mut out: Vec<(f32, Vec<usize>)> = members
        .into_iter()
        .enumerate()
        .filter(|(_, m)| m.len() >= 2)
        .map(|(g, m)| (best[g], m))
        .collect();
    out.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1[0].cmp(&y.1[0])));
    out.into_iter().map(|(_, m)| m).collect()
}

/// Pairwise similarities and confidence of each cluster (in parallel across clusters).
pub fn describe_clusters(clusters: Vec<Vec<usize>>, vectors: &[f32], dim: usize) -> Vec<Cluster> {
    clusters
        .into_par_iter()
        .map(|members| {
            let row = |i: usize| &vectors[i * dim..(i + 1) * dim];
            let mut pairwise = Vec::with_capacity(members.len() * (members.len() - 1) / 2);
            for (a, &i) in members.iter().enumerate() {
                for &j in &members[a + 1..] {
                    pairwise.push(dot(row(i), row(j)));
                }
            }
            let confidence = pairwise.iter().sum::<f32>() / pairwise.len().max(1) as f32;
            Cluster {
                members,
                pairwise,
                confidence,
            }
        })
        .collect()
}

/// A cluster's identity for remembering decisions: its member ids and texts, sorted, hashed.
/// A rejected proposal is not asked again until this changes (a member added, removed or
/// edited).
pub fn signature(members: &[(&str, &str)]) -> String {
    let mut parts: Vec<String> = members
        .iter()
        .map(|(id, text)| format!("{id}\u{1f}{text}"))
        .collect();
    parts.sort();
    let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
    format!("{:016x}", super::hash::fnv1a(&refs))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, importance: f64, access: i64, inbound: i64) -> Member {
        Member {
            id: id.into(),
            importance,
            access_count: access,
            inbound_links: inbound,
        }
    }

    fn n(index: u32, score: f32) -> Neighbour {
        Neighbour { index, score }
    }

    #[test]
    fn hubs_are_important_and_used_or_well_linked_best_first() {
        let p = ClusterParams::default();
        let memories = [
            member("a", 0.9, 5, 0),
            member("b", 0.2, 50, 0), // not important enough, few links
            member("c", 0.1, 0, 5),  // well linked
            member("d", 0.9, 4, 4),  // one access short
            member("e", 0.95, 10, 0),
        ];
        assert_eq!(hubs(&memories, &p), [4, 0, 2]);
        let few = ClusterParams {
            max_hubs_per_user: 2,
            ..p
        };
        assert_eq!(hubs(&memories, &few), [4, 0]);
    }

    #[test]
    fn a_store_nobody_recalled_from_has_its_well_connected_memories_as_hubs() {
        let members = vec![
            member("a", 0.5, 0, 0),
            member("b", 0.5, 0, 0),
            member("c", 0.5, 0, 1),
            member("d", 0.2, 0, 0),
        ];
        assert!(never_recalled(&members));
        assert!(hubs(&members, &ClusterParams::default()).is_empty());
        // a: two neighbours at 0.8; b: one, plus nothing; c: one neighbour and one inbound
        // link; d: two neighbours but unimportant.
        let neighbours = vec![
            vec![n(1, 0.8), n(2, 0.8)],
            vec![n(0, 0.8), n(3, 0.5)],
            vec![n(0, 0.8)],
            vec![n(0, 0.9), n(1, 0.9)],
        ];
        let p = ClusterParams::default();
        assert_eq!(connected_hubs(&members, &neighbours, 0.75, &p), vec![0, 2]);
        let mut used = members.clone();
        used[3].access_count = 1;
        assert!(!never_recalled(&used));
    }

    #[test]
    fn a_memory_joins_one_cluster_and_small_clusters_free_their_members() {
        let p = ClusterParams {
            min_size: 3,
            max_size: 3,
            ..ClusterParams::default()
        };
        // 0 and 1 both reach 2, 3, 4; 5 reaches only 6.
        let neighbours = vec![
            vec![n(2, 0.95), n(3, 0.9), n(4, 0.85), n(1, 0.5)],
            vec![n(2, 0.9), n(3, 0.9), n(4, 0.9)],
            vec![],
            vec![],
            vec![],
            vec![n(6, 0.99), n(0, 0.2)],
            vec![],
        ];
        let clusters = assign(&[5, 0, 1], &neighbours, 0.8, &p);
        // 5 has one neighbour above 0.8: too small, nothing taken. 0 takes 2 and 3 (max 3);
        // 1 finds only 4 free: too small.
        assert_eq!(clusters, vec![vec![0, 2, 3]]);
        // The same input, the same clusters.
        assert_eq!(assign(&[5, 0, 1], &neighbours, 0.8, &p), clusters);
    }

    #[test]
    fn specific_terms_are_the_words_few_memories_hold() {
        let texts = [
            "Omar, the user's neighbour, works as a nurse.",
            "The user's neighbour is called Omar.",
            "The user works from home on Fridays.",
            "The user works at a bakery.",
            "The user has a neighbour's cat to feed.",
        ];
        // At share 0.4 of five texts, a word held by at most 2 counts: omar, nurse, home,
        // fridays, bakery, called, cat, feed; "works" (3) and "neighbour" (3) do not, nor
        // stop words ("the", "user") or short ones ("as", "at").
        let terms = specific_terms(&texts, 0.4);
        let names = |i: usize| terms[i].iter().cloned().collect::<Vec<_>>();
        assert_eq!(names(0), ["nurse", "omar"]);
        assert_eq!(names(1), ["called", "omar"]);
        assert_eq!(names(4), ["cat", "feed"]);
        // The floor of 2: even a tiny share lets a word two memories share count.
        assert!(specific_terms(&texts, 0.0)[0].contains("omar"));
    }

    fn set(words: &[&str]) -> std::collections::BTreeSet<String> {
        words.iter().map(|w| w.to_string()).collect()
    }

    #[test]
    fn pairs_gain_the_bonuses_only_for_a_shared_term_or_entity() {
        // Unit vectors in 2-d: rows 0..3 at angles whose cosines the neighbour lists carry;
        // row 3 is no one's neighbour.
        let angle = |deg: f32| [deg.to_radians().cos(), deg.to_radians().sin()];
        let vectors: Vec<f32> = [0.0, 47.2, 43.9, 60.0]
            .iter()
            .flat_map(|&d| angle(d))
            .collect();
        let neighbours = vec![
            vec![n(1, 0.68), n(2, 0.72)],
            vec![n(0, 0.68)],
            vec![n(0, 0.72)],
            vec![],
        ];
        let terms = vec![
            set(&["omar"]),
            set(&["omar", "nurse"]),
            set(&["tariq"]),
            set(&[]),
        ];
        let none = vec![set(&[]); 4];
        let p = ClusterParams::default();
        let signals = PairSignals {
            vectors: &vectors,
            dim: 2,
            terms: &terms,
            names: &none,
        };
        let pairs = scored_pairs(&neighbours, &signals, 0.75, &p);
        // 0-1 share "omar": 0.78 (listed once though both lists hold it); 0-2 share nothing:
        // 0.72, under the threshold.
        assert_eq!(pairs.len(), 1);
        assert_eq!((pairs[0].1, pairs[0].2), (0, 1));
        assert!((pairs[0].0 - 0.78).abs() < 1e-6);
        let no_bonus = ClusterParams {
            term_bonus: 0.0,
            ..p.clone()
        };
        assert!(scored_pairs(&neighbours, &signals, 0.75, &no_bonus).is_empty());
        // Rows 0 and 3 name one entity: a candidate though neither lists the other, scored
        // by their cosine (0.5) + the entity bonus (0.2) + the term bonus (0.1).
        let names = vec![set(&["saucier"]), set(&[]), set(&[]), set(&["saucier"])];
        let terms = vec![set(&["saucier"]), set(&[]), set(&[]), set(&["saucier"])];
        let signals = PairSignals {
            vectors: &vectors,
            dim: 2,
            terms: &terms,
            names: &names,
        };
        let pairs = scored_pairs(&neighbours, &signals, 0.75, &p);
        assert_eq!(pairs.len(), 1, "{pairs:?}");
        assert_eq!((pairs[0].1, pairs[0].2), (0, 3));
        assert!((pairs[0].0 - 0.8).abs() < 1e-4, "{pairs:?}");
    }

    #[test]
    fn shared_names_keep_the_entities_few_memories_name() {
        let texts = [
            "User is building Saucier, a recipe app.",
            "User writes Saucier in Kotlin.",
            "Caroline went to the gym with Omar.",
            "Caroline likes painting.",
            "Caroline adopted a dog.",
        ];
        let names = shared_names(&texts, 2);
        assert!(
            names[0].contains("saucier") && names[1].contains("saucier"),
            "{names:?}"
        );
        assert!(names[2].contains("omar"), "{names:?}");
        // Caroline is in three texts, above the cap of 2: she tells none of them apart.
        assert!(names.iter().all(|n| !n.contains("caroline")), "{names:?}");
    }

    #[test]
    fn a_second_layer_gathers_the_pairs_the_first_split() {
        // 0-1 closest: a group. 1-2 a pair too, but 0-2 not: the first round leaves 2 alone;
        // the second joins 1-2. 3-4 are a group in round one and never again.
        let pairs = vec![(0.95, 0, 1), (0.85, 1, 2), (0.9, 3, 4)];
        assert_eq!(layered(5, &pairs, 20, 1), vec![vec![0, 1], vec![3, 4]]);
        let two = layered(5, &pairs, 20, 2);
        assert_eq!(two, vec![vec![0, 1], vec![3, 4], vec![1, 2]]);
        // No two memories share two groups, however many rounds.
        assert_eq!(layered(5, &pairs, 20, 4), two);
    }

    #[test]
    fn agglomeration_joins_only_groups_close_across_every_pair() {
        // 0-1-2 all close: one group. 3-4 close, 4-5 close but 3-5 not: 5 stays out (no
        // chain). 6-7 a pair is a group. Max size 3 keeps 8 out of 0-1-2.
        let pairs = vec![
            (0.95, 0, 1),
            (0.90, 1, 2),
            (0.85, 0, 2),
            (0.88, 3, 4),
            (0.80, 4, 5),
            (0.79, 6, 7),
            (0.99, 2, 8),
            (0.99, 0, 8),
            (0.99, 1, 8),
        ];
        let groups = agglomerate(10, &pairs, 3);
        // 8 joins first (its pairs are best) with 0 then 1 (0-1 is linked): 0-8-1 reach the
        // cap, and 2 stays out.
        assert_eq!(groups, vec![vec![0, 8, 1], vec![3, 4], vec![6, 7]]);
        let groups = agglomerate(10, &pairs, 4);
        assert_eq!(groups, vec![vec![0, 8, 1, 2], vec![3, 4], vec![6, 7]]);
        // The same input, the same groups, whatever the pairs' order.
        let mut reversed = pairs.clone();
        reversed.reverse();
        assert_eq!(agglomerate(10, &reversed, 4), groups);
    }

    #[test]
    fn confidence_is_the_mean_pairwise_similarity() {
        let vectors = [1.0, 0.0, 1.0, 0.0, 0.0, 1.0];
        let described = describe_clusters(vec![vec![0, 1, 2]], &vectors, 2);
        assert_eq!(described[0].pairwise, [1.0, 0.0, 0.0]);
        assert!((described[0].confidence - 1.0 / 3.0).abs() < 1e-6);
    }

    #[test]
    fn a_signature_changes_with_membership_or_text_not_order() {
        let a = signature(&[("1", "x"), ("2", "y")]);
        assert_eq!(a, signature(&[("2", "y"), ("1", "x")]));
        assert_ne!(a, signature(&[("1", "x"), ("2", "y2")]));
        assert_ne!(a, signature(&[("1", "x"), ("2", "y"), ("3", "z")]));
    }

    #[test]
    fn bad_sizes_are_named() {
        let p = ClusterParams {
            min_size: 5,
            max_size: 4,
            ..ClusterParams::default()
        };
        assert!(p.validate().unwrap_err().contains("cluster.max_size"));
    }
}
