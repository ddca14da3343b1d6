//! Column updates as Lance data overlays, and their fold.
//!
//! A column update through Lance's `RewriteColumns` writes, for every fragment holding a
//! matched row, a new file of the updated columns for every row of that fragment: `scores`
//! recomputing a quarter of `memories` each night touched every fragment and rewrote the
//! columns of the whole table, and each night's copy stayed on disk for the version window
//! (about 0.7 MB a night, a tenth of the window's bytes on day 365 of `bench year`). A data
//! overlay holds only the cells given: the new values of the matched rows, keyed by their
//! physical place in their fragment, which reads merge over the base files (newest overlay
//! first). Rows keep their place, so no row is deleted and no index is remapped; an index
//! built before an overlay leaves the rows it covers to the flat path until the index is
//! next updated.
//!
//! Each overlay is one more file a read of its columns opens, so a fragment's overlays are
//! folded (`fold_overlays`, run by `optimize`) once it has `FOLD_OVERLAYS` of them: its
//! overlaid columns are written again whole for that fragment, one `RewriteColumns` commit,
//! which retires every overlay of those columns. A day of `bench year` adds three or four
//! overlays to each large fragment of `memories` (a night's scores, the recalls that
//! activated a row of it), so a fragment's columns are rewritten about weekly, not nightly.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use arrow::array::{Array, AsArray, RecordBatch, RecordBatchReader, UInt64Array};
use arrow::compute::{concat_batches, take};
use futures::TryStreamExt;

use super::{Result, Store, StoreError, WriteStats};
use crate::model::schema::TableSpec;

/// Overlays a fragment may carry before `fold_overlays` writes its overlaid columns again
/// whole.
pub const FOLD_OVERLAYS: usize = 24;

/// Keys an update looks up through a filter (the key's index); more, and the key column is
/// scanned whole, which costs less than a filter that long.
const FILTERED_LOOKUP: usize = 1024;

