//! A partition that lets the all-pairs int8 pass skip most pairs, checked on every run.
//!
//! The rows are split into lists by spherical k-means (about `LIST_ROWS` rows a list); each
//! list is paired with itself and with the `probes` lists whose centroids are nearest its own
//! (the relation is made symmetric, so a pair scored once serves both of its rows). Only rows of
//! paired lists are scored against each other.
//!
//! Whether that finds the neighbours is measured, not assumed: a sample of rows gets its exact
//! top-k over all rows, and the smallest probe count whose pairs miss at most `MAX_MISS` of
//! those neighbours (99% upper bound) is chosen. When no probe count does within `MAX_WORK` of
//! the exhaustive pass's pairs, there is no partition and the caller scores every pair. That is
//! what happens on vectors without structure (uniform random unit vectors: a row's neighbours
//! are spread over all lists), while embeddings of text, whose neighbours share a region, need
//! a tenth of the pairs. The first `SCREEN_QUERIES` check rows are searched first: when even
//! the widest pairing allowed surely misses too many of theirs (99% lower bound), the
//! partition is refused without searching for the others' neighbours.
//!
//! Deterministic: the same vectors give the same lists and pairs (fixed sample, fixed starting
//! centroids, sums in row order, ties to the lower index).
//!
//! Pure: slices in, lists out.

use std::time::Instant;

use rayon::prelude::*;

/// Rows per list on average: a list's bytes (384 rows x 384 dimensions) sit in L2, like a
/// block of the exhaustive pass.
const LIST_ROWS: usize = 384;
const MIN_LISTS: usize = 16;
const MAX_LISTS: usize = 4096;
/// k-means runs on this many sampled rows per list.
const SAMPLE_PER_LIST: usize = 32;
const ITERATIONS: usize = 6;
/// Rows whose exact neighbours decide the probe count.
const CHECK_QUERIES: usize = 512;
/// The first check rows, whose neighbours can refuse a partition alone (the rest are then
/// not searched).
const SCREEN_QUERIES: usize = 128;
/// The share of exact neighbours the paired lists may miss: a partition is chosen when the
/// check rows' miss rate is below it with 99% confidence (mean + 2.33 standard errors over
/// the check rows, whose misses come in clumps: one row far from its list misses several).
/// Strict on purpose: on 100k synthetic memories, 512 check rows put 16 probes at 0.12%
/// missed where 500 other random rows missed 0.44%; the int8 pass loses another ~0.1%, and
/// recall@10 must stay at or above 0.99.
pub const MAX_MISS: f64 = 0.0025;
const Z_99: f64 = 2.33;
/// Beyond this share of the exhaustive pass's pairs a partition saves too little.
pub const MAX_WORK: f64 = 0.4;
/// Probe counts tried, smallest first.
const PROBES: [usize; 11] = [4, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192];

/// Rows grouped into lists and the list pairs to score.
pub struct Partition {
    /// Each list's rows, ascending.
    pub lists: Vec<Vec<u32>>,
    /// Paired lists (a <= b), each pair once, nearest first (every list with itself, then
    /// by how near each list ranks the other); every list is paired with itself.
    pub pairs: Vec<(u32, u32)>,
}

/// What the planner measured and chose, for reports.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ProbePlan {
    pub lists: usize,
    /// The chosen probe count; `None` when no count reached the coverage within the work
    /// limit (then every pair is scored).
    pub probes: Option<usize>,
    /// Check rows whose exact top-k was compared (the first `SCREEN_QUERIES` alone when they
    /// refused the partition; none when no probe count is within the work limit), the share
    /// of those neighbours the chosen pairs hold, and the 99% upper bound of the share missed
    /// (for `None`: the lowest bound seen within the work limit).
    pub sample_queries: usize,
    pub sample_coverage: f64,
    pub miss_bound: Option<f64>,
    /// Scored pairs as a share of all pairs (from the sample's list sizes until the chosen
    /// partition is built, then from the real lists).
    pub work_fraction: f64,
    pub seconds: f64,
}

