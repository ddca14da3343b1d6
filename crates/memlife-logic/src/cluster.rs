//! Hub clustering (seed 000 "Hub-Based Cluster Identification", seed 001 clustering): which
//! memories of one user are candidates for consolidation into one.
//!
//! - **Hubs**: memories with importance >= 0.3 and access_count >= 5, or with >= 5 inbound
//!   non-entity links; the top 50 by importance (ties by id). Each hub, best first, takes its
//!   neighbours at or above the similarity threshold that no earlier cluster took, up to the
//!   maximum size; a cluster smaller than the minimum is dropped and frees its members.
//! - **Full** mode (seed 001: "regardless of time"), for stores with no access history yet:
//!   complete-linkage agglomeration over the pairs of neighbours (`agglomerate`): the closest
//!   pairs join first, and two groups join only when every pair across them reaches the
//!   threshold, so a group is tight rather than a chain, and a pair is a group. A pair's score
//!   is its cosine plus `term_bonus` when both texts hold one specific term (`specific_terms`:
//!   a word few of the user's memories use, such as a name or a product), which is where
//!   embeddings miss a paraphrase or a complementary detail of one thing.
//!
//! A memory joins at most one cluster. Neighbours are taken from exact top-k lists (the
//! caller's all-pairs search), best first, ties by row; so the same input gives the same
//! clusters. Each cluster carries its pairwise similarities and a consolidation confidence:
//! the mean pairwise similarity of its members (how tight it is), in [-1, 1].
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
    pub max_hubs_per_user: usize,
    pub min_size: usize,
    pub max_size: usize,
    /// Added to a pair's cosine when both texts hold a specific term (full mode).
    pub term_bonus: f32,
    /// A word is specific when at most this share of the user's memories (and at least 2)
    /// hold it.
    pub term_share: f64,
}

impl Default for ClusterParams {
    fn default() -> Self {
        ClusterParams {
            hub_min_importance: 0.3,
            hub_min_access_count: 5,
            hub_min_inbound_links: 5,
            max_hubs_per_user: 50,
            min_size: 2,
            max_size: 20,
            term_bonus: 0.1,
            term_share: 0.02,
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

/// The scored pairs of full mode: each neighbour pair once (lower row first), its cosine plus
/// `bonus` when both rows hold a specific term, kept when the score reaches `threshold`.
pub fn scored_pairs(
    neighbours: &[Vec<Neighbour>],
    terms: &[std::collections::BTreeSet<String>],
    threshold: f32,
    bonus: f32,
) -> Vec<(f32, u32, u32)> {
    let mut pairs: std::collections::BTreeMap<(u32, u32), f32> = Default::default();
    for (row, list) in neighbours.iter().enumerate() {
        for n in list {
            let (a, b) = (row.min(n.index as usize), row.max(n.index as usize));
            if a == b {
                continue;
            }
            let shared = terms[a].intersection(&terms[b]).next().is_some();
            let score = n.score + if shared { bonus } else { 0.0 };
            if score >= threshold {
                pairs.insert((a as u32, b as u32), score);
            }
        }
    }
    pairs.into_iter().map(|((a, b), s)| (s, a, b)).collect()
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
pub fn describe(clusters: Vec<Vec<usize>>, vectors: &[f32], dim: usize) -> Vec<Cluster> {
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

    #[test]
    fn pairs_gain_the_bonus_only_for_a_shared_specific_term() {
        let neighbours = vec![
            vec![n(1, 0.68), n(2, 0.72)],
            vec![n(0, 0.68)],
            vec![n(0, 0.72)],
        ];
        let terms: Vec<std::collections::BTreeSet<String>> = vec![
            ["omar".to_string()].into(),
            ["omar".to_string(), "nurse".to_string()].into(),
            ["tariq".to_string()].into(),
        ];
        let pairs = scored_pairs(&neighbours, &terms, 0.75, 0.1);
        // 0-1 share "omar": 0.78 (listed once though both lists hold it); 0-2 share nothing:
        // 0.72, under the threshold.
        assert_eq!(pairs.len(), 1);
        assert_eq!((pairs[0].1, pairs[0].2), (0, 1));
        assert!((pairs[0].0 - 0.78).abs() < 1e-6);
        assert!(scored_pairs(&neighbours, &terms, 0.75, 0.0).is_empty());
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
        let described = describe(vec![vec![0, 1, 2]], &vectors, 2);
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
