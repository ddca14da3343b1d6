//! Builds Arrow record batches of a table from rows of input cells, one row at a time: each
//! row is converted, checked against its table's rules and given its defaults before any of
//! it is appended, so a bad row never leaves half a row behind.
//!
//! Pure: arrow only. Import, synth and the run log all write rows through this builder.

use std::borrow::Cow;
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanBuilder, FixedSizeListBuilder, Float32Builder, Float64Builder, Int64Builder,
    ListBuilder, RecordBatch, StringBuilder, StructBuilder, TimestampMicrosecondBuilder,
};
use arrow::datatypes::SchemaRef;
use arrow::error::ArrowError;

use crate::model::encoding::{Cell, Typed, convert};
use crate::model::schema::{self, Fallback, FieldSpec, Kind, Rule, TableSpec};

/// A memory naming the model of a vector it does not have (`embed` finds the rows to embed
/// by their missing model, so a model is recorded beside a vector only): what `import`
/// refuses. (Audit states hold memories without their vectors, and read back whole.)
pub fn model_without_vector(spec: &TableSpec, row: &ValidRow) -> Option<FieldError> {
    if spec.name != "memories" {
        return None;
    }
    let value = |name| row.get(spec, name);
    let no_vector = value("embedding").is_some_and(Typed::is_null);
    let model = value("embedding_model").is_some_and(|v| !v.is_null());
    (no_vector && model).then(|| FieldError {
        field: "embedding_model".to_string(),
        reason:
            "names a model but the row has no embedding (a model is recorded beside its vector)"
                .to_string(),
    })
}

/// Columns of `memories` that record what a job of this store did with the row (`link`,
/// `entities`, `scores`): an imported row has not been through this store's jobs, so
/// `import` clears them and the next runs look at the row.
pub const STORE_MARKS: &[&str] = &["link_mark", "entity_mark", "scores_due_at"];

/// `batch` (of `memories`' schema) with the store marks cleared; `None` when none was set.
pub fn without_store_marks(batch: &RecordBatch) -> Result<Option<RecordBatch>, ArrowError> {
    use arrow::array::Array;
    let schema = batch.schema();
    let set = |name: &str| {
        batch
            .column_by_name(name)
            .is_some_and(|c| c.null_count() < c.len())
    };
    if !STORE_MARKS.iter().any(|name| set(name)) {
        return Ok(None);
    }
    let columns = schema
        .fields()
        .iter()
        .zip(batch.columns())
        .map(
            |(field, column)| match STORE_MARKS.contains(&field.name().as_str()) {
                true => arrow::array::new_null_array(field.data_type(), batch.num_rows()),
                false => column.clone(),
            },
        )
        .collect();
    RecordBatch::try_new(schema, columns).map(Some)
}

/// Why one field of one row was refused.
#[derive(Debug, Clone, PartialEq)]
pub struct FieldError {
    pub field: String,
    pub reason: String,
}

impl std::fmt::Display for FieldError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "field '{}': {}", self.field, self.reason)
    }
}

/// A row that passed validation, ready to append.
#[derive(Debug)]
pub struct ValidRow<'a> {
    values: Vec<Typed<'a>>,
}

impl ValidRow<'_> {
    pub fn get(&self, spec: &TableSpec, name: &str) -> Option<&Typed<'_>> {
        spec.position(name).map(|i| &self.values[i])
    }

    /// Clears the store marks of a `memories` row (`STORE_MARKS`).
    pub fn clear_store_marks(&mut self, spec: &TableSpec) {
        if spec.name != "memories" {
            return;
        }
        for i in STORE_MARKS.iter().filter_map(|name| spec.position(name)) {
            self.values[i] = Typed::Null;
        }
    }
}

