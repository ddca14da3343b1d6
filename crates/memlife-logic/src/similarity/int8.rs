//! All-pairs top-k with an int8 first pass and an exact f32 re-rank.
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
//! Elsewhere callers fall back to the exact f32 kernel of the parent module.

use std::sync::Mutex;

use rayon::prelude::*;

use super::{Neighbour, dot, sort_best_first};

/// Rows per block: a block pair reads 2 x 384 x 384 bytes, well inside L2. A multiple of
/// every kernel's row count and tile width.
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

/// Vectors quantised to i8, in the two layouts the kernel reads.
struct Quantised {
    /// Real rows; storage is padded to a multiple of `BLOCK`.
    rows: usize,
    padded: usize,
    /// Four dimensions per 32-bit word; the width is padded with zeros to an even number of
    /// words (the AVX2 kernel takes words in pairs).
    words: usize,
    /// Row-major signed bytes, one row = `words` little-endian words (broadcast per word).
    signed: Vec<i32>,
    /// Panels of `panel` rows: for each word, the rows' 4 bytes side by side, as unsigned
    /// bytes (value + levels + 1), so the kernel multiplies unsigned panel bytes by signed
    /// query bytes.
    panels: Vec<u8>,
    /// Per row: the scale from bytes back to the unit vector (0 for padding rows).
    scale: Vec<f32>,
    /// Per row: the offset x the sum of its signed bytes, the bias the offset adds to its
    /// scores as a query.
    bias: Vec<i32>,
}