/// The partition for these rows, or `None` (with what was measured) when scoring every pair
/// is needed to keep the sample's neighbours. `dot` and `dot4` are the f32 dot products to
/// use (`int8::dot_f32`, `int8::dot4_f32`).
pub fn plan_probes(
    vectors: &[f32],
    dim: usize,
    k: usize,
    dot: fn(&[f32], &[f32]) -> f32,
    dot4: super::int8::Dot4,
) -> (Option<Partition>, ProbePlan) {
    let started = Instant::now();
    let rows = vectors.len() / dim;
    let row = |i: usize| &vectors[i * dim..(i + 1) * dim];
    let lists = (rows / LIST_ROWS)
        .clamp(MIN_LISTS, MAX_LISTS)
        .min(rows.max(1));
    let sampled: Vec<usize> = spread(rows, (lists * SAMPLE_PER_LIST).min(rows));
    let dots = Dots {
        one: dot,
        four: dot4,
    };
    let centroids = kmeans(vectors, dim, &sampled, lists, dots);
    let nearest_list = |v: &[f32]| nearest(v, &centroids, dim, dots);

    // The check rows: drawn at random (fixed seed) from the rows k-means did not see, whose
    // lists fit them less well than the lists fit the rows they were made from.
    let mut in_sample = vec![false; rows];
    sampled.iter().for_each(|&i| in_sample[i] = true);
    let unseen = rows - sampled.len();
    let mut rng = crate::synth::Rng::new(0x9e37_79b9_7f4a_7c15);
    let mut queries: Vec<usize> = Vec::with_capacity(CHECK_QUERIES.min(unseen));
    while queries.len() < CHECK_QUERIES.min(unseen) {
        let i = rng.below(rows);
        if !in_sample[i] {
            in_sample[i] = true;
            queries.push(i);
        }
    }
    // A set so small that k-means saw every row is checked on rows it saw.
    if queries.is_empty() {
        queries = spread(rows, CHECK_QUERIES.min(rows));
    }
    let sample_lists: Vec<usize> = sampled.par_iter().map(|&i| nearest_list(row(i))).collect();
    let mut sample_sizes = vec![0usize; lists];
    sample_lists.iter().for_each(|&l| sample_sizes[l] += 1);
    let order = centroid_order(&centroids, dim, lists, dot);
    // The probe counts the work limit allows, smallest first (each pairs more lists).
    let mut candidates: Vec<(usize, Vec<bool>, f64)> = Vec::new();
    for probes in PROBES.into_iter().filter(|&p| p < lists) {
        let paired = paired_lists(&order, lists, probes);
        let work = work_fraction(&paired, &sample_sizes);
        if work > MAX_WORK {
            break;
        }
        candidates.push((probes, paired, work));
    }
    let mut plan = ProbePlan {
        lists,
        probes: None,
        sample_queries: 0,
        sample_coverage: 0.0,
        miss_bound: None,
        work_fraction: 1.0,
        seconds: 0.0,
    };
    // The check rows' exact neighbours and the lists they fall in: the first `SCREEN_QUERIES`
    // first. Where even the widest allowed pairing (a narrower one pairs a subset of its
    // lists, so misses at least as much) surely misses too many of theirs (the 99% lower bound
    // above the limit), the check as a whole would refuse too, and the other rows' exact
    // search (most of the plan's time) is not paid for.
    let lists_of = |queries: &[usize]| {
        let truth = exact_top_k(vectors, dim, queries, k, dot4);
        let of_query: Vec<usize> = queries.par_iter().map(|&i| nearest_list(row(i))).collect();
        let of_truth: Vec<Vec<usize>> = truth
            .par_iter()
            .map(|found| found.iter().map(|&(_, i)| nearest_list(row(i))).collect())
            .collect();
        (of_query, of_truth)
    };
    let Some((_, widest, widest_work)) = candidates.last() else {
        plan.seconds = started.elapsed().as_secs_f64();
        return (None, plan);
    };
    let screened = SCREEN_QUERIES.min(queries.len());
    let (mut list_of_query, mut list_of_truth) = lists_of(&queries[..screened]);
    let screen = Misses::of(widest, lists, &list_of_query, &list_of_truth);
    if screen.lower_bound() > MAX_MISS {
        plan.sample_queries = screened;
        plan.sample_coverage = 1.0 - screen.mean;
        plan.miss_bound = Some(screen.upper_bound());
        plan.work_fraction = *widest_work;
        plan.seconds = started.elapsed().as_secs_f64();
        return (None, plan);
    }
    let (rest_query, rest_truth) = lists_of(&queries[screened..]);
    list_of_query.extend(rest_query);
    list_of_truth.extend(rest_truth);
    plan.sample_queries = queries.len();

    let mut chosen = None;
    for (probes, paired, work) in candidates {
        let misses = Misses::of(&paired, lists, &list_of_query, &list_of_truth);
        let bound = misses.upper_bound();
        if plan.miss_bound.is_none_or(|b| bound < b) {
            plan.sample_coverage = 1.0 - misses.mean;
            plan.miss_bound = Some(bound);
        }
        plan.work_fraction = work;
        if bound <= MAX_MISS {
            plan.sample_coverage = 1.0 - misses.mean;
            plan.miss_bound = Some(bound);
            plan.probes = Some(probes);
            chosen = Some(paired);
            break;
        }
    }
    let Some(paired) = chosen else {
        plan.seconds = started.elapsed().as_secs_f64();
        return (None, plan);
    };

    let assigned: Vec<usize> = (0..rows)
        .into_par_iter()
        .map(|i| nearest_list(row(i)))
        .collect();
    let mut members: Vec<Vec<u32>> = vec![Vec::new(); lists];
    for (i, &l) in assigned.iter().enumerate() {
        members[l].push(i as u32);
    }
    let sizes: Vec<usize> = members.iter().map(Vec::len).collect();
    plan.work_fraction = work_fraction(&paired, &sizes);
    // Nearest pairs first: by the better of the two lists' ranks of each other.
    let mut rank = vec![usize::MAX; lists * lists];
    for (a, near) in order.iter().enumerate() {
        rank[a * lists + a] = 0;
        for (r, &b) in near.iter().enumerate() {
            let b = b as usize;
            rank[a * lists + b] = rank[a * lists + b].min(r + 1);
            rank[b * lists + a] = rank[b * lists + a].min(r + 1);
        }
    }
    let mut pairs: Vec<(u32, u32)> = (0..lists)
        .flat_map(|a| (a..lists).map(move |b| (a, b)))
        .filter(|&(a, b)| paired[a * lists + b] && sizes[a] > 0 && sizes[b] > 0)
        .map(|(a, b)| (a as u32, b as u32))
        .collect();
    pairs.sort_by_key(|&(a, b)| (rank[a as usize * lists + b as usize], a, b));
    plan.seconds = started.elapsed().as_secs_f64();
    (
        Some(Partition {
            lists: members,
            pairs,
        }),
        plan,
    )
}

