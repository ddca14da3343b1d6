//! Exact neighbour search over L2-normalised f32 vectors (cosine similarity = dot product):
//! the top-k neighbours of each query, and every neighbour above a threshold. Work is split
//! across rayon's threads by query block, and each block walks the corpus in cache-sized
//! tiles, so a tile of the corpus is read once per block of queries, not once per query.
//!
//! Pure: slices in, indices and scores out. No Lance, no I/O.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

use rayon::prelude::*;

#[allow(unsafe_code)]
pub mod int8;
pub mod partition;

/// Queries handled together: their rows stay in L1/L2 while a corpus tile streams past.
const QUERY_BLOCK: usize = 16;
/// Corpus rows per tile: 256 rows of 384 f32 are 384 KiB, about one L2 cache.
const CORPUS_TILE: usize = 256;

/// A neighbour: its row in the corpus and its cosine similarity to the query.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Neighbour {
    pub index: u32,
    pub score: f32,
}

/// Orders the heap so its top is the worst kept neighbour (lowest score, then highest index).
#[derive(Clone, Copy, PartialEq)]
struct Worst(Neighbour);

impl Eq for Worst {}

impl PartialOrd for Worst {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Worst {
    fn cmp(&self, other: &Self) -> Ordering {
        other
            .0
            .score
            .total_cmp(&self.0.score)
            .then(self.0.index.cmp(&other.0.index))
    }
}

/// Scales a vector to unit length; a zero vector stays zero.
pub fn normalise(vector: &mut [f32]) {
    let norm = vector.iter().map(|v| v * v).sum::<f32>().sqrt();
    if norm > 0.0 {
        vector.iter_mut().for_each(|v| *v /= norm);
    }
}

#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    // Eight independent accumulators let the compiler vectorise without reassociation.
    let mut sums = [0.0f32; 8];
    let chunks = a.len() / 8;
    for c in 0..chunks {
        let (x, y) = (&a[c * 8..c * 8 + 8], &b[c * 8..c * 8 + 8]);
        for lane in 0..8 {
            sums[lane] += x[lane] * y[lane];
        }
    }
    let mut total: f32 = sums.iter().sum();
    for i in chunks * 8..a.len() {
        total += a[i] * b[i];
    }
    total
}

/// Sorts best first: higher score, then lower index, so results are the same on every run.
fn sort_best_first(neighbours: &mut [Neighbour]) {
    neighbours.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.index.cmp(&b.index)));
}

/// Where a query sits in the corpus, so it is not its own neighbour.
#[derive(Clone, Copy, Debug)]
pub enum SelfMatch<'a> {
    /// Queries are not corpus rows.
    None,
    /// Query `i` is corpus row `i` (all-pairs over one set).
    SameRows,
    /// Query `i` is corpus row `rows[i]`.
    Rows(&'a [u32]),
}

impl SelfMatch<'_> {
    fn row_of(&self, query: usize) -> Option<u32> {
        match self {
            SelfMatch::None => None,
            SelfMatch::SameRows => Some(query as u32),
            SelfMatch::Rows(rows) => rows.get(query).copied(),
        }
    }
}

fn check_shapes(queries: &[f32], corpus: &[f32], dim: usize) {
    assert!(dim > 0, "vector width must be positive");
    assert_eq!(queries.len() % dim, 0, "queries are not rows of {dim}");
    assert_eq!(corpus.len() % dim, 0, "corpus is not rows of {dim}");
}

/// Visits every (query, corpus row, score) of one block of queries, tile by tile.
fn scan_block(block: &[f32], corpus: &[f32], dim: usize, mut visit: impl FnMut(usize, u32, f32)) {
    let queries_in_block = block.len() / dim;
    let corpus_rows = corpus.len() / dim;
    for tile_start in (0..corpus_rows).step_by(CORPUS_TILE) {
        let tile_end = (tile_start + CORPUS_TILE).min(corpus_rows);
        for q in 0..queries_in_block {
            let query = &block[q * dim..(q + 1) * dim];
            for row in tile_start..tile_end {
                let score = dot(query, &corpus[row * dim..(row + 1) * dim]);
                visit(q, row as u32, score);
            }
        }
    }
}

/// The `k` nearest corpus rows of each query, best first. Vectors must be normalised.
pub fn top_k(
    queries: &[f32],
    corpus: &[f32],
    dim: usize,
    k: usize,
    self_match: SelfMatch,
) -> Vec<Vec<Neighbour>> {
    check_shapes(queries, corpus, dim);
    if k == 0 {
        return vec![Vec::new(); queries.len() / dim];
    }
    queries
        .par_chunks(QUERY_BLOCK * dim)
        .enumerate()
        .flat_map_iter(|(block_index, block)| {
            let first = block_index * QUERY_BLOCK;
            let mut heaps: Vec<BinaryHeap<Worst>> = (0..block.len() / dim)
                .map(|_| BinaryHeap::with_capacity(k + 1))
                .collect();
            scan_block(block, corpus, dim, |q, row, score| {
                if self_match.row_of(first + q) == Some(row) {
                    return;
                }
                let heap = &mut heaps[q];
                let candidate = Worst(Neighbour { index: row, score });
                if heap.len() < k {
                    heap.push(candidate);
                } else if let Some(worst) = heap.peek()
                    && candidate < *worst
                {
                    heap.pop();
                    heap.push(candidate);
                }
            });
            heaps.into_iter().map(|heap| {
                let mut neighbours: Vec<Neighbour> = heap.into_iter().map(|w| w.0).collect();
                sort_best_first(&mut neighbours);
                neighbours
            })
        })
        .collect()
}

