//! The fast path of import for Arrow input (Parquet): a whole input batch converted to a
//! table's schema column by column (casts, constant defaults, vectorised rule checks) instead
//! of row by row. It only takes batches that the row path would accept unchanged: anything it
//! is not sure of (a null where a default applies, an empty or blank string, a value outside
//! its rule, a missing required or derived column, a type that needs conversion) makes it
//! decline the batch, and the row path then validates that batch and names each bad row.
//! So both paths write the same rows; this one is just much cheaper when the input is clean.
//!
//! Pure: arrow in, arrow out.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, FixedSizeListArray, Float64Array, Int64Array,
    ListArray, StringArray, TimestampMicrosecondArray, new_null_array,
};
use arrow::buffer::OffsetBuffer;
use arrow::datatypes::{DataType, Float32Type, Float64Type, Int64Type, TimeUnit};
use arrow::record_batch::RecordBatch;

use crate::model::schema::{self, Fallback, FieldSpec, Kind, Rule, TableSpec};

/// Why a batch goes to the row path instead.
pub type Decline = String;

fn decline<T>(field: &FieldSpec, why: &str) -> Result<T, Decline> {
    Err(format!("{}: {why}", field.name))
}

fn constant(
    field: &FieldSpec,
    kind: Kind,
    rows: usize,
    now: i64,
    dim: usize,
) -> Result<ArrayRef, Decline> {
    let target = schema::data_type(kind, dim);
    Ok(match field.default {
        Fallback::Null => new_null_array(&target, rows),
        Fallback::F64(v) => Arc::new(Float64Array::from(vec![v; rows])),
        Fallback::I64(v) => Arc::new(Int64Array::from(vec![v; rows])),
        Fallback::Bool(v) => Arc::new(BooleanArray::from(vec![v; rows])),
        Fallback::Str(v) => Arc::new(StringArray::from(vec![v; rows])),
        Fallback::Now => {
            Arc::new(TimestampMicrosecondArray::from(vec![now; rows]).with_timezone("UTC"))
        }
        Fallback::EmptyList => {
            let DataType::List(item) = &target else {
                return decline(field, "empty-list default of a non-list column");
            };
            Arc::new(
                ListArray::try_new(
                    item.clone(),
                    OffsetBuffer::new_zeroed(rows),
                    new_null_array(item.data_type(), 0),
                    None,
                )
                .map_err(|e| e.to_string())?,
            )
        }
        Fallback::SameAs(_) => unreachable!("resolved by the caller"),
        Fallback::DerivedId => return decline(field, "ids derived from content"),
        Fallback::Required => return decline(field, "required column missing"),
    })
}

fn check_strings(field: &FieldSpec, array: &StringArray) -> Result<(), Decline> {
    for value in array.iter() {
        let Some(s) = value else {
            if matches!(field.default, Fallback::Null) {
                continue;
            }
            return decline(field, "null where a default applies");
        };
        if s.is_empty() {
            return decline(field, "empty string (read as null)");
        }
        let ok = match field.rule {
            Rule::OneOf(allowed) => allowed.contains(&s),
            Rule::LinkType => schema::is_known_link_type(s),
            Rule::NonEmpty => !s.trim().is_empty(),
            _ => true,
        };
        if !ok {
            return decline(field, "value outside its rule");
        }
    }
    Ok(())
}

fn nulls_allowed(field: &FieldSpec, array: &dyn Array) -> Result<(), Decline> {
    if array.null_count() > 0 && !matches!(field.default, Fallback::Null) {
        return decline(field, "null where a default applies");
    }
    Ok(())
}

