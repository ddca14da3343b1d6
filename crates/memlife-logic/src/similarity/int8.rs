//! All-pairs top-k with an int8 first pass and an exact f32 re-rank (and, here too because
//! they need `unsafe` intrinsics, the AVX2 + FMA f32 dot products used by the re-rank and the
//! partition's planning).
//!
//! Every vector is quantised to signed bytes with its own scale (its largest component maps
//! to the top level). Scores of all pairs are computed once per unordered pair (the score
//! matrix is symmetric, so each block product updates the neighbour lists of both its rows and
//! its columns). Each row keeps its best `candidates` by approximate score; these are then
//! scored exactly in f32 and the best `k` returned. The approximation only chooses candidates:
//! every returned score is exact, and a neighbour is missed only when quantisation error moves
//! it from the true top `k` below the approximate top `candidates`, which the benchmark
//! measures as recall@k against the exact loop.
//!
//! Two instruction sets, chosen at run time (`isa()`):
//! - AVX-512 VNNI: `vpdpbusd` multiplies 64 unsigned by signed bytes and adds them into 16 i32
//!   lanes in one instruction; bytes span +-127.
//! - AVX2: `vpmaddubsw` multiplies 32 unsigned by signed bytes into 16 i16 pair sums, which
//!   saturate at 32767; so bytes span +-63 (unsigned side 1..127), two words' pair sums are
//!   added in i16 (at most 2 x 2 x 127 x 63 = 32004) and widened with `vpmaddwd` once per
//!   two words. Coarser levels cost some candidate accuracy, which the re-rank and a larger
//!   candidate list absorb (recall measured by the benchmark).
//!
//! Large sets first try a partition (`super::partition`): rows grouped into lists of nearby
//! rows, and only pairs within a list or between paired lists scored. The planner checks the
//! partition against exact neighbours of sampled rows before it is used; data without such
//! structure gets the exhaustive pass. The exhaustive pass is the same code over one list
//! paired with itself.
//!
//! Elsewhere callers fall back to the exact f32 kernel of the parent module.

use std::sync::Mutex;

use rayon::prelude::*;

use super::partition::{Partition, ProbePlan};
use super::{Neighbour, dot, sort_best_first};

/// Positions per chunk of a list: a chunk pair reads 2 x 384 x 384 bytes, well inside L2. A
/// multiple of `ALIGN`.
const BLOCK: usize = 384;
/// Rows per panel (VNNI): one zmm register holds 16 i32 lanes, one corpus row per lane.
const PANEL: usize = 16;
/// Panels scored together by the VNNI micro-kernel.
const PANELS: usize = 3;
/// Columns of one VNNI micro-kernel tile.
const TILE: usize = PANELS * PANEL;
/// Query rows scored together by the VNNI micro-kernel (8 rows x 3 panels = 24 accumulators
/// of the 32 zmm registers; each panel load feeds 8 multiply-adds, each broadcast 3).
const ROWS: usize = 8;

/// The AVX2 micro-kernel's shape: 8-row panels (a ymm register of 8 i32 lanes), 2 panels,
/// 4 query rows: 8 accumulators, 4 panel loads (two words), 2 broadcasts and a constant of
/// the 16 ymm registers.
const PANEL2: usize = 8;
const PANELS2: usize = 2;
const TILE2: usize = PANELS2 * PANEL2;
const ROWS2: usize = 4;

/// The instruction set the int8 kernel runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Isa {
    Avx512Vnni,
    Avx2,
}

impl Isa {
    /// Rows per panel of the layout the kernel reads.
    fn panel(self) -> usize {
        match self {
            Isa::Avx512Vnni => PANEL,
            Isa::Avx2 => PANEL2,
        }
    }

    /// The largest byte magnitude (the unsigned side is the byte + `levels` + 1).
    fn levels(self) -> i32 {
        match self {
            Isa::Avx512Vnni => 127,
            Isa::Avx2 => 63,
        }
    }
}

/// The best instruction set of this CPU for the int8 kernel, if any (checked at run time).
pub fn isa() -> Option<Isa> {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vnni")
        {
            return Some(Isa::Avx512Vnni);
        }
        if std::arch::is_x86_feature_detected!("avx2") {
            return Some(Isa::Avx2);
        }
        None
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        None
    }
}

/// Whether this CPU runs the int8 kernel.
pub fn available() -> bool {
    isa().is_some()
}

/// Positions of the quantised layout are aligned to this many rows: a multiple of every
/// kernel's row count and tile width, so a range of positions starting and ending on it is
/// whole tiles.
const ALIGN: usize = 48;

/// Vectors quantised to i8, in the two layouts the kernel reads. Rows sit at positions of a
/// layout: in order (the exhaustive pass) or grouped by list (a partition), each group
/// padded to `ALIGN` with rows that are never kept.
struct Quantised {
    /// Per position: the original row, or `u32::MAX` for padding.
    ids: Vec<u32>,
    /// Four dimensions per 32-bit word; the width is padded with zeros to an even number of
    /// words (the AVX2 kernel takes words in pairs).
    words: usize,
    /// Position-major signed bytes, one row = `words` little-endian words (broadcast per word).
    signed: Vec<i32>,
    /// Panels of `panel` positions: for each word, the rows' 4 bytes side by side, as unsigned
    /// bytes (value + levels + 1), so the kernel multiplies unsigned panel bytes by signed
    /// query bytes.
    panels: Vec<u8>,
    /// Per position: the scale from bytes back to the unit vector (0 for padding).
    scale: Vec<f32>,
    /// Per position: the offset x the sum of its signed bytes, the bias the offset adds to its
    /// scores as a query.
    bias: Vec<i32>,
}