/// Per check row, the share of its exact neighbours outside the lists paired with its own:
/// their mean and the standard error of the mean.
struct Misses {
    mean: f64,
    standard_error: f64,
    rows: f64,
}

impl Misses {
    fn of(paired: &[bool], lists: usize, of_query: &[usize], of_truth: &[Vec<usize>]) -> Misses {
        let missed: Vec<f64> = of_query
            .iter()
            .zip(of_truth)
            .map(|(&a, bs)| {
                let out = bs.iter().filter(|&&b| !paired[a * lists + b]).count();
                out as f64 / bs.len().max(1) as f64
            })
            .collect();
        let n = missed.len().max(1) as f64;
        let mean = missed.iter().sum::<f64>() / n;
        let variance = missed.iter().map(|m| (m - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
        Misses {
            mean,
            standard_error: (variance / n).sqrt(),
            rows: n,
        }
    }

    /// The 99% upper bound of the miss rate, never less than one row in n above the mean: no
    /// misses among the check rows does not prove none.
    fn upper_bound(&self) -> f64 {
        self.mean + (Z_99 * self.standard_error).max(1.0 / self.rows)
    }

    /// The 99% lower bound of the miss rate.
    fn lower_bound(&self) -> f64 {
        self.mean - Z_99 * self.standard_error
    }
}

/// `count` indices spread evenly over `0..rows`.
fn spread(rows: usize, count: usize) -> Vec<usize> {
    (0..count).map(|i| i * rows / count.max(1)).collect()
}

/// The f32 dot products the planner uses (`int8::dot_f32`, `int8::dot4_f32`).
#[derive(Clone, Copy)]
struct Dots {
    one: fn(&[f32], &[f32]) -> f32,
    four: super::int8::Dot4,
}

/// The index of the centroid nearest `v` (the lowest index on a tie). Four centroids at a
/// time against `v`, which is read once for the four (the assignment of every row to its
/// list is the planner's largest product: rows x lists x dim).
fn nearest(v: &[f32], centroids: &[f32], dim: usize, dots: Dots) -> usize {
    let mut best = (f32::NEG_INFINITY, 0usize);
    let mut quads = centroids.chunks_exact(4 * dim);
    for (q, quad) in quads.by_ref().enumerate() {
        let scores = (dots.four)(
            [
                &quad[..dim],
                &quad[dim..2 * dim],
                &quad[2 * dim..3 * dim],
                &quad[3 * dim..],
            ],
            v,
        );
        for (j, &score) in scores.iter().enumerate() {
            if score > best.0 {
                best = (score, 4 * q + j);
            }
        }
    }
    let done = centroids.len() / dim / 4 * 4;
    for (j, centroid) in quads.remainder().chunks_exact(dim).enumerate() {
        let score = (dots.one)(v, centroid);
        if score > best.0 {
            best = (score, done + j);
        }
    }
    best.1
}

/// Spherical k-means over the sampled rows: starts from evenly spaced sample rows; a list
/// that loses every row keeps its centroid.
fn kmeans(vectors: &[f32], dim: usize, sampled: &[usize], lists: usize, dots: Dots) -> Vec<f32> {
    let row = |i: usize| &vectors[i * dim..(i + 1) * dim];
    let mut centroids: Vec<f32> = spread(sampled.len(), lists)
        .into_iter()
        .flat_map(|s| row(sampled[s]).iter().copied())
        .collect();
    for _ in 0..ITERATIONS {
        let assigned: Vec<usize> = sampled
            .par_iter()
            .map(|&i| nearest(row(i), &centroids, dim, dots))
            .collect();
        let mut members: Vec<Vec<usize>> = vec![Vec::new(); lists];
        for (&i, &l) in sampled.iter().zip(&assigned) {
            members[l].push(i);
        }
        centroids
            .par_chunks_mut(dim)
            .zip(members.par_iter())
            .for_each(|(centroid, rows)| {
                if rows.is_empty() {
                    return;
                }
                centroid.fill(0.0);
                for &i in rows {
                    centroid.iter_mut().zip(row(i)).for_each(|(c, v)| *c += v);
                }
                super::normalise(centroid);
            });
    }
    centroids
}

/// For each list, the other lists by centroid similarity, nearest first (ties to the lower
/// index), at most the largest probe count.
fn centroid_order(
    centroids: &[f32],
    dim: usize,
    lists: usize,
    dot: fn(&[f32], &[f32]) -> f32,
) -> Vec<Vec<u32>> {
    let keep = PROBES[PROBES.len() - 1].min(lists.saturating_sub(1));
    (0..lists)
        .into_par_iter()
        .map(|a| {
            let ca = &centroids[a * dim..(a + 1) * dim];
            let mut others: Vec<(f32, u32)> = (0..lists)
                .filter(|&b| b != a)
                .map(|b| (dot(ca, &centroids[b * dim..(b + 1) * dim]), b as u32))
                .collect();
            others.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)));
            others.truncate(keep);
            others.into_iter().map(|(_, b)| b).collect()
        })
        .collect()
}