fn column(field: &FieldSpec, input: &ArrayRef, dim: usize) -> Result<ArrayRef, Decline> {
    let target = schema::data_type(field.kind, dim);
    match (field.kind, input.data_type()) {
        (Kind::Str, DataType::Utf8) => {
            check_strings(field, input.as_string::<i32>())?;
            Ok(input.clone())
        }
        (Kind::F64, DataType::Float64) => {
            nulls_allowed(field, input.as_ref())?;
            let values = input.as_primitive::<Float64Type>();
            let bad = values.iter().flatten().any(|v| {
                !v.is_finite()
                    || match field.rule {
                        Rule::UnitInterval => !(0.0..=1.0).contains(&v),
                        Rule::NonNegative => v < 0.0,
                        _ => false,
                    }
            });
            if bad {
                return decline(field, "value outside its rule");
            }
            Ok(input.clone())
        }
        (Kind::I64, DataType::Int64) => {
            nulls_allowed(field, input.as_ref())?;
            let values = input.as_primitive::<Int64Type>();
            if matches!(field.rule, Rule::NonNegative) && values.iter().flatten().any(|v| v < 0) {
                return decline(field, "negative value");
            }
            Ok(input.clone())
        }
        (Kind::Bool, DataType::Boolean) => {
            nulls_allowed(field, input.as_ref())?;
            Ok(input.clone())
        }
        (Kind::Timestamp, DataType::Timestamp(TimeUnit::Microsecond, _)) => {
            nulls_allowed(field, input.as_ref())?;
            // Microseconds since the epoch whatever the zone label: relabel as UTC.
            let values = input.as_primitive::<arrow::datatypes::TimestampMicrosecondType>();
            Ok(Arc::new(values.clone().with_timezone("UTC")))
        }
        (Kind::StrList, DataType::List(item)) if item.data_type() == &DataType::Utf8 => {
            if input.null_count() > 0 {
                return decline(field, "null list (read as empty)");
            }
            arrow::compute::cast(input, &target).map_err(|e| format!("{}: {e}", field.name))
        }
        (Kind::Embedding, DataType::FixedSizeList(item, width))
            if item.data_type() == &DataType::Float32 && *width as usize == dim =>
        {
            let list = input.as_fixed_size_list();
            let values = list.values().as_primitive::<Float32Type>();
            if values.null_count() > 0 || !all_finite(values.values()) {
                return decline(field, "null or non-finite vector values");
            }
            let DataType::FixedSizeList(target_item, _) = &target else {
                unreachable!("embedding is a fixed-size list")
            };
            Ok(Arc::new(
                FixedSizeListArray::try_new(
                    target_item.clone(),
                    dim as i32,
                    list.values().clone(),
                    list.nulls().cloned(),
                )
                .map_err(|e| format!("{}: {e}", field.name))?,
            ))
        }
        _ => decline(field, "input type needs the row path's conversion"),
    }
}

/// Whether every value is finite: the exponent bits of a NaN or an infinity are all ones.
/// A branch-free fold per block, which the compiler vectorises (a short-circuiting `any` is
/// not), so a million 384-float vectors take milliseconds.
fn all_finite(values: &[f32]) -> bool {
    const EXPONENT: u32 = 0x7f80_0000;
    values.chunks(4096).all(|block| {
        !block
            .iter()
            .fold(false, |bad, v| bad | (v.to_bits() & EXPONENT == EXPONENT))
    })
}

