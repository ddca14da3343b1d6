//! All-pairs top-k with an int8 first pass and an exact f32 re-rank.
//!
//! Every vector is quantised to signed bytes with its own scale (its largest component maps
//! to 127). Scores of all pairs are computed once per unordered pair (the score matrix is
//! symmetric, so each block product updates the neighbour lists of both its rows and its
//! columns) with AVX-512 VNNI `vpdpbusd`, 64 byte products per instruction, four times the
//! multiply-adds of f32 FMA. Each row keeps its best `candidates` by approximate score; these
//! are then scored exactly in f32 and the best `k` returned. The approximation only chooses
//! candidates: every returned score is exact, and a neighbour is missed only when quantisation
//! error moves it from the true top `k` below the approximate top `candidates`, which the
//! benchmark measures as recall@k against the exact loop.
//!
//! Used when the CPU has AVX-512 VNNI (checked at run time); elsewhere callers fall back to
//! the exact f32 kernel of the parent module.

use std::sync::Mutex;

use rayon::prelude::*;

use super::{Neighbour, dot, sort_best_first};

/// Rows per block: a block pair reads 2 x 384 x 384 bytes, well inside L2.
const BLOCK: usize = 384;
/// Rows per panel: one zmm register holds 16 i32 lanes, one corpus row per lane.
const PANEL: usize = 16;
/// Panels scored together by the micro-kernel.
const PANELS: usize = 3;
/// Columns of one micro-kernel tile.
const TILE: usize = PANELS * PANEL;
/// Query rows scored together by the micro-kernel (8 rows x 3 panels = 24 accumulators of
/// the 32 zmm registers; each panel load feeds 8 multiply-adds, each broadcast 3).
const ROWS: usize = 8;

/// Whether this CPU runs the int8 kernel.
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
            && std::arch::is_x86_feature_detected!("avx512bw")
            && std::arch::is_x86_feature_detected!("avx512vnni")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// Vectors quantised to i8, in the two layouts the kernel reads.
struct Quantised {
    /// Real rows; storage is padded to a multiple of `BLOCK`.
    rows: usize,
    padded: usize,
    /// Four dimensions per 32-bit word; the width is padded with zeros to a multiple of 4.
    words: usize,
    /// Row-major signed bytes, one row = `words` little-endian words (broadcast per word).
    signed: Vec<i32>,
    /// Panels of 16 rows: for each word, the 16 rows' 4 bytes side by side (64 bytes), as
    /// unsigned bytes (value + 128), so `vpdpbusd` multiplies unsigned panel bytes by signed
    /// query bytes.
    panels: Vec<u8>,
    /// Per row: the scale from bytes back to the unit vector (0 for padding rows).
    scale: Vec<f32>,
    /// Per row: 128 x the sum of its signed bytes, the bias the +128 offset adds to its scores.
    bias: Vec<i32>,
}

impl Quantised {
    fn new(vectors: &[f32], dim: usize) -> Self {
        let rows = vectors.len() / dim;
        let padded = rows.div_ceil(BLOCK) * BLOCK;
        let words = dim.div_ceil(4);
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
                    *scale = largest / 127.0;
                    for (o, v) in out.iter_mut().zip(vector) {
                        *o = (v / *scale).round().clamp(-127.0, 127.0) as i8;
                    }
                }
                *bias = 128 * out.iter().map(|&b| b as i32).sum::<i32>();
            });
        let signed: Vec<i32> = bytes
            .chunks_exact(4)
            .map(|w| i32::from_le_bytes([w[0] as u8, w[1] as u8, w[2] as u8, w[3] as u8]))
            .collect();
        let mut panels = vec![0u8; padded * words * 4];
        panels
            .par_chunks_mut(words * PANEL * 4)
            .enumerate()
            .for_each(|(panel, out)| {
                for lane in 0..PANEL {
                    let row = panel * PANEL + lane;
                    for word in 0..words {
                        for b in 0..4 {
                            let value = bytes[row * words * 4 + word * 4 + b];
                            out[word * PANEL * 4 + lane * 4 + b] = (value as i16 + 128) as u8;
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

/// Each row's best candidates seen by one thread, by approximate score.
struct Table {
    candidates: usize,
    /// Per row: the lowest kept score once the row is full (-inf before; +inf for padding
    /// rows so nothing is ever kept for them).
    threshold: Vec<f32>,
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

    #[inline(never)]
    fn insert(&mut self, row: usize, score: f32, index: u32) {
        let slots = &mut self.slots[row * self.candidates..(row + 1) * self.candidates];
        let mut worst = 0;
        for (i, slot) in slots.iter().enumerate() {
            if slot.0 < slots[worst].0 {
                worst = i;
            }
        }
        slots[worst] = (score, index);
        self.threshold[row] = slots.iter().fold(f32::INFINITY, |m, s| m.min(s.0));
    }
}

/// The `k` nearest other rows of every row of `vectors` (L2-normalised, `dim` wide), best
/// first, with exact scores. `candidates` (at least `k`) rows per row are kept from the int8
/// pass and re-ranked exactly. Panics if the CPU lacks AVX-512 VNNI: check `available()`.
pub fn all_pairs_top_k(
    vectors: &[f32],
    dim: usize,
    k: usize,
    candidates: usize,
) -> Vec<Vec<Neighbour>> {
    assert!(available(), "the int8 kernel needs AVX-512 VNNI");
    assert!(
        dim > 0 && vectors.len().is_multiple_of(dim),
        "vectors are not rows of {dim}"
    );
    let rows = vectors.len() / dim;
    if rows == 0 || k == 0 {
        return vec![Vec::new(); rows];
    }
    let candidates = candidates.max(k).min(rows - 1).max(1);
    let q = Quantised::new(vectors, dim);
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
        // SAFETY: `available()` was checked above; `block_pair` stays inside the padded
        // buffers of `q` and the table.
        #[cfg(target_arch = "x86_64")]
        unsafe {
            vnni::block_pair(&q, table, i, j)
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
    use crate::logic::similarity::{SelfMatch, normalise, top_k_naive};
    use crate::logic::synth::Rng;

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

    #[test]
    fn int8_pass_with_exact_rerank_finds_the_exact_neighbours() {
        if !available() {
            eprintln!("skipped: no AVX-512 VNNI on this CPU");
            return;
        }
        // Sizes that are not multiples of the block, panel or word widths.
        for (rows, dim, k) in [(3, 4, 5), (37, 5, 3), (600, 384, 10), (1100, 70, 4)] {
            let data = clustered(rows, dim, rows as u64);
            let fast = all_pairs_top_k(&data, dim, k, 2 * k + 8);
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
            assert!(recall >= 0.995, "recall@{k} {recall} for {rows} x {dim}");
        }
    }

    #[test]
    fn every_pair_is_seen_from_both_ends() {
        if !available() {
            return;
        }
        // Two identical rows in different blocks must find each other with score 1.
        let dim = 32;
        let mut data = clustered(700, dim, 11);
        let copy = data[10 * dim..11 * dim].to_vec();
        data[650 * dim..651 * dim].copy_from_slice(&copy);
        let found = all_pairs_top_k(&data, dim, 1, 8);
        assert_eq!(found[10][0].index, 650);
        assert_eq!(found[650][0].index, 10);
        assert!((found[10][0].score - 1.0).abs() < 1e-5);
    }
}