enum Column {
    Str(StringBuilder),
    F64(Float64Builder),
    I64(Int64Builder),
    Bool(BooleanBuilder),
    Timestamp(TimestampMicrosecondBuilder),
    StrList(ListBuilder<StringBuilder>),
    Embedding(FixedSizeListBuilder<Float32Builder>),
    Notes(ListBuilder<StructBuilder>),
}

impl Column {
    fn new(kind: Kind, dim: usize) -> Column {
        match kind {
            Kind::Str => Column::Str(StringBuilder::new()),
            Kind::F64 => Column::F64(Float64Builder::new()),
            Kind::I64 => Column::I64(Int64Builder::new()),
            Kind::Bool => Column::Bool(BooleanBuilder::new()),
            Kind::Timestamp => {
                Column::Timestamp(TimestampMicrosecondBuilder::new().with_timezone("UTC"))
            }
            Kind::StrList => Column::StrList(ListBuilder::new(StringBuilder::new())),
            Kind::Embedding => {
                Column::Embedding(FixedSizeListBuilder::new(Float32Builder::new(), dim as i32))
            }
            Kind::Notes => Column::Notes(ListBuilder::new(StructBuilder::from_fields(
                schema::note_fields(),
                0,
            ))),
        }
    }

    fn append(&mut self, value: &Typed, dim: usize) {
        match (self, value) {
            (Column::Str(b), Typed::Str(s)) => b.append_value(s),
            (Column::Str(b), _) => b.append_null(),
            (Column::F64(b), Typed::F64(v)) => b.append_value(*v),
            (Column::F64(b), _) => b.append_null(),
            (Column::I64(b), Typed::I64(v)) => b.append_value(*v),
            (Column::I64(b), _) => b.append_null(),
            (Column::Bool(b), Typed::Bool(v)) => b.append_value(*v),
            (Column::Bool(b), _) => b.append_null(),
            (Column::Timestamp(b), Typed::Timestamp(v)) => b.append_value(*v),
            (Column::Timestamp(b), _) => b.append_null(),
            (Column::StrList(b), Typed::StrList(items)) => {
                for item in items {
                    b.values().append_value(item);
                }
                b.append(true);
            }
            (Column::StrList(b), _) => b.append_null(),
            (Column::Embedding(b), Typed::Floats(v)) => {
                b.values().append_slice(v);
                b.append(true);
            }
            (Column::Embedding(b), _) => {
                b.values().append_nulls(dim);
                b.append(false);
            }
            (Column::Notes(b), Typed::Notes(notes)) => {
                let entries = b.values();
                for note in notes {
                    entries
                        .field_builder::<StringBuilder>(0)
                        .expect("text builder")
                        .append_value(&note.text);
                    entries
                        .field_builder::<TimestampMicrosecondBuilder>(1)
                        .expect("added_at builder")
                        .append_value(note.added_at);
                    entries
                        .field_builder::<TimestampMicrosecondBuilder>(2)
                        .expect("expires_at builder")
                        .append_option(note.expires_at);
                    entries.append(true);
                }
                b.append(true);
            }
            (Column::Notes(b), _) => b.append_null(),
        }
    }

    fn finish(&mut self) -> ArrayRef {
        match self {
            Column::Str(b) => Arc::new(b.finish()),
            Column::F64(b) => Arc::new(b.finish()),
            Column::I64(b) => Arc::new(b.finish()),
            Column::Bool(b) => Arc::new(b.finish()),
            Column::Timestamp(b) => Arc::new(b.finish()),
            Column::StrList(b) => Arc::new(b.finish()),
            Column::Embedding(b) => Arc::new(b.finish()),
            Column::Notes(b) => Arc::new(b.finish()),
        }
    }
}

/// The digest of a key given as the text of each key column (see `RowBuilder::key_digest`).
pub fn key_digest_of<'a>(parts: impl Iterator<Item = &'a str>) -> u128 {
    use std::hash::{Hash, Hasher};
    let mut low = std::collections::hash_map::DefaultHasher::new();
    let mut high = std::collections::hash_map::DefaultHasher::new();
    0x9e37_79b9_7f4a_7c15u64.hash(&mut high);
    for part in parts {
        part.hash(&mut low);
        part.hash(&mut high);
    }
    ((high.finish() as u128) << 64) | low.finish() as u128
}