/// Every corpus row whose similarity to the query is at least `min_score`, best first.
pub fn above_threshold(
    queries: &[f32],
    corpus: &[f32],
    dim: usize,
    min_score: f32,
    self_match: SelfMatch,
) -> Vec<Vec<Neighbour>> {
    check_shapes(queries, corpus, dim);
    queries
        .par_chunks(QUERY_BLOCK * dim)
        .enumerate()
        .flat_map_iter(|(block_index, block)| {
            let first = block_index * QUERY_BLOCK;
            let mut found: Vec<Vec<Neighbour>> = vec![Vec::new(); block.len() / dim];
            scan_block(block, corpus, dim, |q, row, score| {
                if score >= min_score && self_match.row_of(first + q) != Some(row) {
                    found[q].push(Neighbour { index: row, score });
                }
            });
            found.into_iter().map(|mut neighbours| {
                sort_best_first(&mut neighbours);
                neighbours
            })
        })
        .collect()
}

/// Which kernel answered an all-pairs search.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Kernel {
    /// Blocked f32 dot products: exact.
    ExactF32,
    /// AVX-512 VNNI int8 candidates, re-ranked exactly (see `int8`).
    Int8Rerank,
    /// AVX2 int8 candidates (7-bit levels), re-ranked exactly (see `int8`).
    Int8RerankAvx2,
}

/// Below this many rows the exact kernel is as fast as quantising.
const INT8_MIN_ROWS: usize = 2048;

/// How an all-pairs search runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AllPairs {
    /// The exact f32 kernel even where the int8 pass is available.
    pub exact: bool,
    /// The int8 instruction set (`None`: this CPU's best). A set this CPU lacks panics.
    pub isa: Option<int8::Isa>,
    /// Let large sets try a partition of nearby lists (`partition`); off, every pair is
    /// scored.
    pub partition: bool,
}

impl Default for AllPairs {
    fn default() -> Self {
        AllPairs {
            exact: false,
            isa: None,
            partition: true,
        }
    }
}

/// What answered an all-pairs search.
#[derive(Clone, Debug, serde::Serialize)]
pub struct AllPairsRun {
    pub kernel: Kernel,
    /// The partition planned (chosen or not), when one was tried.
    pub partition: Option<partition::ProbePlan>,
}

/// The `k` nearest other rows of every row of one set (all pairs), best first, with exact
/// scores. Large sets on CPUs with AVX-512 VNNI or AVX2 take the int8 pass, its candidates
/// re-ranked exactly (`int8::candidates_for`), over a partition when the data allows one;
/// the rest the exact f32 kernel. `how` can force the f32 kernel, an instruction set, or
/// every pair (the benchmark compares them).
pub fn all_pairs_top_k(
    vectors: &[f32],
    dim: usize,
    k: usize,
    how: AllPairs,
) -> (Vec<Vec<Neighbour>>, AllPairsRun) {
    check_shapes(vectors, vectors, dim);
    if !how.exact
        && vectors.len() / dim >= INT8_MIN_ROWS
        && let Some(isa) = how.isa.or_else(int8::isa)
    {
        let (found, plan) = int8::all_pairs_top_k_int8(
            vectors,
            dim,
            k,
            int8::candidates_for(isa, k),
            isa,
            how.partition,
        );
        let kernel = match isa {
            int8::Isa::Avx512Vnni => Kernel::Int8Rerank,
            int8::Isa::Avx2 => Kernel::Int8RerankAvx2,
        };
        return (
            found,
            AllPairsRun {
                kernel,
                partition: plan,
            },
        );
    }
    let found = top_k(vectors, vectors, dim, k, SelfMatch::SameRows);
    (
        found,
        AllPairsRun {
            kernel: Kernel::ExactF32,
            partition: None,
        },
    )
}

/// The textbook loop: one thread, one query at a time, a full sort. The reference that tests
/// and the benchmark compare the kernels with.
pub fn top_k_naive(
    queries: &[f32],
    corpus: &[f32],
    dim: usize,
    k: usize,
    self_match: SelfMatch,
) -> Vec<Vec<Neighbour>> {
    check_shapes(queries, corpus, dim);
    (0..queries.len() / dim)
        .map(|q| {
            let query = &queries[q * dim..(q + 1) * dim];
            let mut all: Vec<Neighbour> = (0..corpus.len() / dim)
                .filter(|&row| self_match.row_of(q) != Some(row as u32))
                .map(|row| Neighbour {
                    index: row as u32,
                    score: query
                        .iter()
                        .zip(&corpus[row * dim..(row + 1) * dim])
                        .map(|(a, b)| a * b)
                        .sum(),
                })
                .collect();
            sort_best_first(&mut all);
            all.truncate(k);
            all
        })
        .collect()
}