/// Converts `batch` to `spec`'s schema, or declines (see the module docs).
pub fn conform(
    spec: &TableSpec,
    embedding_dim: usize,
    now_micros: i64,
    batch: &RecordBatch,
) -> Result<RecordBatch, Decline> {
    let rows = batch.num_rows();
    let schema = spec.arrow_schema(embedding_dim);
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(spec.fields.len());
    for field in spec.fields {
        let array = match batch.column_by_name(field.name) {
            Some(input)
                if input.null_count() == input.len()
                    && !matches!(field.default, Fallback::Null) =>
            {
                return decline(field, "an all-null column where a default applies");
            }
            Some(input) => column(field, input, embedding_dim)?,
            None => match field.default {
                Fallback::SameAs(other) => {
                    let index = spec
                        .position(other)
                        .expect("SameAs names an earlier column");
                    columns[index].clone()
                }
                _ => constant(field, field.kind, rows, now_micros, embedding_dim)?,
            },
        };
        columns.push(array);
    }
    RecordBatch::try_new(schema, columns).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finite_check_finds_nan_and_infinities() {
        let mut values = vec![0.5f32; 10_000];
        assert!(all_finite(&values));
        for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
            values[9_999] = bad;
            assert!(!all_finite(&values), "{bad} missed");
        }
        values[9_999] = f32::MAX;
        assert!(all_finite(&values));
    }
    use crate::model::rows::RowBuilder;
    use crate::model::schema::MEMORIES;
    use arrow::array::FixedSizeListBuilder;

    fn input(ids: &[&str], salience: &[Option<f64>], state: &[&str]) -> RecordBatch {
        let mut vectors = FixedSizeListBuilder::new(arrow::array::Float32Builder::new(), 2);
        for i in 0..ids.len() {
            vectors.values().append_slice(&[i as f32, 1.0]);
            vectors.append(true);
        }
        RecordBatch::try_from_iter(vec![
            ("id", Arc::new(StringArray::from(ids.to_vec())) as ArrayRef),
            (
                "user_id",
                Arc::new(StringArray::from(vec!["u"; ids.len()])) as ArrayRef,
            ),
            (
                "text",
                Arc::new(StringArray::from(vec!["User likes tea."; ids.len()])) as ArrayRef,
            ),
            (
                "salience",
                Arc::new(Float64Array::from(salience.to_vec())) as ArrayRef,
            ),
            (
                "state",
                Arc::new(StringArray::from(state.to_vec())) as ArrayRef,
            ),
            (
                "created_at",
                Arc::new(TimestampMicrosecondArray::from(vec![
                    1_700_000_000_000_000;
                    ids.len()
                ])) as ArrayRef,
            ),
            ("embedding", Arc::new(vectors.finish()) as ArrayRef),
            (
                "truth_group",
                Arc::new(StringArray::from(vec!["ignored"; ids.len()])) as ArrayRef,
            ),
        ])
        .unwrap()
    }

    #[test]
    fn a_clean_batch_converts_to_what_the_row_path_builds() {
        let batch = input(&["a", "b"], &[Some(0.2), Some(0.9)], &["active", "core"]);
        let fast = conform(&MEMORIES, 2, 42, &batch).unwrap();
        let mut builder = RowBuilder::new(&MEMORIES, 2, 42);
        for row in 0..2 {
            builder
                .append(|index, name| {
                    let _ = index;
                    batch
                        .column_by_name(name)
                        .map_or(crate::model::encoding::Cell::Missing, |a| {
                            crate::model::encoding::arrow_cell(a.as_ref(), row)
                        })
                })
                .unwrap();
        }
        let slow = builder.finish().unwrap();
        assert_eq!(fast.schema(), slow.schema());
        for (f, s) in fast.columns().iter().zip(slow.columns()) {
            assert_eq!(f.to_data(), s.to_data(), "{:?}", f.data_type());
        }
    }

    #[test]
    fn anything_doubtful_goes_to_the_row_path() {
        let cases = [
            input(&["a"], &[Some(1.5)], &["active"]),
            input(&["a"], &[None], &["active"]),
            input(&["a"], &[Some(0.5)], &["dormant"]),
            input(&[""], &[Some(0.5)], &["active"]),
        ];
        for batch in cases {
            assert!(conform(&MEMORIES, 2, 0, &batch).is_err());
        }
        // A table whose ids are derived from content is left to the row path.
        let no_id = input(&["a"], &[Some(0.5)], &["active"]);
        let no_id = no_id.project(&[1, 2, 3, 4, 5, 6]).unwrap();
        assert!(
            conform(&MEMORIES, 2, 0, &no_id)
                .unwrap_err()
                .contains("derived")
        );
    }
}