/// Hashes a key digest (already uniformly spread) for a hash map by folding its halves, instead
/// of running SipHash over it a second time.
#[derive(Clone, Copy, Default)]
pub struct DigestHasher(u64);

impl std::hash::Hasher for DigestHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(byte);
        }
    }

    fn write_u128(&mut self, digest: u128) {
        self.0 = (digest as u64) ^ ((digest >> 64) as u64);
    }
}

/// A map keyed by key digests (see `key_digest_of`).
pub type DigestMap<V> =
    std::collections::HashMap<u128, V, std::hash::BuildHasherDefault<DigestHasher>>;

/// Accumulates valid rows of one table into Arrow columns.
pub struct RowBuilder {
    spec: &'static TableSpec,
    embedding_dim: usize,
    now_micros: i64,
    schema: SchemaRef,
    columns: Vec<Column>,
    rows: usize,
    /// Whole batches already in the table's schema (the columnar path), waiting to be sent.
    ready: Vec<RecordBatch>,
}

impl RowBuilder {
    /// `now_micros` is the clock reading that `Fallback::Now` columns get, fixed per run.
    pub fn new(spec: &'static TableSpec, embedding_dim: usize, now_micros: i64) -> RowBuilder {
        let columns = spec
            .fields
            .iter()
            .map(|f| Column::new(f.kind, embedding_dim))
            .collect();
        RowBuilder {
            spec,
            embedding_dim,
            now_micros,
            schema: spec.arrow_schema(embedding_dim),
            columns,
            rows: 0,
            ready: Vec::new(),
        }
    }

    pub fn embedding_dim(&self) -> usize {
        self.embedding_dim
    }

    pub fn now_micros(&self) -> i64 {
        self.now_micros
    }

    /// Queues a batch converted by `columnar` (already in the table's schema).
    pub fn push_ready(&mut self, batch: RecordBatch) {
        self.ready.push(batch);
    }

    /// The queued batches, in order.
    pub fn take_ready(&mut self) -> Vec<RecordBatch> {
        std::mem::take(&mut self.ready)
    }