/// A key column's values quoted for a SQL `IN` list.
fn quoted(keys: &[&str]) -> String {
    keys.iter()
        .map(|k| format!("'{}'", k.replace('\'', "''")))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Store {
    /// Replaces some columns of existing rows, matched on the table's key, in one commit.
    /// The batches hold the key column and the columns to replace; no row is inserted, keys
    /// no row has are skipped, and a key given twice takes its last values. Written as data
    /// overlays (see the module's notes): the cells given, not the fragments' whole columns.
    /// A table with a composite key, or one whose files cannot carry overlays, takes a
    /// `RewriteColumns` update instead.
    pub async fn update_columns(
        &self,
        spec: &TableSpec,
        rows: Box<dyn RecordBatchReader + Send>,
    ) -> Result<WriteStats> {
        let schema = rows.schema();
        let batches: Vec<RecordBatch> = rows.collect::<std::result::Result<_, _>>()?;
        let batch = concat_batches(&schema, &batches)?;
        let reader = |b: RecordBatch| {
            let schema = b.schema();
            Box::new(arrow::array::RecordBatchIterator::new([Ok(b)], schema))
        };
        if spec.key.len() != 1 {
            return self.rewrite_columns(spec, reader(batch)).await;
        }
        match self.overlay_columns(spec, &batch).await {
            Err(StoreError::Lance(lancedb::Error::Lance {
                source: lance::Error::NotSupported { .. },
            })) => self.rewrite_columns(spec, reader(batch)).await,
            done => done,
        }
    }

    async fn overlay_columns(&self, spec: &TableSpec, batch: &RecordBatch) -> Result<WriteStats> {
        use lance::dataset::WriteDestination;
        use lance::dataset::transaction::Operation;
        let key = spec.key[0];
        let table = self.table(spec.name).await?;
        let dataset = table
            .dataset()
            .ok_or_else(|| StoreError::NotNative {
                uri: self.uri.clone(),
            })?
            .get()
            .await?;
        let read_version = dataset.version().version;
        let keys = batch
            .column_by_name(key)
            .and_then(|c| c.as_string_opt::<i32>())
            .ok_or_else(|| {
                StoreError::Rows(format!("{}: no string key column {key}", spec.name))
            })?;
        // The last row given for each key.
        let mut given: HashMap<&str, u32> = HashMap::with_capacity(keys.len());
        for (i, k) in keys.iter().enumerate() {
            if let Some(k) = k {
                given.insert(k, i as u32);
            }
        }
        // Each given row's address, by fragment, in address order.
        let mut scan = dataset.scan();
        scan.project(&[key]).map_err(lancedb::Error::from)?;
        scan.with_row_address();
        if given.len() <= FILTERED_LOOKUP {
            let mut wanted: Vec<&str> = given.keys().copied().collect();
            wanted.sort_unstable();
            if wanted.is_empty() {
                return Ok(WriteStats {
                    version: read_version,
                    ..Default::default()
                });
            }
            scan.filter(&format!("{key} IN ({})", quoted(&wanted)))
                .map_err(lancedb::Error::from)?;
        }
        let found: Vec<RecordBatch> = scan
            .try_into_stream()
            .await
            .map_err(lancedb::Error::from)?
            .try_collect()
            .await
            .map_err(lancedb::Error::from)?;
        let mut by_fragment: BTreeMap<u32, Vec<(u64, u32)>> = BTreeMap::new();
        for b in &found {
            let (Some(ids), Some(addrs)) = (
                b.column_by_name(key).and_then(|c| c.as_string_opt::<i32>()),
                b.column_by_name("_rowaddr")
                    .and_then(|c| c.as_primitive_opt::<arrow::datatypes::UInt64Type>()),
            ) else {
                continue;
            };
            for (id, addr) in ids.iter().zip(addrs.iter()) {
                if let (Some(row), Some(addr)) = (id.and_then(|id| given.get(id)), addr) {
                    by_fragment
                        .entry((addr >> 32) as u32)
                        .or_default()
                        .push((addr, *row));
                }
            }
        }
        let columns: Vec<&str> = batch
            .schema_ref()
            .fields()
            .iter()
            .map(|f| f.name().as_str())
            .filter(|n| *n != key)
            .collect();
        let fields = dataset
            .schema()
            .project(&columns)
            .map_err(lancedb::Error::from)?;
        let mut groups = Vec::new();
        let mut updated = 0u64;
        for (fragment, mut rows) in by_fragment {
            rows.sort_unstable();
            rows.dedup_by_key(|r| r.0);
            updated += rows.len() as u64;
            let cells = self.overlay_batch(batch, &columns, &rows)?;
            let Some(file) = dataset.get_fragment(fragment as usize) else {
                continue;
            };
            let mut writer = file
                .write_overlay(&fields)
                .await
                .map_err(|e| lancedb::Error::from(lance::Error::from(e)))?;
            if let Err(e) = writer.write_batch(&cells).await {
                writer.abort().await;
                return Err(lancedb::Error::from(lance::Error::from(e)).into());
            }
            if let Some(group) = writer
                .finish()
                .await
                .map_err(|e| lancedb::Error::from(lance::Error::from(e)))?
            {
                groups.push(group);
            }
        }
        if groups.is_empty() {
            return Ok(WriteStats {
                version: read_version,
                ..Default::default()
            });
        }
        let session = dataset.session();
        let done = lance::Dataset::commit(
            WriteDestination::Dataset(dataset),
            Operation::DataOverlay { groups },
            Some(read_version),
            None,
            None,
            session,
            false,
        )
        .await
        .map_err(lancedb::Error::from)?;
        Ok(WriteStats {
            inserted: 0,
            updated,
            version: done.version().version,
        })
    }

    /// One fragment's overlay cells: `_rowaddr` and `columns` of the given rows, in address
    /// order.
    fn overlay_batch(
        &self,
        batch: &RecordBatch,
        columns: &[&str],
        rows: &[(u64, u32)],
    ) -> Result<RecordBatch> {
        let at = arrow::array::UInt32Array::from_iter_values(rows.iter().map(|r| r.1));
        let mut fields = vec![Arc::new(arrow::datatypes::Field::new(
            "_rowaddr",
            arrow::datatypes::DataType::UInt64,
            false,
        ))];
        let mut values: Vec<Arc<dyn Array>> = vec![Arc::new(UInt64Array::from_iter_values(
            rows.iter().map(|r| r.0),
        ))];
        for name in columns {
            let (i, field) = batch
                .schema_ref()
                .column_with_name(name)
                .map(|(i, f)| (i, f.clone()))
                .ok_or_else(|| StoreError::Rows(format!("no column {name}")))?;
            fields.push(Arc::new(field));
            values.push(take(batch.column(i), &at, None)?);
        }
        let schema = Arc::new(arrow::datatypes::Schema::new(fields));
        Ok(RecordBatch::try_new(schema, values)?)
    }

    /// Writes again whole, for each fragment of table `spec` carrying at least `at`
    /// overlays, the columns its overlays hold (one `RewriteColumns` commit), which retires
    /// those overlays. Returns the fragments folded.
    pub async fn fold_overlays(&self, spec: &TableSpec, at: usize) -> Result<usize> {
        let table = self.table(spec.name).await?;
        let Some(wrapper) = table.dataset() else {
            return Ok(0);
        };
        let dataset = wrapper.get().await?;
        let schema = dataset.schema();
        let mut fields: Vec<String> = Vec::new();
        let mut fragments = Vec::new();
        for fragment in dataset.get_fragments() {
            let meta = fragment.metadata();
            if meta.overlays.len() < at.max(1) {
                continue;
            }
            for overlay in &meta.overlays {
                for id in overlay.data_file.fields.iter().filter(|id| **id >= 0) {
                    if let Some(field) = schema.field_by_id(*id)
                        && !fields.contains(&field.name)
                    {
                        fields.push(field.name.clone());
                    }
                }
            }
            fragments.push(meta.clone());
        }
        if fragments.is_empty() || fields.is_empty() {
            return Ok(0);
        }
        let folded = fragments.len();
        let mut columns: Vec<String> = spec.key.iter().map(|k| k.to_string()).collect();
        columns.extend(
            fields
                .into_iter()
                .filter(|f| !spec.key.contains(&f.as_str())),
        );
        let mut scan = dataset.scan();
        scan.project(&columns).map_err(lancedb::Error::from)?;
        scan.with_fragments(fragments);
        let stream = scan.try_into_stream().await.map_err(lancedb::Error::from)?;
        let batches: Vec<RecordBatch> = stream.try_collect().await.map_err(lancedb::Error::from)?;
        let Some(schema) = batches.first().map(|b| b.schema()) else {
            return Ok(0); // every row of those fragments deleted: compaction drops them
        };
        let reader = arrow::array::RecordBatchIterator::new(batches.into_iter().map(Ok), schema);
        self.rewrite_columns(spec, Box::new(reader)).await?;
        Ok(folded)
    }
}
