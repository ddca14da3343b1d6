//! Direct decoding of a Parquet vector column (`embedding`: a top-level list of 32-bit floats).
//!
//! Parquet stores such a column as a repeated leaf with a definition and a repetition level per
//! float. The generic Arrow reader expands both into 16-bit arrays, counts records in them and
//! builds the list one element at a time: 384 million levels of each kind for a million
//! 384-dimension vectors, which made it most of a 1M-row import's reading time. This reader
//! walks the pages itself and checks the levels in their encoded form instead, a run at a time:
//! a run of 383 repetition levels of 1 is one comparison, not 383. The values of a page are
//! copied once, straight into the buffer Arrow gets.
//!
//! It only takes the regular shape: every row exactly `dim` non-null floats, values encoded
//! plainly or through a dictionary, levels in the RLE/bit-packed hybrid (data pages v1 or v2).
//! For anything else (a null or empty vector, a wrong length, a null element, another encoding)
//! `read` answers `Ok(None)` and the caller reads those rows, and the rest of the file, with
//! Arrow's generic reader, whose row-by-row path names the offending row. So this is purely an
//! optimisation: the same file gives the same rows and the same errors.

use std::fs::File;
use std::sync::Arc;

use arrow::array::{ArrayRef, FixedSizeListArray, Float32Array};
use arrow::buffer::{Buffer, MutableBuffer, ScalarBuffer};
use arrow::datatypes::{DataType, Field};
use bytes::Bytes;
use parquet::basic::{Encoding, Type as PhysicalType};
use parquet::column::page::{Page, PageReader};
use parquet::errors::{ParquetError, Result};
use parquet::file::reader::FileReader;
use parquet::file::serialized_reader::SerializedFileReader;
use parquet::schema::types::SchemaDescriptor;

/// Where `name` sits among `schema`'s top-level fields (root, leaf), if it is a list of 32-bit
/// floats this reader may decode: one leaf, physical type FLOAT, one repetition level.
pub fn vector_root(schema: &SchemaDescriptor, name: &str) -> Option<(usize, usize)> {
    let root = schema
        .root_schema()
        .get_fields()
        .iter()
        .position(|f| f.name() == name)?;
    let mut leaves = (0..schema.num_columns()).filter(|&i| schema.get_column_root_idx(i) == root);
    let leaf = leaves.next()?;
    if leaves.next().is_some() {
        return None;
    }
    let column = schema.column(leaf);
    (column.physical_type() == PhysicalType::FLOAT
        && column.max_rep_level() == 1
        && column.max_def_level() >= 1)
        .then_some((root, leaf))
}

/// Reads the vectors of one column, row group after row group, in step with a record-batch
/// reader over the file's other columns.
pub struct VectorColumn {
    file: SerializedFileReader<File>,
    leaf: usize,
    dim: usize,
    max_def: i16,
    next_row_group: usize,
    pages: Option<Box<dyn PageReader>>,
    /// The current row group's dictionary, if its pages use one.
    dictionary: Vec<f32>,
    /// Values of the current page not handed out yet (little-endian floats).
    values: Bytes,
    /// Position inside the vector being read, in levels (0: at a vector's start).
    position: usize,
}

/// What loading the next data page found.
enum Loaded {
    /// Whole vectors: its values wait in `values`.
    Vectors,
    /// The column has no more pages.
    End,
    /// Something other than whole vectors: the caller reads these rows another way.
    Irregular,
}

impl VectorColumn {
    /// Opens `file` for the column whose only leaf is `leaf` (see `vector_root`).
    pub fn new(file: File, leaf: usize, dim: usize) -> Result<VectorColumn> {
        let file = SerializedFileReader::new(file)?;
        let max_def = file
            .metadata()
            .file_metadata()
            .schema_descr()
            .column(leaf)
            .max_def_level();
        Ok(VectorColumn {
            file,
            leaf,
            dim,
            max_def,
            next_row_group: 0,
            pages: None,
            dictionary: Vec::new(),
            values: Bytes::new(),
            position: 0,
        })
    }