impl Quantised {
    /// Quantises `vectors` into the positions of `ids` (a multiple of `ALIGN` long).
    fn new(vectors: &[f32], dim: usize, isa: Isa, ids: Vec<u32>) -> Self {
        let (panel_rows, levels) = (isa.panel(), isa.levels());
        let offset = levels + 1;
        let padded = ids.len();
        debug_assert!(padded.is_multiple_of(ALIGN));
        let words = dim.div_ceil(8) * 2;
        let mut bytes = vec![0i8; padded * words * 4];
        let mut scale = vec![0.0f32; padded];
        let mut bias = vec![0i32; padded];
        bytes
            .par_chunks_mut(words * 4)
            .zip(scale.par_iter_mut())
            .zip(bias.par_iter_mut())
            .zip(ids.par_iter())
            .for_each(|(((out, scale), bias), &id)| {
                if id == u32::MAX {
                    return;
                }
                let row = id as usize;
                let vector = &vectors[row * dim..(row + 1) * dim];
                let largest = vector.iter().fold(0.0f32, |m, v| m.max(v.abs()));
                if largest > 0.0 {
                    *scale = largest / levels as f32;
                    for (o, v) in out.iter_mut().zip(vector) {
                        *o = (v / *scale).round().clamp(-levels as f32, levels as f32) as i8;
                    }
                }
                *bias = offset * out.iter().map(|&b| b as i32).sum::<i32>();
            });
        let signed: Vec<i32> = bytes
            .chunks_exact(4)
            .map(|w| i32::from_le_bytes([w[0] as u8, w[1] as u8, w[2] as u8, w[3] as u8]))
            .collect();
        let mut panels = vec![0u8; padded * words * 4];
        panels
            .par_chunks_mut(words * panel_rows * 4)
            .enumerate()
            .for_each(|(panel, out)| {
                for lane in 0..panel_rows {
                    let row = panel * panel_rows + lane;
                    for word in 0..words {
                        for b in 0..4 {
                            let value = bytes[row * words * 4 + word * 4 + b];
                            out[word * panel_rows * 4 + lane * 4 + b] =
                                (value as i32 + offset) as u8;
                        }
                    }
                }
            });
        Quantised {
            ids,
            words,
            signed,
            panels,
            scale,
            bias,
        }
    }
}

/// Candidates kept per row for the exact re-rank: the coarser AVX2 levels keep more.
pub fn candidates_for(isa: Isa, k: usize) -> usize {
    match isa {
        Isa::Avx512Vnni => 2 * k + 8,
        Isa::Avx2 => 3 * k + 16,
    }
}

/// Each row's best candidates seen by one thread, by approximate score.
struct Table {
    candidates: usize,
    /// Per position: the lowest kept score once the row is full (-inf before; +inf for
    /// padding so nothing is ever kept for it).
    threshold: Vec<f32>,
    /// Per position: `candidates` slots of (score, position), a min-heap on the score (empty
    /// slots score -inf).
    slots: Vec<(f32, u32)>,
}

impl Table {
    fn new(ids: &[u32], candidates: usize) -> Self {
        let threshold = ids
            .iter()
            .map(|&id| {
                if id == u32::MAX {
                    f32::INFINITY
                } else {
                    f32::NEG_INFINITY
                }
            })
            .collect();
        Table {
            candidates,
            threshold,
            slots: vec![(f32::NEG_INFINITY, u32::MAX); ids.len() * candidates],
        }
    }

    /// Keeps `(score, index)` in the row's list, dropping its worst. Each row's slots are a
    /// binary min-heap on the score (the root is the worst kept), so an insert is a sift-down
    /// of log2(candidates) steps, not a scan of the list.
    #[inline]
    fn insert(&mut self, row: usize, score: f32, index: u32) {
        let c = self.candidates;
        let heap = &mut self.slots[row * c..(row + 1) * c];
        let mut at = 0;
        loop {
            let left = 2 * at + 1;
            if left >= c {
                break;
            }
            let right = left + 1;
            let child = if right < c && heap[right].0 < heap[left].0 {
                right
            } else {
                left
            };
            if heap[child].0 >= score {
                break;
            }
            heap[at] = heap[child];
            at = child;
        }
        heap[at] = (score, index);
        // The threshold may already be above the heap's root (raised from another table).
        self.threshold[row] = self.threshold[row].max(heap[0].0);
    }
}