    pub fn spec(&self) -> &'static TableSpec {
        self.spec
    }

    pub fn schema(&self) -> SchemaRef {
        self.schema.clone()
    }

    pub fn len(&self) -> usize {
        self.rows
    }

    pub fn is_empty(&self) -> bool {
        self.rows == 0
    }

    /// Converts and checks one row. `cell_of(index, name)` gives the input cell of the
    /// table's column at `index` in its spec, named `name`.
    pub fn validate<'a>(
        &self,
        mut cell_of: impl FnMut(usize, &str) -> Cell<'a>,
    ) -> Result<ValidRow<'a>, FieldError> {
        let mut values: Vec<Typed<'a>> = Vec::with_capacity(self.spec.fields.len());
        let mut given: Vec<bool> = Vec::with_capacity(self.spec.fields.len());
        let mut derived_id_at = None;
        for (index, field) in self.spec.fields.iter().enumerate() {
            let cell = cell_of(index, field.name);
            let typed = convert(field.kind, &cell).map_err(|reason| FieldError {
                field: field.name.to_string(),
                reason,
            })?;
            let cell_was_empty = typed.is_null();
            let typed = if cell_was_empty {
                match field.default {
                    Fallback::Null => Typed::Null,
                    Fallback::Required => {
                        let reason = match cell {
                            Cell::Missing => "required field is missing",
                            _ => "required field is empty",
                        };
                        return Err(FieldError {
                            field: field.name.to_string(),
                            reason: reason.to_string(),
                        });
                    }
                    Fallback::F64(v) => Typed::F64(v),
                    Fallback::I64(v) => Typed::I64(v),
                    Fallback::Bool(v) => Typed::Bool(v),
                    Fallback::Str(v) => Typed::Str(Cow::Borrowed(v)),
                    Fallback::Now => Typed::Timestamp(self.now_micros),
                    Fallback::EmptyList => match field.kind {
                        Kind::Notes => Typed::Notes(Vec::new()),
                        _ => Typed::StrList(Vec::new()),
                    },
                    Fallback::SameAs(other) => {
                        let index = self.spec.position(other).expect("SameAs names a column");
                        values[index].clone()
                    }
                    Fallback::DerivedId => {
                        derived_id_at = Some(values.len());
                        Typed::Null
                    }
                }
            } else {
                check_rule(field, &typed, self.embedding_dim)?;
                typed
            };
            given.push(!cell_was_empty);
            values.push(typed);
        }
        if let Some(index) = derived_id_at {
            values[index] = Typed::Str(Cow::Owned(self.derive_id(&values, &given)));
        }
        Ok(ValidRow { values })
    }

    /// A UUID v5 over the row's `id_basis` columns as the input gave them (a defaulted value
    /// such as the import's clock does not count): the same content gets the same id.
    fn derive_id(&self, values: &[Typed], given: &[bool]) -> String {
        let mut basis = String::from(self.spec.name);
        for name in self.spec.id_basis {
            let index = self.spec.position(name).expect("id_basis names a column");
            basis.push('\u{1f}');
            if given[index] {
                basis.push_str(&values[index].key_text());
            }
        }
        uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, basis.as_bytes()).to_string()
    }

    /// A 128-bit digest of the row's key: two SipHash passes with different seeds, so telling
    /// a million keys apart needs no string per row (a false match has odds near 2^-90).
    pub fn key_digest(&self, row: &ValidRow) -> u128 {
        let texts: Vec<std::borrow::Cow<str>> = self
            .spec
            .key
            .iter()
            .map(|name| {
                let index = self.spec.position(name).expect("key names a column");
                match &row.values[index] {
                    Typed::Str(s) => std::borrow::Cow::Borrowed(s.as_ref()),
                    other => std::borrow::Cow::Owned(other.key_text()),
                }
            })
            .collect();
        key_digest_of(texts.iter().map(|t| t.as_ref()))
    }

    /// The row's key (its upsert identity) as one string.
    pub fn key_of(&self, row: &ValidRow) -> String {
        let mut key = String::new();
        for (i, name) in self.spec.key.iter().enumerate() {
            if i > 0 {
                key.push('\u{1f}');
            }
            let index = self.spec.position(name).expect("key names a column");
            key.push_str(&row.values[index].key_text());
        }
        key
    }

    pub fn push(&mut self, row: ValidRow) {
        for (column, value) in self.columns.iter_mut().zip(&row.values) {
            column.append(value, self.embedding_dim);
        }
        self.rows += 1;
    }

    /// Validates and appends in one step; for callers that build rows themselves.
    pub fn append<'a>(
        &mut self,
        cell_of: impl FnMut(usize, &str) -> Cell<'a>,
    ) -> Result<(), FieldError> {
        let row = self.validate(cell_of)?;
        self.push(row);
        Ok(())
    }

    /// Takes the rows appended so far as one batch and starts a new one.
    pub fn finish(&mut self) -> Result<RecordBatch, ArrowError> {
        let arrays: Vec<ArrayRef> = self.columns.iter_mut().map(Column::finish).collect();
        self.rows = 0;
        RecordBatch::try_new(self.schema.clone(), arrays)
    }
}