    /// The next `rows` rows' vectors as a `FixedSizeList<Float32>` of `dim`, or `None` when
    /// they are not all whole vectors (the caller then reads them another way).
    pub fn read(&mut self, rows: usize) -> Result<Option<ArrayRef>> {
        let floats = rows * self.dim;
        let mut out = MutableBuffer::with_capacity(floats * 4);
        while out.len() < floats * 4 {
            if self.values.is_empty() {
                match self.next_page()? {
                    Loaded::Vectors => continue,
                    Loaded::End => {
                        return Err(ParquetError::General(format!(
                            "the vector column ended {} rows early",
                            rows - out.len() / 4 / self.dim
                        )));
                    }
                    Loaded::Irregular => return Ok(None),
                }
            }
            let take = self.values.len().min(floats * 4 - out.len());
            out.extend_from_slice(&self.values.split_to(take));
        }
        let values = ScalarBuffer::<f32>::new(Buffer::from(out), 0, floats);
        let item = Arc::new(Field::new("item", DataType::Float32, true));
        let array = FixedSizeListArray::try_new(
            item,
            self.dim as i32,
            Arc::new(Float32Array::new(values, None)),
            None,
        )?;
        Ok(Some(Arc::new(array)))
    }

    /// Loads the next data page's values.
    fn next_page(&mut self) -> Result<Loaded> {
        loop {
            let pages = match &mut self.pages {
                Some(pages) => pages,
                None => {
                    if self.next_row_group >= self.file.num_row_groups() {
                        return Ok(Loaded::End);
                    }
                    let group = self.file.get_row_group(self.next_row_group)?;
                    self.next_row_group += 1;
                    self.dictionary.clear();
                    self.pages.insert(group.get_column_page_reader(self.leaf)?)
                }
            };
            let Some(page) = pages.get_next_page()? else {
                // A vector never spans row groups: this one ended short.
                self.pages = None;
                if self.position != 0 {
                    return Ok(Loaded::Irregular);
                }
                continue;
            };
            let loaded = match page {
                Page::DictionaryPage { buf, encoding, .. } => {
                    match encoding {
                        Encoding::PLAIN | Encoding::PLAIN_DICTIONARY => {
                            self.dictionary = plain_floats(&buf);
                        }
                        _ => return Ok(Loaded::Irregular),
                    }
                    continue;
                }
                Page::DataPage {
                    buf,
                    num_values,
                    encoding,
                    def_level_encoding,
                    rep_level_encoding,
                    ..
                } => {
                    if def_level_encoding != Encoding::RLE || rep_level_encoding != Encoding::RLE {
                        return Ok(Loaded::Irregular);
                    }
                    let (rep, rest) = prefixed(&buf).ok_or_else(truncated)?;
                    let (def, rest) = prefixed(rest).ok_or_else(truncated)?;
                    let values = buf.slice_ref(rest);
                    self.load(num_values as usize, rep, def, values, encoding)
                }
                Page::DataPageV2 {
                    buf,
                    num_values,
                    num_nulls,
                    encoding,
                    def_levels_byte_len,
                    rep_levels_byte_len,
                    ..
                } => {
                    if num_nulls != 0 {
                        return Ok(Loaded::Irregular);
                    }
                    let (rep_len, def_len) =
                        (rep_levels_byte_len as usize, def_levels_byte_len as usize);
                    if buf.len() < rep_len + def_len {
                        return Err(truncated());
                    }
                    let rep = &buf[..rep_len];
                    let def = &buf[rep_len..rep_len + def_len];
                    let values = buf.slice(rep_len + def_len..);
                    self.load(num_values as usize, rep, def, values, encoding)
                }
            };
            return Ok(match loaded {
                Some(()) => Loaded::Vectors,
                None => Loaded::Irregular,
            });
        }
    }