/// The `k` nearest other rows of every row of `vectors` (L2-normalised, `dim` wide), best
/// first, with exact scores. `candidates` (at least `k`) rows per row are kept from the int8
/// pass and re-ranked exactly. With `partition`, sets of at least `PARTITION_MIN_ROWS` rows
/// first try a partition (`partition::plan_probes`) that scores only pairs of nearby lists; the plan
/// is returned when one was tried, chosen or not. Panics if the CPU lacks the instruction
/// set: check `isa()`.
pub fn all_pairs_top_k_int8(
    vectors: &[f32],
    dim: usize,
    k: usize,
    candidates: usize,
    isa: Isa,
    partition: bool,
) -> (Vec<Vec<Neighbour>>, Option<ProbePlan>) {
    assert!(
        self::isa() == Some(isa) || (isa == Isa::Avx2 && avx2_available()),
        "the int8 kernel needs {isa:?}"
    );
    assert!(
        dim > 0 && vectors.len().is_multiple_of(dim),
        "vectors are not rows of {dim}"
    );
    let from = if partition {
        PARTITION_MIN_ROWS
    } else {
        usize::MAX
    };
    search(vectors, dim, k, candidates, isa, from)
}

/// `all_pairs_top_k`, trying a partition from `partition_from` rows on.
fn search(
    vectors: &[f32],
    dim: usize,
    k: usize,
    candidates: usize,
    isa: Isa,
    partition_from: usize,
) -> (Vec<Vec<Neighbour>>, Option<ProbePlan>) {
    let rows = vectors.len() / dim;
    if rows == 0 || k == 0 {
        return (vec![Vec::new(); rows], None);
    }
    let candidates = candidates.max(k).min(rows - 1).max(1);
    let dot = dot_f32();
    let dot4 = dot4_f32();
    let (lists, plan) = if rows >= partition_from {
        let (found, plan) = super::partition::plan_probes(vectors, dim, k, dot, dot4);
        (found, Some(plan))
    } else {
        (None, None)
    };
    let lists = lists.unwrap_or_else(|| Partition {
        lists: vec![(0..rows as u32).collect()],
        pairs: vec![(0, 0)],
    });
    let found = approximate_candidates(vectors, dim, candidates, isa, &lists)
        .into_par_iter()
        .enumerate()
        .map(|(row, found)| {
            let query = &vectors[row * dim..(row + 1) * dim];
            let of = |index: u32| &vectors[index as usize * dim..(index as usize + 1) * dim];
            // Four candidates at a time: four rows (scattered in memory) in flight at once.
            let mut exact: Vec<Neighbour> = Vec::with_capacity(found.len());
            let mut quads = found.chunks_exact(4);
            for quad in quads.by_ref() {
                let scores = dot4(std::array::from_fn(|j| of(quad[j].1)), query);
                for (&(_, index), score) in quad.iter().zip(scores) {
                    exact.push(Neighbour { index, score });
                }
            }
            for &(_, index) in quads.remainder() {
                exact.push(Neighbour {
                    index,
                    score: dot(query, of(index)),
                });
            }
            sort_best_first(&mut exact);
            exact.truncate(k);
            exact
        })
        .collect();
    (found, plan)
}

/// Below this many rows scoring every pair takes about a second or less on AVX2 (0.9 s for
/// 20k rows of 384), and a partition's planning would be a large share of it.
pub const PARTITION_MIN_ROWS: usize = 32_768;

/// The int8 pass alone: each row's best `candidates` other rows among the pairs of `lists`
/// (every pair: one list paired with itself), with their approximate scores, best first.
fn approximate_candidates(
    vectors: &[f32],
    dim: usize,
    candidates: usize,
    isa: Isa,
    lists: &Partition,
) -> Vec<Vec<(f32, u32)>> {
    let rows = vectors.len() / dim;
    // Positions: each list's rows in order, padded to ALIGN; each list cut into chunks of at
    // most BLOCK positions (a chunk pair's bytes stay in L2).
    let mut ids = Vec::with_capacity(rows + lists.lists.len() * ALIGN);
    let mut chunks: Vec<Vec<(usize, usize)>> = Vec::with_capacity(lists.lists.len());
    for list in &lists.lists {
        let start = ids.len();
        ids.extend_from_slice(list);
        ids.resize(start + list.len().div_ceil(ALIGN) * ALIGN, u32::MAX);
        chunks.push(
            (start..ids.len())
                .step_by(BLOCK)
                .map(|c| (c, (c + BLOCK).min(ids.len())))
                .collect(),
        );
    }
    let mut position = vec![0u32; rows];
    for (at, &id) in ids.iter().enumerate() {
        if id != u32::MAX {
            position[id as usize] = at as u32;
        }
    }
    let q = Quantised::new(vectors, dim, isa, ids);
    // Jobs in phases: first each chunk with itself, then each list's chunks with each
    // other, then the paired lists, nearest pairs first (`Partition::pairs` order). Between
    // phases every thread's list of a row takes the best threshold any thread has reached (a
    // score below it cannot be among the row's best `candidates`: some list already holds
    // that many above it), so the far pairs of later phases insert little.
    type Job = ((usize, usize), (usize, usize), bool);
    let mut phases: [Vec<Job>; 3] = Default::default();
    for &(a, b) in &lists.pairs {
        let (a, b) = (a as usize, b as usize);
        for (i, &left) in chunks[a].iter().enumerate() {
            for (j, &right) in chunks[b].iter().enumerate() {
                match (a == b, i.cmp(&j)) {
                    (true, std::cmp::Ordering::Greater) => {}
                    (true, std::cmp::Ordering::Equal) => phases[0].push((left, right, false)),
                    (true, std::cmp::Ordering::Less) => phases[1].push((left, right, true)),
                    (false, _) => phases[2].push((left, right, true)),
                }
            }
        }
    }
    let tables: Vec<Mutex<Table>> = (0..rayon::current_num_threads().max(1))
        .map(|_| Mutex::new(Table::new(&q.ids, candidates)))
        .collect();
    for (phase, jobs) in phases.iter().enumerate() {
        if phase > 0 {
            share_thresholds(&tables);
        }
        jobs.par_iter().for_each(|&(left, right, both)| {
            let slot = rayon::current_thread_index().unwrap_or(0) % tables.len();
            let mut table = tables[slot].lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: the instruction set was checked above; `block_pair` stays inside the
            // padded buffers of `q` and the table.
            #[cfg(target_arch = "x86_64")]
            unsafe {
                match isa {
                    Isa::Avx512Vnni => vnni::block_pair(&q, &mut table, left, right, both),
                    Isa::Avx2 => avx2::block_pair(&q, &mut table, left, right, both),
                }
            };
        });
    }
    let tables: Vec<Table> = tables
        .into_iter()
        .map(|t| t.into_inner().unwrap_or_else(|e| e.into_inner()))
        .collect();
    (0..rows)
        .into_par_iter()
        .map(|row| {
            let at = position[row] as usize;
            let mut found: Vec<(f32, u32)> = tables
                .iter()
                .flat_map(|t| &t.slots[at * candidates..(at + 1) * candidates])
                .filter(|s| s.1 != u32::MAX)
                .map(|&(score, at)| (score, q.ids[at as usize]))
                .collect();
            found.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            found.truncate(candidates);
            found
        })
        .collect()
}