/// How many of a query's exact neighbours an indexed search found, for recall@k: the query
/// itself is no neighbour of its own, on either side (an index finds every stored query
/// first, and counting that as a hit would lift recall by one in k for nothing).
pub fn recall_hits(query: &str, exact: &[&str], found: &[&str], k: usize) -> usize {
    let found: std::collections::HashSet<&str> = found
        .iter()
        .copied()
        .filter(|id| *id != query)
        .take(k)
        .collect();
    exact
        .iter()
        .filter(|id| **id != query)
        .take(k)
        .filter(|id| found.contains(**id))
        .count()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn the_query_finding_itself_is_no_hit() {
        // The index returns the query first, then one true neighbour and one stranger.
        assert_eq!(recall_hits("q", &["a", "b"], &["q", "a", "x"], 2), 1);
        // The query found first does not push a true neighbour out of the k.
        assert_eq!(recall_hits("q", &["a", "b"], &["q", "a", "b"], 2), 2);
        // Self in the exact list too (a search that did not exclude it) counts nothing.
        assert_eq!(recall_hits("q", &["q", "a"], &["q", "a"], 2), 1);
        // Only the first k found count.
        assert_eq!(recall_hits("q", &["a", "b"], &["x", "y", "a", "b"], 2), 0);
    }
    use crate::synth::Rng;

    /// Uniform random unit vectors: no structure at all.
    pub(crate) fn random_unit_rows(rows: usize, dim: usize, seed: u64) -> Vec<f32> {
        let mut rng = Rng::new(seed);
        let mut data: Vec<f32> = (0..rows * dim)
            .map(|_| (rng.unit() * 2.0 - 1.0) as f32)
            .collect();
        data.chunks_mut(dim).for_each(normalise);
        data
    }

    #[test]
    fn top_k_matches_the_naive_loop() {
        for (rows, dim, k) in [(1, 4, 3), (50, 7, 5), (300, 384, 10), (700, 16, 1)] {
            let corpus = random_unit_rows(rows, dim, rows as u64);
            let fast = top_k(&corpus, &corpus, dim, k, SelfMatch::SameRows);
            let slow = top_k_naive(&corpus, &corpus, dim, k, SelfMatch::SameRows);
            assert_eq!(fast.len(), rows);
            for (f, s) in fast.iter().zip(&slow) {
                let fi: Vec<u32> = f.iter().map(|n| n.index).collect();
                let si: Vec<u32> = s.iter().map(|n| n.index).collect();
                assert_eq!(fi, si, "rows {rows} dim {dim} k {k}");
                for (a, b) in f.iter().zip(s) {
                    assert!((a.score - b.score).abs() < 1e-5);
                }
            }
        }
    }

    #[test]
    fn a_query_is_not_its_own_neighbour_and_identical_rows_score_one() {
        let mut corpus = random_unit_rows(20, 8, 3);
        let copy: Vec<f32> = corpus[0..8].to_vec();
        corpus[5 * 8..6 * 8].copy_from_slice(&copy);
        let result = top_k(&corpus, &corpus, 8, 1, SelfMatch::SameRows);
        assert_eq!(result[0][0].index, 5);
        assert!((result[0][0].score - 1.0).abs() < 1e-6);
        let rows = [5u32];
        let query = &corpus[5 * 8..6 * 8];
        let result = top_k(query, &corpus, 8, 1, SelfMatch::Rows(&rows));
        assert_eq!(result[0][0].index, 0);
    }

    #[test]
    fn threshold_returns_exactly_the_rows_at_or_above_it() {
        let corpus = random_unit_rows(200, 6, 9);
        let found = above_threshold(&corpus, &corpus, 6, 0.8, SelfMatch::SameRows);
        for (q, neighbours) in found.iter().enumerate() {
            let expected = (0..200)
                .filter(|&r| {
                    r != q && dot(&corpus[q * 6..q * 6 + 6], &corpus[r * 6..r * 6 + 6]) >= 0.8
                })
                .count();
            assert_eq!(neighbours.len(), expected);
            assert!(neighbours.windows(2).all(|w| w[0].score >= w[1].score));
        }
    }

    #[test]
    fn k_larger_than_the_corpus_returns_everything_else() {
        let corpus = random_unit_rows(4, 3, 1);
        let result = top_k(&corpus, &corpus, 3, 10, SelfMatch::SameRows);
        assert!(result.iter().all(|r| r.len() == 3));
        assert!(
            top_k(&corpus, &corpus, 3, 0, SelfMatch::None)
                .iter()
                .all(Vec::is_empty)
        );
    }
}