    /// Checks a data page's levels and keeps its values.
    fn load(
        &mut self,
        levels: usize,
        rep: &[u8],
        def: &[u8],
        values: Bytes,
        encoding: Encoding,
    ) -> Option<()> {
        let max_def = self.max_def as u32;
        let mut defs_ok = true;
        hybrid_runs(def, bit_width(max_def), levels, |run| match run {
            Run::Repeat(value, _) => defs_ok &= value == max_def,
            Run::Packed(values) => defs_ok &= values.iter().all(|&v| v == max_def),
        })?;
        if !defs_ok {
            return None; // A null vector or a null element.
        }
        let (dim, mut position, mut reps_ok) = (self.dim, self.position, true);
        let mut step = |value: u32, count: usize| {
            // A vector starts with a 0 and continues with 1s, `dim` levels in all.
            match value {
                0 if position == 0 && (count == 1 || dim == 1) => position = 1 % dim,
                1 if position != 0 && position + count <= dim => {
                    position = (position + count) % dim
                }
                _ => reps_ok = false,
            }
        };
        hybrid_runs(rep, 1, levels, |run| match run {
            Run::Repeat(value, count) => step(value, count),
            Run::Packed(values) => values.iter().for_each(|&v| step(v, 1)),
        })?;
        if !reps_ok {
            return None;
        }
        self.values = match encoding {
            Encoding::PLAIN if values.len() >= levels * 4 => values.slice(..levels * 4),
            Encoding::PLAIN_DICTIONARY | Encoding::RLE_DICTIONARY if !values.is_empty() => {
                let mut floats = Vec::with_capacity(levels * 4);
                let mut in_range = true;
                let dictionary = &self.dictionary;
                let mut push = |index: u32| match dictionary.get(index as usize) {
                    Some(v) => floats.extend_from_slice(&v.to_le_bytes()),
                    None => in_range = false,
                };
                hybrid_runs(&values[1..], values[0], levels, |run| match run {
                    Run::Repeat(index, count) => (0..count).for_each(|_| push(index)),
                    Run::Packed(indices) => indices.iter().for_each(|&i| push(i)),
                })?;
                if !in_range {
                    return None;
                }
                Bytes::from(floats)
            }
            _ => return None,
        };
        self.position = position;
        Some(())
    }
}

fn truncated() -> ParquetError {
    ParquetError::General("a data page of the vector column is truncated".into())
}

/// Splits off a level block prefixed by its 4-byte little-endian length (data pages v1).
fn prefixed(buf: &[u8]) -> Option<(&[u8], &[u8])> {
    let len = u32::from_le_bytes(buf.get(..4)?.try_into().ok()?) as usize;
    let block = buf.get(4..4 + len)?;
    Some((block, &buf[4 + len..]))
}

fn plain_floats(buf: &[u8]) -> Vec<f32> {
    buf.chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect()
}

/// Bits needed for levels up to `max`.
fn bit_width(max: u32) -> u8 {
    (32 - max.leading_zeros()) as u8
}

/// A stretch of values in Parquet's RLE/bit-packed hybrid encoding.
enum Run<'a> {
    /// One value, repeated.
    Repeat(u32, usize),
    /// Values of a bit-packed group.
    Packed(&'a [u32]),
}

/// Walks the first `count` values of a hybrid-encoded block run by run; `None` when the block
/// is malformed or holds fewer values.
fn hybrid_runs(data: &[u8], width: u8, count: usize, mut visit: impl FnMut(Run<'_>)) -> Option<()> {
    if width > 32 {
        return None;
    }
    let value_bytes = (width as usize).div_ceil(8);
    let (mut at, mut left) = (0usize, count);
    let mut unpacked = Vec::new();
    while left > 0 {
        let mut header = 0u64;
        let mut shift = 0;
        loop {
            let byte = *data.get(at)?;
            at += 1;
            header |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                break;
            }
            shift += 7;
            if shift > 63 {
                return None;
            }
        }
        if header & 1 == 0 {
            let run = ((header >> 1) as usize).min(left);
            let bytes = data.get(at..at + value_bytes)?;
            at += value_bytes;
            let value = bytes
                .iter()
                .rev()
                .fold(0u32, |acc, &b| (acc << 8) | u32::from(b));
            if run == 0 {
                return None;
            }
            visit(Run::Repeat(value, run));
            left -= run;
        } else {
            let groups = (header >> 1) as usize;
            let bytes = data.get(at..at + groups * width as usize)?;
            at += bytes.len();
            let values = (groups * 8).min(left);
            if values == 0 {
                return None;
            }
            unpacked.clear();
            unpacked.extend((0..values).map(|i| unpack(bytes, width, i)));
            visit(Run::Packed(&unpacked));
            left -= values;
        }
    }
    Some(())
}