/// Raises every table's threshold of each row to the highest any table has for it.
fn share_thresholds(tables: &[Mutex<Table>]) {
    let mut tables: Vec<_> = tables
        .iter()
        .map(|t| t.lock().unwrap_or_else(|e| e.into_inner()))
        .collect();
    let positions = tables.first().map_or(0, |t| t.threshold.len());
    for at in 0..positions {
        let best = tables
            .iter()
            .map(|t| t.threshold[at])
            .fold(f32::NEG_INFINITY, f32::max);
        tables.iter_mut().for_each(|t| t.threshold[at] = best);
    }
}

/// The f32 dot product for this CPU: AVX2 with FMA where it runs (checked once), else the
/// portable loop. Both give the same scores within float rounding.
pub fn dot_f32() -> fn(&[f32], &[f32]) -> f32 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            return dot_avx2_fma;
        }
    }
    dot
}

/// Four dot products against one row (`dot4_f32()`): the row is read once for all four.
pub type Dot4 = fn([&[f32]; 4], &[f32]) -> [f32; 4];

/// The four-query dot product for this CPU (AVX2 with FMA, else the portable loop).
pub fn dot4_f32() -> Dot4 {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            return dot4_avx2_fma;
        }
    }
    |queries, row| queries.map(|q| dot(q, row))
}

#[cfg(target_arch = "x86_64")]
fn dot4_avx2_fma(queries: [&[f32]; 4], row: &[f32]) -> [f32; 4] {
    // SAFETY: only handed out by `dot4_f32` after the CPU was checked for AVX2 and FMA.
    unsafe { fma::dot4(queries, row) }
}

#[cfg(target_arch = "x86_64")]
fn dot_avx2_fma(a: &[f32], b: &[f32]) -> f32 {
    // SAFETY: only handed out by `dot_f32` after the CPU was checked for AVX2 and FMA.
    unsafe { fma::dot(a, b) }
}

#[cfg(target_arch = "x86_64")]
mod fma {
    use std::arch::x86_64::*;