impl Quantised {
    fn new(vectors: &[f32], dim: usize, isa: Isa) -> Self {
        let (panel_rows, levels) = (isa.panel(), isa.levels());
        let offset = levels + 1;
        let rows = vectors.len() / dim;
        let padded = rows.div_ceil(BLOCK) * BLOCK;
        let words = dim.div_ceil(8) * 2;
        let mut bytes = vec![0i8; padded * words * 4];
        let mut scale = vec![0.0f32; padded];
        let mut bias = vec![0i32; padded];
        bytes
            .par_chunks_mut(words * 4)
            .zip(scale.par_iter_mut())
            .zip(bias.par_iter_mut())
            .take(rows)
            .enumerate()
            .for_each(|(row, ((out, scale), bias))| {
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
            rows,
            padded,
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
    /// Per row: the lowest kept score once the row is full (-inf before; +inf for padding
    /// rows so nothing is ever kept for them).
    threshold: Vec<f32>,
    /// Per row: `candidates` slots, a min-heap on the score (empty slots score -inf).
    slots: Vec<(f32, u32)>,
}

impl Table {
    fn new(rows: usize, padded: usize, candidates: usize) -> Self {
        let mut threshold = vec![f32::NEG_INFINITY; padded];
        threshold[rows..].fill(f32::INFINITY);
        Table {
            candidates,
            threshold,
            slots: vec![(f32::NEG_INFINITY, u32::MAX); padded * candidates],
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
        self.threshold[row] = heap[0].0;
    }
}

/// The `k` nearest other rows of every row of `vectors` (L2-normalised, `dim` wide), best
/// first, with exact scores. `candidates` (at least `k`) rows per row are kept from the int8
/// pass and re-ranked exactly. Panics if the CPU lacks the instruction set: check `isa()`.
pub fn all_pairs_top_k(
    vectors: &[f32],
    dim: usize,
    k: usize,
    candidates: usize,
    isa: Isa,
) -> Vec<Vec<Neighbour>> {
    assert!(
        self::isa() == Some(isa) || (isa == Isa::Avx2 && avx2_available()),
        "the int8 kernel needs {isa:?}"
    );
    assert!(
        dim > 0 && vectors.len().is_multiple_of(dim),
        "vectors are not rows of {dim}"
    );
    let rows = vectors.len() / dim;
    if rows == 0 || k == 0 {
        return vec![Vec::new(); rows];
    }
    let candidates = candidates.max(k).min(rows - 1).max(1);
    approximate_candidates(vectors, dim, candidates, isa)
        .into_par_iter()
        .enumerate()
        .map(|(row, found)| {
            let query = &vectors[row * dim..(row + 1) * dim];
            let mut exact: Vec<Neighbour> = found
                .into_iter()
                .map(|(_, index)| Neighbour {
                    index,
                    score: dot(
                        query,
                        &vectors[index as usize * dim..(index as usize + 1) * dim],
                    ),
                })
                .collect();
            sort_best_first(&mut exact);
            exact.truncate(k);
            exact
        })
        .collect()
}

/// The int8 pass alone: each row's best `candidates` other rows with their approximate
/// scores, best first.
fn approximate_candidates(
    vectors: &[f32],
    dim: usize,
    candidates: usize,
    isa: Isa,
) -> Vec<Vec<(f32, u32)>> {
    let rows = vectors.len() / dim;
    let q = Quantised::new(vectors, dim, isa);
    let blocks = q.padded / BLOCK;
    let pairs: Vec<(usize, usize)> = (0..blocks)
        .flat_map(|i| (i..blocks).map(move |j| (i, j)))
        .collect();
    let tables: Vec<Mutex<Option<Table>>> = (0..rayon::current_num_threads().max(1))
        .map(|_| Mutex::new(None))
        .collect();
    pairs.par_iter().for_each(|&(i, j)| {
        let slot = rayon::current_thread_index().unwrap_or(0) % tables.len();
        let mut guard = tables[slot].lock().unwrap_or_else(|e| e.into_inner());
        let table = guard.get_or_insert_with(|| Table::new(q.rows, q.padded, candidates));
        // SAFETY: the instruction set was checked above; `block_pair` stays inside the
        // padded buffers of `q` and the table.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            match isa {
                Isa::Avx512Vnni => vnni::block_pair(&q, table, i, j),
                Isa::Avx2 => avx2::block_pair(&q, table, i, j),
            }
        };
    });
    let tables: Vec<Table> = tables
        .into_iter()
        .filter_map(|t| t.into_inner().unwrap_or_else(|e| e.into_inner()))
        .collect();
    (0..rows)
        .into_par_iter()
        .map(|row| {
            let mut found: Vec<(f32, u32)> = tables
                .iter()
                .flat_map(|t| &t.slots[row * candidates..(row + 1) * candidates])
                .filter(|s| s.1 != u32::MAX)
                .copied()
                .collect();
            found.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
            found.truncate(candidates);
            found
        })
        .collect()
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

    use super::{BLOCK, PANEL2, PANELS2, Quantised, ROWS2, TILE2, Table};

    /// Scores every row of block `bi` against every row of block `bj` (bi <= bj) and offers
    /// each score to the row's list, and, off the diagonal, to the column's list too.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn block_pair(q: &Quantised, table: &mut Table, bi: usize, bj: usize) {
        let words = q.words;
        let mut scores = [[0.0f32; TILE2]; ROWS2];
        let mut packed = vec![0i32; words * ROWS2];
        for r0 in (bi * BLOCK..(bi + 1) * BLOCK).step_by(ROWS2) {
            if r0 >= q.rows {
                break;
            }
            for r in 0..ROWS2 {
                let row = &q.signed[(r0 + r) * words..(r0 + r + 1) * words];
                for (w, &value) in row.iter().enumerate() {
                    packed[w * ROWS2 + r] = value;
                }
            }
            for c0 in (bj * BLOCK..(bj + 1) * BLOCK).step_by(TILE2) {
                if c0 >= q.rows {
                    break;
                }
                // SAFETY: r0 + ROWS2 <= padded and c0 + TILE2 <= padded (multiples of BLOCK).
                unsafe {
                    micro_kernel(q, &packed, words, r0, c0, &mut scores);
                    offer(q, table, r0, c0, &scores, bi != bj);
                }
            }
        }
    }

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
                let mut mask = 0u32;
                for h in 0..PANELS2 {
                    let values = _mm256_loadu_ps(tile.as_ptr().add(h * PANEL2));
                    let m =
                        _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_GT_OQ>(values, threshold)) as u32;
                    mask |= m << (h * PANEL2);
                }
                while mask != 0 {
                    let c = mask.trailing_zeros() as usize;
                    mask &= mask - 1;
                    let col = c0 + c;
                    if col < q.rows && col != row && tile[c] > table.threshold[row] {
                        table.insert(row, tile[c], col as u32);
                    }
                }
            }
            if !both {
                return;
            }
            for h in 0..PANELS2 {
                let base = c0 + h * PANEL2;
                for (r, tile) in scores.iter().enumerate() {
                    let row = r0 + r;
                    if row >= q.rows {
                        break;
                    }
                    let threshold = _mm256_loadu_ps(table.threshold.as_ptr().add(base));
                    let values = _mm256_loadu_ps(tile.as_ptr().add(h * PANEL2));
                    let mut mask =
                        _mm256_movemask_ps(_mm256_cmp_ps::<_CMP_GT_OQ>(values, threshold)) as u32;
                    while mask != 0 {
                        let c = mask.trailing_zeros() as usize;
                        mask &= mask - 1;
                        let col = base + c;
                        let score = tile[h * PANEL2 + c];
                        if score > table.threshold[col] {
                            table.insert(col, score, row as u32);
                        }
                    }
                }
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod vnni {
    use std::arch::x86_64::*;

    use super::{BLOCK, PANEL, PANELS, Quantised, ROWS, TILE, Table};

    /// Scores every row of block `bi` against every row of block `bj` (bi <= bj) and offers
    /// each score to the row's list, and, off the diagonal, to the column's list too.
    #[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
    pub(super) unsafe fn block_pair(q: &Quantised, table: &mut Table, bi: usize, bj: usize) {
        let words = q.words;
        let mut scores = [[0.0f32; TILE]; ROWS];
        // The query rows of one micro-kernel, word-major: the 8 words at one position are
        // adjacent, so the kernel broadcasts them from fixed offsets of one pointer.
        let mut packed = vec![0i32; words * ROWS];
        for r0 in (bi * BLOCK..(bi + 1) * BLOCK).step_by(ROWS) {
            if r0 >= q.rows {
                break;
            }
            for r in 0..ROWS {
                let row = &q.signed[(r0 + r) * words..(r0 + r + 1) * words];
                for (w, &value) in row.iter().enumerate() {
                    packed[w * ROWS + r] = value;
                }
            }
            for c0 in (bj * BLOCK..(bj + 1) * BLOCK).step_by(TILE) {
                if c0 >= q.rows {
                    break;
                }
                // SAFETY: r0 + ROWS <= padded and c0 + TILE <= padded, because both are
                // multiples of BLOCK, itself a multiple of ROWS and TILE.
                unsafe {
                    micro_kernel(q, &packed, words, r0, c0, &mut scores);
                    offer(q, table, r0, c0, &scores, bi != bj);
                }
            }
        }
    }

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
                while mask != 0 {
                    let c = mask.trailing_zeros() as usize;
                    mask &= mask - 1;
                    let col = c0 + c;
                    if col < q.rows && col != row && tile[c] > table.threshold[row] {
                        table.insert(row, tile[c], col as u32);
                    }
                }
            }
            if !both {
                return;
            }
            for h in 0..PANELS {
                let base = c0 + h * PANEL;
                for (r, tile) in scores.iter().enumerate() {
                    let row = r0 + r;
                    if row >= q.rows {
                        break;
                    }
                    let threshold = _mm512_loadu_ps(table.threshold.as_ptr().add(base));
                    let values = _mm512_loadu_ps(tile.as_ptr().add(h * PANEL));
                    let mut mask = _mm512_cmp_ps_mask::<_CMP_GT_OQ>(values, threshold) as u32;
                    while mask != 0 {
                        let c = mask.trailing_zeros() as usize;
                        mask &= mask - 1;
                        let col = base + c;
                        let score = tile[h * PANEL + c];
                        if score > table.threshold[col] {
                            table.insert(col, score, row as u32);
                        }
                    }
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
            let fast = all_pairs_top_k(&data, dim, k, candidates_for(isa, k), isa);
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

    #[test]
    fn every_pair_is_seen_from_both_ends() {
        for isa in isas() {
            // Two identical rows in different blocks must find each other with score 1.
            let dim = 32;
            let mut data = clustered(700, dim, 11);
            let copy = data[10 * dim..11 * dim].to_vec();
            data[650 * dim..651 * dim].copy_from_slice(&copy);
            let found = all_pairs_top_k(&data, dim, 1, 8, isa);
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
            let approximate = approximate_candidates(&data, dim, rows - 1, isa);
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