/// The `index`th `width`-bit value of a little-endian bit-packed block.
fn unpack(bytes: &[u8], width: u8, index: usize) -> u32 {
    let bit = index * width as usize;
    let mut window = [0u8; 8];
    let start = bit / 8;
    let end = (start + 8).min(bytes.len());
    window[..end - start].copy_from_slice(&bytes[start..end]);
    let word = u64::from_le_bytes(window) >> (bit % 8);
    (word & ((1u64 << width) - 1)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runs(data: &[u8], width: u8, count: usize) -> Option<Vec<u32>> {
        let mut out = Vec::new();
        hybrid_runs(data, width, count, |run| match run {
            Run::Repeat(v, n) => out.extend(std::iter::repeat_n(v, n)),
            Run::Packed(values) => out.extend_from_slice(values),
        })?;
        Some(out)
    }

    #[test]
    fn hybrid_blocks_decode_runs_and_packed_groups() {
        // RLE run: header 3 << 1 = 6, value 1; bit-packed: header (1 << 1) | 1 = 3, one group
        // of 8 one-bit values 0b1010_0110.
        let data = [6, 1, 3, 0b1010_0110];
        let values = runs(&data, 1, 11).unwrap();
        assert_eq!(values, vec![1, 1, 1, 0, 1, 1, 0, 0, 1, 0, 1]);
        // Fewer values than promised: refused.
        assert!(runs(&data, 1, 12).is_none());
        // Two-bit values, one group: 0, 1, 2, 3, 3, 2, 1, 0.
        let data = [3, 0b1110_0100, 0b0001_1011];
        assert_eq!(runs(&data, 2, 8).unwrap(), vec![0, 1, 2, 3, 3, 2, 1, 0]);
    }

    use arrow::array::{
        Array, FixedSizeListBuilder, Float32Builder, ListBuilder, RecordBatch, StringArray,
    };
    use parquet::arrow::ArrowWriter;
    use parquet::file::properties::{WriterProperties, WriterVersion};

    /// Writes `vectors` (None: a null row) as a Parquet file beside an id column, as a
    /// fixed-size list or, with `list`, as a variable list; returns its path.
    fn write(
        dir: &tempfile::TempDir,
        vectors: &[Option<Vec<f32>>],
        dim: usize,
        list: bool,
        props: WriterProperties,
    ) -> std::path::PathBuf {
        let array: ArrayRef = if list {
            let mut b = ListBuilder::new(Float32Builder::new());
            for v in vectors {
                match v {
                    Some(v) => {
                        b.values().append_slice(v);
                        b.append(true);
                    }
                    None => b.append(false),
                }
            }
            Arc::new(b.finish())
        } else {
            let mut b = FixedSizeListBuilder::new(Float32Builder::new(), dim as i32);
            for v in vectors {
                match v {
                    Some(v) => b.values().append_slice(v),
                    None => b.values().append_slice(&vec![0.0; dim]),
                }
                b.append(v.is_some());
            }
            Arc::new(b.finish())
        };
        let ids: ArrayRef = Arc::new(StringArray::from(
            (0..vectors.len())
                .map(|i| format!("m{i}"))
                .collect::<Vec<_>>(),
        ));
        let batch = RecordBatch::try_from_iter([("id", ids), ("embedding", array)]).unwrap();
        let path = dir.path().join(format!("v{}.parquet", vectors.len()));
        let mut writer =
            ArrowWriter::try_new(File::create(&path).unwrap(), batch.schema(), Some(props))
                .unwrap();
        for start in (0..batch.num_rows()).step_by(333) {
            let len = 333.min(batch.num_rows() - start);
            writer.write(&batch.slice(start, len)).unwrap();
        }
        writer.close().unwrap();
        path
    }

    /// Reads the whole column in chunks of `chunk` rows; None if some chunk is irregular.
    fn read_all(path: &std::path::Path, dim: usize, rows: usize, chunk: usize) -> Option<Vec<f32>> {
        let reader = SerializedFileReader::new(File::open(path).unwrap()).unwrap();
        let schema = reader.metadata().file_metadata().schema_descr_ptr();
        let (_, leaf) = vector_root(&schema, "embedding").expect("a vector column");
        let mut column = VectorColumn::new(File::open(path).unwrap(), leaf, dim).unwrap();
        let mut out = Vec::new();
        let mut done = 0;
        while done < rows {
            let n = chunk.min(rows - done);
            let array = column.read(n).unwrap()?;
            let list = array.as_any().downcast_ref::<FixedSizeListArray>().unwrap();
            assert_eq!(list.len(), n);
            let values = list
                .values()
                .as_any()
                .downcast_ref::<Float32Array>()
                .unwrap();
            out.extend_from_slice(values.values());
            done += n;
        }
        Some(out)
    }

    fn vectors(rows: usize, dim: usize, distinct: bool) -> Vec<Option<Vec<f32>>> {
        (0..rows)
            .map(|r| {
                Some(
                    (0..dim)
                        .map(|d| match distinct {
                            true => (r * dim + d) as f32 * 0.001 - 1.0,
                            false => ((r + d) % 5) as f32 * 0.25,
                        })
                        .collect(),
                )
            })
            .collect()
    }

    fn flat(vectors: &[Option<Vec<f32>>]) -> Vec<f32> {
        vectors.iter().flat_map(|v| v.clone().unwrap()).collect()
    }

    #[test]
    fn reads_what_the_arrow_writer_wrote_in_every_page_layout() {
        let dir = tempfile::tempdir().unwrap();
        let dim = 24;
        let layouts = [
            // Defaults: dictionary pages while the dictionary is small (few distinct values).
            (false, WriterProperties::builder().build()),
            // Many distinct values: dictionary pages, then plain ones once it overflows.
            (
                true,
                WriterProperties::builder()
                    .set_dictionary_page_size_limit(512)
                    .build(),
            ),
            // Plain values, data pages v2, tiny pages and row groups, odd write batches.
            (
                true,
                WriterProperties::builder()
                    .set_dictionary_enabled(false)
                    .set_writer_version(WriterVersion::PARQUET_2_0)
                    .set_data_page_size_limit(200)
                    .set_write_batch_size(7)
                    .set_max_row_group_row_count(Some(1000))
                    .build(),
            ),
        ];
        for (case, (distinct, props)) in layouts.into_iter().enumerate() {
            let input = vectors(2500, dim, distinct);
            let path = write(&dir, &input, dim, false, props);
            for chunk in [1, 700, 2500] {
                let read = read_all(&path, dim, input.len(), chunk);
                assert_eq!(read, Some(flat(&input)), "layout {case}, chunks of {chunk}");
            }
        }
        // Variable lists of the right length read the same.
        let input = vectors(1200, dim, true);
        let path = write(&dir, &input, dim, true, WriterProperties::builder().build());
        assert_eq!(read_all(&path, dim, input.len(), 500), Some(flat(&input)));
    }

    #[test]
    fn anything_but_whole_vectors_is_left_to_the_generic_reader() {
        let dir = tempfile::tempdir().unwrap();
        let dim = 16;
        // A null vector.
        let mut input = vectors(900, dim, true);
        input[450] = None;
        let path = write(
            &dir,
            &input,
            dim,
            false,
            WriterProperties::builder().build(),
        );
        assert_eq!(read_all(&path, dim, input.len(), 300), None);
        // A vector one value short, in a variable list.
        let mut input = vectors(901, dim, true);
        input[600].as_mut().unwrap().pop();
        let path = write(&dir, &input, dim, true, WriterProperties::builder().build());
        assert_eq!(read_all(&path, dim, input.len(), 300), None);
        // The table expects another dimension.
        let input = vectors(902, dim, true);
        let path = write(
            &dir,
            &input,
            dim,
            false,
            WriterProperties::builder().build(),
        );
        assert_eq!(read_all(&path, dim * 2, input.len() / 2, 300), None);
    }

    #[test]
    fn bit_widths_of_levels() {
        assert_eq!(bit_width(1), 1);
        assert_eq!(bit_width(2), 2);
        assert_eq!(bit_width(3), 2);
        assert_eq!(bit_width(4), 3);
    }
}