fn check_rule(field: &FieldSpec, value: &Typed, embedding_dim: usize) -> Result<(), FieldError> {
    let fail = |reason: String| {
        Err(FieldError {
            field: field.name.to_string(),
            reason,
        })
    };
    if let Typed::Floats(v) = value {
        if v.len() != embedding_dim {
            return fail(format!(
                "embedding has {} dimensions, the database expects {embedding_dim}",
                v.len()
            ));
        }
        if let Some(position) = v.iter().position(|x| !x.is_finite()) {
            return fail(format!("embedding value {position} is not a finite number"));
        }
    }
    match (field.rule, value) {
        (Rule::OneOf(allowed), Typed::Str(s)) if !allowed.contains(&s.as_ref()) => fail(format!(
            "unknown value '{s}' (expected one of: {})",
            allowed.join(", ")
        )),
        (Rule::LinkType, Typed::Str(s)) if !schema::is_known_link_type(s) => fail(format!(
            "unknown link type '{s}' (expected one of: {}, or shares_entity:<name>)",
            schema::LINK_TYPES.join(", ")
        )),
        (Rule::NonEmpty, Typed::Str(s)) if s.trim().is_empty() => {
            fail("must not be blank".to_string())
        }
        (Rule::UnitInterval, Typed::F64(v)) if !(0.0..=1.0).contains(v) => {
            fail(format!("{v} is outside [0, 1]"))
        }
        (Rule::NonNegative, Typed::F64(v)) if *v < 0.0 => fail(format!("{v} is negative")),
        (Rule::NonNegative, Typed::I64(v)) if *v < 0 => fail(format!("{v} is negative")),
        _ => Ok(()),
    }
}

