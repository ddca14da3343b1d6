//! Hub clustering (seed 000 "Hub-Based Cluster Identification", seed 001 clustering): which
//! memories of one user are candidates for consolidation into one.
//!
//! - **Hubs**: memories with importance >= 0.3 and access_count >= 5, or with >= 5 inbound
//!   non-entity links; the top 50 by importance (ties by id). Each hub, best first, takes its
//!   neighbours at or above the similarity threshold that no earlier cluster took, up to the
//!   maximum size; a cluster smaller than the minimum is dropped and frees its members.
//! - **Full** mode (seed 001: "regardless of time"), for stores with no access history yet:
//!   every memory is a possible seed, those with the most neighbours above the threshold first
//!   (then importance, then id), the same greedy assignment.
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
}

impl Default for ClusterParams {
    fn default() -> Self {
        ClusterParams {
            hub_min_importance: 0.3,
            hub_min_access_count: 5,
            hub_min_inbound_links: 5,
            max_hubs_per_user: 50,
            min_size: 3,
            max_size: 20,
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

/// Seeds for full mode: every row, those with the most neighbours at or above `threshold`
/// first, then importance descending, then id.
pub fn full_seeds(
    memories: &[Member],
    neighbours: &[Vec<Neighbour>],
    threshold: f32,
) -> Vec<usize> {
    let mut rows: Vec<(usize, usize)> = neighbours
        .iter()
        .enumerate()
        .map(|(row, list)| (row, list.iter().filter(|n| n.score >= threshold).count()))
        .collect();
    rows.sort_by(|a, b| {
        b.1.cmp(&a.1)
            .then_with(|| {
                memories[b.0]
                    .importance
                    .total_cmp(&memories[a.0].importance)
            })
            .then_with(|| memories[a.0].id.cmp(&memories[b.0].id))
    });
    rows.into_iter().map(|(row, _)| row).collect()
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
    fn full_mode_seeds_the_densest_memories_first() {
        let memories: Vec<Member> = (0..4)
            .map(|i| member(&format!("m{i}"), 0.5, 0, 0))
            .collect();
        let neighbours = vec![
            vec![n(1, 0.9)],
            vec![n(0, 0.9), n(2, 0.85), n(3, 0.8)],
            vec![n(1, 0.85)],
            vec![n(1, 0.7)],
        ];
        assert_eq!(full_seeds(&memories, &neighbours, 0.75), [1, 0, 2, 3]);
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