/// The symmetric pairing of lists (a list x list matrix): each list with itself and its
/// `probes` nearest lists, either way round.
fn paired_lists(order: &[Vec<u32>], lists: usize, probes: usize) -> Vec<bool> {
    let mut paired = vec![false; lists * lists];
    for (a, near) in order.iter().enumerate() {
        paired[a * lists + a] = true;
        for &b in near.iter().take(probes) {
            paired[a * lists + b as usize] = true;
            paired[b as usize * lists + a] = true;
        }
    }
    paired
}

/// Pairs of rows the pairing scores, as a share of all pairs, for lists of these sizes.
fn work_fraction(paired: &[bool], sizes: &[usize]) -> f64 {
    let lists = sizes.len();
    let total: f64 = sizes.iter().sum::<usize>() as f64;
    let mut work = 0.0f64;
    for a in 0..lists {
        for b in a..lists {
            if paired[a * lists + b] {
                let product = (sizes[a] * sizes[b]) as f64;
                work += if a == b { product / 2.0 } else { product };
            }
        }
    }
    work / (total * total / 2.0).max(1.0)
}

/// Each query row's exact `k` nearest other rows (score, row), best first. The rows stream
/// past all queries once, in chunks split across threads, four queries at a time. Not the
/// parent's `top_k`: that one splits the work by blocks of 16 queries, each reading the whole
/// corpus again (32 passes over 150 MB for 512 check rows of 100k), with the portable dot.
fn exact_top_k(
    vectors: &[f32],
    dim: usize,
    queries: &[usize],
    k: usize,
    dot4: super::int8::Dot4,
) -> Vec<Vec<(f32, usize)>> {
    const CHUNK: usize = 4096;
    const TILE: usize = 64;
    let rows = vectors.len() / dim;
    let row = |i: usize| &vectors[i * dim..(i + 1) * dim];
    let better = |a: &(f32, usize), b: &(f32, usize)| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1));
    let keep = |list: &mut Vec<(f32, usize)>, item: (f32, usize)| {
        if list.len() == k && better(&item, &list[k - 1]).is_ge() {
            return;
        }
        let at = list.partition_point(|x| better(x, &item).is_lt());
        list.insert(at, item);
        list.truncate(k);
    };
    let partial: Vec<Vec<Vec<(f32, usize)>>> = (0..rows.div_ceil(CHUNK))
        .into_par_iter()
        .map(|chunk| {
            let mut found = vec![Vec::with_capacity(k + 1); queries.len()];
            let end = ((chunk + 1) * CHUNK).min(rows);
            for tile in (chunk * CHUNK..end).step_by(TILE) {
                for (group, ids) in queries.chunks(4).enumerate() {
                    // A short last group repeats its first query; the repeats are dropped.
                    let four: [&[f32]; 4] = std::array::from_fn(|j| row(ids[j.min(ids.len() - 1)]));
                    for r in tile..(tile + TILE).min(end) {
                        let scores = dot4(four, row(r));
                        for (j, &query) in ids.iter().enumerate() {
                            if r != query {
                                keep(&mut found[group * 4 + j], (scores[j], r));
                            }
                        }
                    }
                }
            }
            found
        })
        .collect();
    (0..queries.len())
        .map(|q| {
            let mut merged = Vec::with_capacity(k + 1);
            for found in &partial {
                for &item in &found[q] {
                    keep(&mut merged, item);
                }
            }
            merged
        })
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::similarity::int8::dot4_f32;
    use crate::similarity::tests::random_unit_rows;
    use crate::similarity::{dot, normalise};
    use crate::synth::Rng;

    /// Rows with the layered structure of text embeddings: topics (random directions),
    /// subjects within a topic, and groups of paraphrases of one fact within a subject, each
    /// layer a random offset from the one above. Rows are shuffled, not grouped by position.
    pub(crate) fn topical(rows: usize, dim: usize, seed: u64) -> Vec<f32> {
        let mut rng = Rng::new(seed);
        let mut noise = |centre: &[f32], spread: f32| -> Vec<f32> {
            let mut v: Vec<f32> = centre
                .iter()
                .map(|c| c + spread * (rng.unit() * 2.0 - 1.0) as f32)
                .collect();
            normalise(&mut v);
            v
        };
        let origin = vec![0.0f32; dim];
        let mut data = Vec::with_capacity(rows * dim);
        'topics: loop {
            let topic = noise(&origin, 1.0);
            for _ in 0..10 {
                let subject = noise(&topic, 0.12);
                for _ in 0..10 {
                    let fact = noise(&subject, 0.06);
                    for _ in 0..12 {
                        data.extend(noise(&fact, 0.04));
                        if data.len() == rows * dim {
                            break 'topics;
                        }
                    }
                }
            }
        }
        let mut order: Vec<usize> = (0..rows).collect();
        let mut shuffle = Rng::new(seed ^ 1);
        for i in (1..rows).rev() {
            order.swap(i, shuffle.below(i + 1));
        }
        order
            .into_iter()
            .flat_map(|r| data[r * dim..(r + 1) * dim].to_vec())
            .collect()
    }

    #[test]
    fn structured_rows_get_a_partition_that_holds_the_sample_neighbours() {
        let dim = 32;
        let data = topical(20_000, dim, 3);
        let (partition, plan) = plan_probes(&data, dim, 10, dot, dot4_f32());
        let partition =
            partition.unwrap_or_else(|| panic!("grouped rows are partitioned: {plan:?}"));
        assert!(plan.miss_bound.unwrap() <= MAX_MISS, "{plan:?}");
        assert!(plan.work_fraction < MAX_WORK, "{plan:?}");
        // Chosen on every check row, not on the screen alone.
        assert_eq!(plan.sample_queries, CHECK_QUERIES);
        // Every row is in exactly one list; lists are sorted; pairs are ordered and unique.
        let mut seen = vec![0u8; 20_000];
        for list in &partition.lists {
            assert!(list.windows(2).all(|w| w[0] < w[1]));
            list.iter().for_each(|&r| seen[r as usize] += 1);
        }
        assert!(seen.iter().all(|&s| s == 1));
        assert!(partition.pairs.iter().all(|&(a, b)| a <= b));
        let mut pairs = partition.pairs.clone();
        pairs.dedup();
        assert_eq!(pairs.len(), partition.pairs.len());
        // The same rows give the same partition.
        let (again, _) = super::plan_probes(&data, dim, 10, dot, dot4_f32());
        let again = again.unwrap();
        assert_eq!(again.lists, partition.lists);
        assert_eq!(again.pairs, partition.pairs);
    }

    #[test]
    fn rows_without_structure_get_no_partition() {
        let dim = 64;
        let data = random_unit_rows(20_000, dim, 5);
        let (partition, plan) = plan_probes(&data, dim, 10, dot, dot4_f32());
        assert!(partition.is_none(), "{plan:?}");
        assert_eq!(plan.probes, None);
        assert!(plan.miss_bound.unwrap() > MAX_MISS, "{plan:?}");
        // Refused on the first check rows: the others' exact neighbours were not searched.
        assert_eq!(plan.sample_queries, SCREEN_QUERIES, "{plan:?}");
    }

    #[test]
    fn the_nearest_centroid_is_the_best_scoring_one_for_any_count() {
        // Four centroids at a time, then the remainder one by one: every count of centroids
        // (whole groups of four, a remainder, fewer than four) gives the naive argmax.
        let dim = 24;
        let rows = random_unit_rows(40, dim, 13);
        let dots = Dots {
            one: dot,
            four: dot4_f32(),
        };
        for count in 1..=11 {
            let centroids = random_unit_rows(count, dim, 100 + count as u64);
            for v in rows.chunks_exact(dim) {
                let naive = (0..count)
                    .max_by(|&a, &b| {
                        let score = |c: usize| dot(v, &centroids[c * dim..(c + 1) * dim]);
                        score(a).total_cmp(&score(b)).then(b.cmp(&a))
                    })
                    .unwrap();
                assert_eq!(
                    nearest(v, &centroids, dim, dots),
                    naive,
                    "{count} centroids"
                );
            }
        }
    }

    #[test]
    fn the_sample_truth_is_the_exact_top_k() {
        let dim = 16;
        let data = random_unit_rows(5000, dim, 9);
        // Five queries: a group of four and a short one.
        let queries = [0usize, 17, 4999, 2500, 3];
        let found = exact_top_k(&data, dim, &queries, 5, dot4_f32());
        for (&q, found) in queries.iter().zip(&found) {
            let mut all: Vec<(f32, usize)> = (0..5000)
                .filter(|&r| r != q)
                .map(|r| {
                    (
                        dot(&data[q * dim..(q + 1) * dim], &data[r * dim..(r + 1) * dim]),
                        r,
                    )
                })
                .collect();
            all.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            for (f, a) in found.iter().zip(&all[..5]) {
                assert_eq!(f.1, a.1);
                assert!((f.0 - a.0).abs() < 1e-5);
            }
        }
    }
}