/// Fills a memories batch's empty `happens_at` from its `text` and `created_at`
/// (`event_day`, midnight UTC), for `import` and `integrate` ("the text implies an event
/// time"). A batch without those columns is returned as it is.
pub fn fill_happens_at(
    batch: &arrow::array::RecordBatch,
) -> Result<arrow::array::RecordBatch, arrow::error::ArrowError> {
    use arrow::array::{Array, AsArray, TimestampMicrosecondArray};
    use arrow::datatypes::{DataType, TimestampMicrosecondType};
    let schema = batch.schema();
    let (Ok(h), Ok(t), Ok(c)) = (
        schema.index_of("happens_at"),
        schema.index_of("text"),
        schema.index_of("created_at"),
    ) else {
        return Ok(batch.clone());
    };
    let DataType::Timestamp(_, tz) = schema.field(h).data_type().clone() else {
        return Ok(batch.clone());
    };
    let happens = batch.column(h).as_primitive::<TimestampMicrosecondType>();
    if happens.null_count() == 0 {
        return Ok(batch.clone());
    }
    let texts = batch.column(t).as_string::<i32>();
    let created = batch.column(c).as_primitive::<TimestampMicrosecondType>();
    let filled: TimestampMicrosecondArray = (0..batch.num_rows())
        .map(|row| {
            if happens.is_valid(row) {
                return Some(happens.value(row));
            }
            if texts.is_null(row) || created.is_null(row) {
                return None;
            }
            let said = chrono::DateTime::from_timestamp_micros(created.value(row))?.date_naive();
            let day = crate::logic::temporal::event_day(texts.value(row), said)?;
            Some(day.and_hms_opt(0, 0, 0)?.and_utc().timestamp_micros())
        })
        .collect::<TimestampMicrosecondArray>()
        .with_timezone_opt(tz);
    let mut columns = batch.columns().to_vec();
    columns[h] = std::sync::Arc::new(filled);
    arrow::array::RecordBatch::try_new(schema, columns)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::schema::{LINKS, MEMORIES};
    use arrow::array::{Array, AsArray};
    use arrow::datatypes::Float64Type;
    use serde_json::{Value, json};

    fn row_of<'a>(value: &'a Value) -> impl FnMut(usize, &str) -> Cell<'a> + 'a {
        move |_, name| value.get(name).map_or(Cell::Missing, Cell::Json)
    }

    fn check_error(input: Value, field: &str, fragment: &str) {
        let builder = RowBuilder::new(&MEMORIES, 3, 0);
        let err = builder
            .validate(row_of(&input))
            .expect_err("row should be refused");
        assert_eq!(err.field, field, "{err}");
        assert!(err.reason.contains(fragment), "{err} lacks {fragment}");
    }

    #[test]
    fn each_kind_of_bad_memory_is_refused_with_its_field() {
        check_error(json!({"user_id": "u"}), "text", "missing");
        check_error(json!({"text": "t"}), "user_id", "missing");
        check_error(json!({"text": " ", "user_id": "u"}), "text", "blank");
        check_error(
            json!({"text": "t", "user_id": "u", "created_at": "last tuesday"}),
            "created_at",
            "RFC 3339",
        );
        check_error(
            json!({"text": "t", "user_id": "u", "salience": 1.5}),
            "salience",
            "[0, 1]",
        );
        check_error(
            json!({"text": "t", "user_id": "u", "state": "dormant"}),
            "state",
            "dormant",
        );
        check_error(
            json!({"text": "t", "user_id": "u", "embedding": [0.1, 0.2]}),
            "embedding",
            "2 dimensions",
        );
        check_error(
            json!({"text": "t", "user_id": "u", "access_count": -1}),
            "access_count",
            "negative",
        );
    }

    #[test]
    fn defaults_follow_seed_002_initial_values() {
        let mut builder = RowBuilder::new(&MEMORIES, 3, 1_000_000);
        builder
            .append(row_of(&json!({"text": "User has a dog", "user_id": "u1"})))
            .unwrap();
        let batch = builder.finish().unwrap();
        let f64_of = |name: &str| {
            batch
                .column_by_name(name)
                .unwrap()
                .as_primitive::<Float64Type>()
                .value(0)
        };
        let str_of = |name: &str| {
            batch
                .column_by_name(name)
                .unwrap()
                .as_string::<i32>()
                .value(0)
                .to_string()
        };
        assert_eq!(f64_of("salience"), 0.5);
        assert_eq!(f64_of("decay_gradient"), 1.0);
        assert_eq!(str_of("state"), "candidate");
        assert_eq!(str_of("ttl_policy"), "decay");
        assert_eq!(str_of("sensitivity"), "normal");
        assert!(batch.column_by_name("embedding").unwrap().is_null(0));
        assert!(batch.column_by_name("last_accessed_at").unwrap().is_null(0));
        let valid_from = batch.column_by_name("valid_from").unwrap();
        assert!(!valid_from.is_null(0));
        assert_eq!(str_of("id").len(), 36);
    }

    #[test]
    fn derived_ids_depend_on_content_only() {
        let builder = RowBuilder::new(&MEMORIES, 3, 0);
        let later = RowBuilder::new(&MEMORIES, 3, 99);
        let input = json!({"text": "User has a dog", "user_id": "u1", "created_at": "2024-01-01"});
        let a = builder.validate(row_of(&input)).unwrap();
        let b = later.validate(row_of(&input)).unwrap();
        assert_eq!(builder.key_of(&a), later.key_of(&b));
        let other = json!({"text": "User has a cat", "user_id": "u1", "created_at": "2024-01-01"});
        let c = builder.validate(row_of(&other)).unwrap();
        assert_ne!(builder.key_of(&a), builder.key_of(&c));
    }

    #[test]
    fn link_keys_are_composite_and_types_checked() {
        let builder = RowBuilder::new(&LINKS, 3, 0);
        let link =
            json!({"source_id": "a", "target_id": "b", "user_id": "u", "link_type": "causes"});
        let row = builder.validate(row_of(&link)).unwrap();
        assert_eq!(builder.key_of(&row), "a\u{1f}b\u{1f}causes");
        let bad = json!({"source_id": "a", "target_id": "b", "user_id": "u", "link_type": "likes"});
        assert!(
            builder
                .validate(row_of(&bad))
                .unwrap_err()
                .reason
                .contains("likes")
        );
    }
}