    /// Four independent 8-lane accumulators (FMA latency x throughput), then the tail.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot(a: &[f32], b: &[f32]) -> f32 {
        let n = a.len().min(b.len());
        let (pa, pb) = (a.as_ptr(), b.as_ptr());
        unsafe {
            let mut acc = [_mm256_setzero_ps(); 4];
            let mut i = 0;
            while i + 32 <= n {
                for (lane, acc) in acc.iter_mut().enumerate() {
                    let at = i + lane * 8;
                    *acc = _mm256_fmadd_ps(
                        _mm256_loadu_ps(pa.add(at)),
                        _mm256_loadu_ps(pb.add(at)),
                        *acc,
                    );
                }
                i += 32;
            }
            while i + 8 <= n {
                acc[0] = _mm256_fmadd_ps(
                    _mm256_loadu_ps(pa.add(i)),
                    _mm256_loadu_ps(pb.add(i)),
                    acc[0],
                );
                i += 8;
            }
            let sum = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
            let mut total = horizontal_sum(sum);
            while i < n {
                total += a[i] * b[i];
                i += 1;
            }
            total
        }
    }

    /// Four queries against one row: two accumulators per query, the row loaded once.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn dot4(queries: [&[f32]; 4], row: &[f32]) -> [f32; 4] {
        let n = queries.iter().map(|q| q.len()).fold(row.len(), usize::min);
        let pr = row.as_ptr();
        let pq = queries.map(|q| q.as_ptr());
        unsafe {
            let mut acc = [[_mm256_setzero_ps(); 2]; 4];
            let mut i = 0;
            while i + 16 <= n {
                for half in 0..2 {
                    let r = _mm256_loadu_ps(pr.add(i + half * 8));
                    for (q, acc) in acc.iter_mut().enumerate() {
                        acc[half] =
                            _mm256_fmadd_ps(_mm256_loadu_ps(pq[q].add(i + half * 8)), r, acc[half]);
                    }
                }
                i += 16;
            }
            let mut out = [0.0f32; 4];
            for (q, out) in out.iter_mut().enumerate() {
                *out = horizontal_sum(_mm256_add_ps(acc[q][0], acc[q][1]));
                for j in i..n {
                    *out += queries[q][j] * row[j];
                }
            }
            out
        }
    }

    #[target_feature(enable = "avx2,fma")]
    #[inline]
    unsafe fn horizontal_sum(v: __m256) -> f32 {
        let half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let quarter = _mm_add_ps(half, _mm_movehl_ps(half, half));
        _mm_cvtss_f32(_mm_add_ss(quarter, _mm_shuffle_ps::<1>(quarter, quarter)))
    }
}

/// `block_pair` of one instruction set (its module's `micro_kernel` and `offer`, its rows and
/// tile): scores every position of one range against every position of the other and offers
/// each score to the row's list, and, when `both` (off the diagonal), to the column's list
/// too. Ranges start on `ALIGN`; padding only at a list's end.
#[cfg(target_arch = "x86_64")]
macro_rules! block_pair {
    ($features:literal, $rows:ident, $tile:ident) => {
        #[target_feature(enable = $features)]
        pub(super) unsafe fn block_pair(
            q: &Quantised,
            table: &mut Table,
            (r_start, r_end): (usize, usize),
            (c_start, c_end): (usize, usize),
            both: bool,
        ) {
            let words = q.words;
            let mut scores = [[0.0f32; $tile]; $rows];
            // The query rows of one micro-kernel, word-major: the words at one position are
            // adjacent, so the kernel broadcasts them from fixed offsets of one pointer.
            let mut packed = vec![0i32; words * $rows];
            for r0 in (r_start..r_end).step_by($rows) {
                // Padding ends a list: the rest of the range is padding too.
                if q.ids[r0] == u32::MAX {
                    break;
                }
                for r in 0..$rows {
                    let row = &q.signed[(r0 + r) * words..(r0 + r + 1) * words];
                    for (w, &value) in row.iter().enumerate() {
                        packed[w * $rows + r] = value;
                    }
                }
                for c0 in (c_start..c_end).step_by($tile) {
                    if q.ids[c0] == u32::MAX {
                        break;
                    }
                    // SAFETY: r0 + rows <= r_end and c0 + tile <= c_end <= positions: ranges
                    // start and end on ALIGN, a multiple of the rows and the tile.
                    unsafe {
                        micro_kernel(q, &packed, words, r0, c0, &mut scores);
                        offer(q, table, r0, c0, &scores, both);
                    }
                }
            }
        }
    };
}

/// The scalar half of an offer to a row's list: each set bit of `mask` is a column of `tile`
/// (counted from `c0`) whose score beat the row's threshold when the SIMD compare ran; checked
/// again (an insert raises the threshold) and inserted.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn offer_to_row(
    q: &Quantised,
    table: &mut Table,
    row: usize,
    c0: usize,
    tile: &[f32],
    mut mask: u64,
) {
    while mask != 0 {
        let c = mask.trailing_zeros() as usize;
        mask &= mask - 1;
        let col = c0 + c;
        if q.ids[col] != u32::MAX && col != row && tile[c] > table.threshold[row] {
            table.insert(row, tile[c], col as u32);
        }
    }
}

/// The scalar half of an offer to the columns' lists: each set bit of `mask` is a column
/// (counted from `base`) whose list's threshold `scores` beat when the SIMD compare ran.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn offer_to_columns(table: &mut Table, row: usize, base: usize, scores: &[f32], mut mask: u64) {
    while mask != 0 {
        let c = mask.trailing_zeros() as usize;
        mask &= mask - 1;
        let col = base + c;
        if scores[c] > table.threshold[col] {
            table.insert(col, scores[c], row as u32);
        }
    }
}

/// Whether the AVX2 kernel can run (also on a CPU whose best choice is VNNI: tests and the
/// benchmark compare both there).
pub fn avx2_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{PANEL2, PANELS2, Quantised, ROWS2, TILE2, Table, offer_to_columns, offer_to_row};

    block_pair!("avx2", ROWS2, TILE2);

    /// 4 query rows x 16 corpus rows: approximate cosine scores into `scores`. Two words per
    /// step: their `vpmaddubsw` pair sums add in i16 without saturating (bytes within +-63 on
    /// the signed side, 1..127 on the unsigned side), then widen to i32 once.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn micro_kernel(
        q: &Quantised,
        packed: &[i32],
        words: usize,
        r0: usize,
        c0: usize,
        scores: &mut [[f32; TILE2]; ROWS2],
    ) {
        unsafe {
            let ones = _mm256_set1_epi16(1);
            let mut acc = [[_mm256_setzero_si256(); PANELS2]; ROWS2];
            let stride = words * PANEL2 * 4;
            let mut panel = q.panels.as_ptr().add((c0 / PANEL2) * stride);
            let mut query = packed.as_ptr();
            for _ in 0..words / 2 {
                let a0 = [
                    _mm256_loadu_si256(panel as *const __m256i),
                    _mm256_loadu_si256(panel.add(stride) as *const __m256i),
                ];
                let a1 = [
                    _mm256_loadu_si256(panel.add(32) as *const __m256i),
                    _mm256_loadu_si256(panel.add(stride + 32) as *const __m256i),
                ];
                for (r, acc) in acc.iter_mut().enumerate() {
                    let b0 = _mm256_set1_epi32(*query.add(r));
                    let b1 = _mm256_set1_epi32(*query.add(ROWS2 + r));
                    for h in 0..PANELS2 {
                        let pairs = _mm256_add_epi16(
                            _mm256_maddubs_epi16(a0[h], b0),
                            _mm256_maddubs_epi16(a1[h], b1),
                        );
                        acc[h] = _mm256_add_epi32(acc[h], _mm256_madd_epi16(pairs, ones));
                    }
                }
                query = query.add(2 * ROWS2);
                panel = panel.add(64);
            }
            let mut col_scale = [_mm256_setzero_ps(); PANELS2];
            for (h, scale) in col_scale.iter_mut().enumerate() {
                *scale = _mm256_loadu_ps(q.scale.as_ptr().add(c0 + h * PANEL2));
            }
            for (r, acc) in acc.iter().enumerate() {
                let bias = _mm256_set1_epi32(q.bias[r0 + r]);
                let row_scale = _mm256_set1_ps(q.scale[r0 + r]);
                for h in 0..PANELS2 {
                    let exact = _mm256_cvtepi32_ps(_mm256_sub_epi32(acc[h], bias));
                    let scaled = _mm256_mul_ps(_mm256_mul_ps(exact, row_scale), col_scale[h]);
                    _mm256_storeu_ps(scores[r].as_mut_ptr().add(h * PANEL2), scaled);
                }
            }
        }
    }

    /// Offers a tile of scores to the rows' lists and, when `both`, to the columns' lists.
    #[target_feature(enable = "avx2")]
    #[inline]
    unsafe fn offer(
        q: &Quantised,
        table: &mut Table,
        r0: usize,
        c0: usize,
        scores: &[[f32; TILE2]; ROWS2],
        both: bool,
    ) {
        unsafe {
            for (r, tile) in scores.iter().enumerate() {
                let row = r0 + r;
                let threshold = _mm256_set1_ps(table.threshold[row]);
                let mut mask = 0u64;
                for h in 0..PANELS2 {
                    let values = _mm256_loadu_ps(tile.as_ptr().add(h * PANEL2));
                    let m =
                        _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_GT_OQ>(values, threshold)) as u64;
                    mask |= m << (h * PANEL2);
                }
                offer_to_row(q, table, row, c0, tile, mask);
            }
            if !both {
                return;
            }
            for h in 0..PANELS2 {
                let base = c0 + h * PANEL2;
                for (r, tile) in scores.iter().enumerate() {
                    let row = r0 + r;
                    if q.ids[row] == u32::MAX {
                        break;
                    }
                    let threshold = _mm256_loadu_ps(table.threshold.as_ptr().add(base));
                    let values = _mm256_loadu_ps(tile.as_ptr().add(h * PANEL2));
                    let mask =
                        _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_GT_OQ>(values, threshold)) as u64;
                    offer_to_columns(table, row, base, &tile[h * PANEL2..], mask);
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use std::arch::x86_64::*;

    use super::{PANEL, PANELS, Quantised, ROWS, TILE, Table, offer_to_columns, offer_to_row};

    block_pair!("avx512f,avx512bw,avx512vnni", ROWS, TILE);

    /// 8 query rows x 48 corpus rows: approximate cosine scores into `scores`.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    #[inline]
    unsafe fn micro_kernel(
        q: &Quantised,
        packed: &[i32],
        words: usize,
        r0: usize,
        c0: usize,
        scores: &mut [[f32; TILE]; ROWS],
    ) {
        unsafe {
            let mut acc = [[_mm512_setzero_si512(); PANELS]; ROWS];
            let stride = words * PANEL * 4;
            let p0 = q.panels.as_ptr().add((c0 / PANEL) * stride);
            let mut query = packed.as_ptr();
            let mut panel = p0;
            for _ in 0..words {
                let a = [
                    _mm512_loadu_si512(panel as *const __m512i),
                    _mm512_loadu_si512(panel.add(stride) as *const __m512i),
                    _mm512_loadu_si512(panel.add(2 * stride) as *const __m512i),
                ];
                for (r, acc) in acc.iter_mut().enumerate() {
                    let b = _mm512_set1_epi32(*query.add(r));
                    for h in 0..PANELS {
                        acc[h] = _mm512_dpbusd_epi32(acc[h], a[h], b);
                    }
                }
                query = query.add(ROWS);
                panel = panel.add(64);
            }
            let mut col_scale = [_mm512_setzero_ps(); PANELS];
            for (h, scale) in col_scale.iter_mut().enumerate() {
                *scale = _mm512_loadu_ps(q.scale.as_ptr().add(c0 + h * PANEL));
            }
            for (r, acc) in acc.iter().enumerate() {
                let bias = _mm512_set1_epi32(q.bias[r0 + r]);
                let row_scale = _mm512_set1_ps(q.scale[r0 + r]);
                for h in 0..PANELS {
                    let exact = _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[h], bias));
                    let scaled = _mm512_mul_ps(_mm512_mul_ps(exact, row_scale), col_scale[h]);
                    _mm512_storeu_ps(scores[r].as_mut_ptr().add(h * PANEL), scaled);
                }
            }
        }
    }

    /// Offers a tile of scores to the rows' lists and, when `both`, to the columns' lists.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    #[inline]
    unsafe fn offer(
        q: &Quantised,
        table: &mut Table,
        r0: usize,
        c0: usize,
        scores: &[[f32; TILE]; ROWS],
        both: bool,
    ) {
        unsafe {
            for (r, tile) in scores.iter().enumerate() {
                let row = r0 + r;
                let threshold = _mm512_set1_ps(table.threshold[row]);
                let mut mask = 0u64;
                for h in 0..PANELS {
                    let values = _mm512_loadu_ps(tile.as_ptr().add(h * PANEL));
                    let m = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(values, threshold) as u64;
                    mask |= m << (h * PANEL);
                }
                offer_to_row(q, table, row, c0, tile, mask);
            }
            if !both {
                return;
            }
            for h in 0..PANELS {
                let base = c0 + h * PANEL;
                for (r, tile) in scores.iter().enumerate() {
                    let row = r0 + r;
                    if q.ids[row] == u32::MAX {
                        break;
                    }
                    let threshold = _mm512_loadu_ps(table.threshold.as_ptr().add(base));
                    let values = _mm512_loadu_ps(tile.as_ptr().add(h * PANEL));
                    let mask = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(values, threshold) as u64;
                    offer_to_columns(table, row, base, &tile[h * PANEL..], mask);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::similarity::{SelfMatch, normalise, top_k_naive};

    fn candidates_for(isa: Isa, k: usize) -> usize {
        super::candidates_for(isa, k)
    }
    use crate::synth::Rng;

    /// Clustered unit vectors: groups of near-duplicates around random centres, like the
    /// paraphrase groups of real memories, plus unrelated rows.
    fn clustered(rows: usize, dim: usize, seed: u64) -> Vec<f32> {
        let mut rng = Rng::new(seed);
        let mut centre = vec![0.0f32; dim];
        let mut data = Vec::with_capacity(rows * dim);
        for row in 0..rows {
            if row % 5 == 0 {
                centre
                    .iter_mut()
                    .for_each(|c| *c = (rng.unit() * 2.0 - 1.0) as f32);
            }
            let mut v: Vec<f32> = centre
                .iter()
                .map(|c| c + 0.4 * (rng.unit() * 2.0 - 1.0) as f32)
                .collect();
            normalise(&mut v);
            data.extend_from_slice(&v);
        }
        data
    }

    /// Every instruction set this CPU runs: AVX2 also where VNNI is the first choice.
    fn isas() -> Vec<Isa> {
        let mut out: Vec<Isa> = isa().into_iter().collect();
        if avx2_available() && !out.contains(&Isa::Avx2) {
            out.push(Isa::Avx2);
        }
        if out.is_empty() {
            eprintln!("skipped: no int8 kernel on this CPU");
        }
        out
    }

    #[test]
    fn int8_pass_with_exact_rerank_finds_the_exact_neighbours() {
        for isa in isas() {
            finds_the_exact_neighbours(isa);
        }
    }

    fn finds_the_exact_neighbours(isa: Isa) {
        // Sizes that are not multiples of the block, panel or word widths.
        for (rows, dim, k) in [(3, 4, 5), (37, 5, 3), (600, 384, 10), (1100, 70, 4)] {
            let data = clustered(rows, dim, rows as u64);
            let (fast, _) = all_pairs_top_k_int8(&data, dim, k, candidates_for(isa, k), isa, false);
            let exact = top_k_naive(&data, &data, dim, k, SelfMatch::SameRows);
            assert_eq!(fast.len(), rows);
            let mut hits = 0usize;
            let mut total = 0usize;
            for (row, (f, e)) in fast.iter().zip(&exact).enumerate() {
                assert_eq!(f.len(), e.len(), "row {row}");
                assert!(f.iter().all(|n| n.index as usize != row));
                assert!(f.windows(2).all(|w| w[0].score >= w[1].score));
                for n in f {
                    let i = n.index as usize;
                    let truth = dot(
                        &data[row * dim..(row + 1) * dim],
                        &data[i * dim..(i + 1) * dim],
                    );
                    assert!((n.score - truth).abs() < 1e-5, "scores are exact");
                }
                hits += f
                    .iter()
                    .filter(|n| e.iter().any(|x| x.index == n.index))
                    .count();
                total += e.len();
            }
            let recall = hits as f64 / total as f64;
            assert!(
                recall >= 0.995,
                "{isa:?}: recall@{k} {recall} for {rows} x {dim}"
            );
        }
    }

    fn recall(exact: &[Vec<Neighbour>], found: &[Vec<Neighbour>]) -> f64 {
        let hits: usize = found
            .iter()
            .zip(exact)
            .map(|(f, e)| {
                f.iter()
                    .filter(|n| e.iter().any(|x| x.index == n.index))
                    .count()
            })
            .sum();
        hits as f64 / exact.iter().map(Vec::len).sum::<usize>() as f64
    }

    #[test]
    fn a_partition_keeps_the_neighbours_and_unstructured_rows_score_every_pair() {
        let (rows, dim, k) = (6000, 48, 10);
        // The naive loop's answer, once for both instruction sets (it is most of the time).
        let data = crate::similarity::partition::tests::topical(rows, dim, 21);
        let exact = top_k_naive(&data, &data, dim, k, SelfMatch::SameRows);
        let random = crate::similarity::tests::random_unit_rows(rows, dim, 4);
        for isa in isas() {
            // Text-like layers (topics, subjects, paraphrases): a partition is chosen, and
            // finds what scoring every pair finds; every score exact.
            let (every, none) = search(&data, dim, k, candidates_for(isa, k), isa, usize::MAX);
            assert!(none.is_none());
            let (fast, plan) = search(&data, dim, k, candidates_for(isa, k), isa, 0);
            let plan = plan.expect("a partition was tried");
            assert!(plan.probes.is_some(), "{isa:?}: {plan:?}");
            assert!(plan.work_fraction < 0.5, "{isa:?}: {plan:?}");
            assert!(recall(&exact, &fast) >= 0.99, "{isa:?}");
            assert!(recall(&exact, &every) >= 0.99, "{isa:?}");
            for (row, list) in fast.iter().enumerate() {
                assert_eq!(list.len(), k);
                for n in list {
                    assert_ne!(n.index as usize, row);
                    let i = n.index as usize;
                    let truth = dot(
                        &data[row * dim..(row + 1) * dim],
                        &data[i * dim..(i + 1) * dim],
                    );
                    assert!((n.score - truth).abs() < 1e-5);
                }
            }
            // Uniform random rows: no partition holds their neighbours, so every pair is
            // scored and the answer is the exhaustive pass's.
            let (fast, plan) = search(&random, dim, k, candidates_for(isa, k), isa, 0);
            assert_eq!(plan.expect("tried").probes, None, "{isa:?}");
            let (every, _) = search(&random, dim, k, candidates_for(isa, k), isa, usize::MAX);
            let ids = |v: &[Vec<Neighbour>]| -> Vec<Vec<u32>> {
                v.iter()
                    .map(|l| l.iter().map(|n| n.index).collect())
                    .collect()
            };
            assert_eq!(ids(&fast), ids(&every), "{isa:?}");
        }
    }

    #[test]
    fn every_pair_is_seen_from_both_ends() {
        for isa in isas() {
            // Two identical rows in different blocks must find each other with score 1.
            let dim = 32;
            let mut data = clustered(700, dim, 11);
            let copy = data[10 * dim..11 * dim].to_vec();
            data[650 * dim..651 * dim].copy_from_slice(&copy);
            let (found, _) = all_pairs_top_k_int8(&data, dim, 1, 8, isa, false);
            assert_eq!(found[10][0].index, 650, "{isa:?}");
            assert_eq!(found[650][0].index, 10, "{isa:?}");
            assert!((found[10][0].score - 1.0).abs() < 1e-5);
        }
    }

    #[test]
    fn approximate_scores_stay_close_even_at_the_byte_extremes() {
        // vpmaddubsw saturates its i16 pair sums: bytes at their extremes with one sign make
        // the largest sums. Every approximate score of the int8 pass must stay near the
        // exact one (a saturated sum would be off by far more), for each instruction set.
        let dim = 96;
        let mut data = vec![1.0f32; 4 * dim];
        data[dim..2 * dim].iter_mut().for_each(|v| *v = -1.0);
        data[2 * dim..2 * dim + dim / 2]
            .iter_mut()
            .for_each(|v| *v = 0.0);
        data.extend(clustered(60, dim, 5));
        for row in data.chunks_mut(dim) {
            normalise(row);
        }
        let rows = data.len() / dim;
        for isa in isas() {
            let every = Partition {
                lists: vec![(0..rows as u32).collect()],
                pairs: vec![(0, 0)],
            };
            let approximate = approximate_candidates(&data, dim, rows - 1, isa, &every);
            for (row, list) in approximate.iter().enumerate() {
                assert_eq!(list.len(), rows - 1);
                for &(score, index) in list {
                    let i = index as usize;
                    let exact = dot(
                        &data[row * dim..(row + 1) * dim],
                        &data[i * dim..(i + 1) * dim],
                    );
                    assert!(
                        (score - exact).abs() < 0.03,
                        "{isa:?}: row {row} x {i}: {score} vs exact {exact}"
                    );
                }
            }
        }
    }
}
