//! Table upkeep: what each table holds on disk (versions, fragments, data files, bytes) and
//! `memlife optimize`'s three steps on one table: compaction of small fragments, index
//! catch-up, and removal of versions older than a cutoff. Each step is one Lance operation:
//! compaction and index updates are commits (a reader sees all or none of them); version
//! removal deletes only files no kept version refers to, and never the latest version.

use std::collections::{BTreeMap, HashMap, HashSet};

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::{Result, Store};

/// Segments an index may have before its deltas are merged into one, when the rows each
/// segment covers are unknown (a table Lance does not open natively). Each weekly `optimize`
/// adds at most one; a query reads each segment, so a few are cheap, dozens are not.
pub const MAX_INDEX_SEGMENTS: u32 = 8;

/// Rows the deltas of an index (every segment but its oldest, with the rows about to be
/// folded in) may cover, as a share of its oldest segment's, and still be merged apart from
/// it. Past the share, every segment is merged into one.
pub const DELTA_SHARE: f64 = 0.25;

/// Segments a merge takes in: every one an index may have (at most `MAX_INDEX_SEGMENTS`,
/// more only in a store whose deltas an older memlife left).
const MERGE_ALL: usize = 64;

/// An index's segments, oldest first, as a fold decides on them.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Segments {
    pub count: u32,
    /// Rows covered by the oldest segment and by all the others, when known.
    pub rows: Option<(u64, u64)>,
}

/// What folding `unindexed` rows into an index takes: nothing (`None`), a new delta segment
/// (`Some(0)`: Lance's append) or a merge of the newest `n` segments with the new rows
/// (`Some(n)`; `n` = every segment merges them all).
///
/// An index kept in one segment (`one_segment`) is merged whole whenever it has new rows or
/// more than one segment. Any other is kept as its oldest segment and one delta: the new
/// rows and the deltas are merged into one delta (a rewrite of the rows since the last full
/// merge only) while they cover at most `DELTA_SHARE` of the oldest segment's rows, and
/// everything into one segment past that. A lookup opens two segments, not one per weekly
/// delta (six on `links` by day 365 of the year bench); a full merge, which the version
/// window keeps a copy of, comes each time the index has grown by a quarter. Without row
/// counts, deltas pile up to `MAX_INDEX_SEGMENTS` and are then merged.
pub fn segments_to_merge(segments: Segments, unindexed: usize, one_segment: bool) -> Option<usize> {
    let count = segments.count;
    if one_segment {
        return (unindexed > 0 || count > 1).then_some(count.max(1) as usize);
    }
    if unindexed == 0 && count <= 2 {
        return None;
    }
    if count <= 1 {
        return Some(0);
    }
    match segments.rows {
        Some((oldest, deltas)) => {
            if (deltas + unindexed as u64) as f64 <= oldest as f64 * DELTA_SHARE {
                Some(count as usize - 1)
            } else {
                Some(count as usize)
            }
        }
        None if unindexed == 0 => None,
        None if count + 1 >= MAX_INDEX_SEGMENTS => Some(count as usize),
        None => Some(0),
    }
}

/// Whether an index of this kind can be kept in one segment (`Store::update_indexes`):
/// every kind but vector indexes, which always take deltas, since merging one rewrites its
/// partitions whole.
fn kept_whole(kind: &lancedb::index::IndexType) -> bool {
    use lancedb::index::IndexType;
    matches!(
        kind,
        IndexType::FTS | IndexType::BTree | IndexType::Bitmap | IndexType::LabelList
    )
}

/// What one table holds.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct TableStorage {
    pub table: String,
    /// The current version.
    pub version: u64,
    /// Versions still readable (each commit makes one; `undo` reads them).
    pub versions: usize,
    /// When the oldest readable version was written (RFC 3339).
    pub oldest_version_at: Option<String>,
    pub rows: usize,
    pub fragments: usize,
    /// Fragments under Lance's compaction target: what `optimize` merges.
    pub small_fragments: usize,
    /// Data files on disk, of every version (local folders only; `None` on object storage).
    pub data_files: Option<usize>,
    /// Files a full read of the current version opens: its fragments' data files (a column
    /// update adds one to each fragment it touches) and deletion files. Each costs a query
    /// an open and a metadata read, so this, not `data_files`, is what slows reads.
    pub open_files: usize,
    /// Bytes on disk, of every version, indexes and manifests included (local folders; on
    /// object storage the current version's data and index bytes, from the manifest).
    pub bytes: u64,
    /// The current version's data and index bytes (from the manifest).
    pub live_bytes: u64,
    /// The table's indexes: how many segments each has and how many rows none covers.
    pub indexes: Vec<IndexHealth>,
}

/// One index of a table, as queries find it.
#[derive(Clone, Debug, Default, Serialize, PartialEq)]
pub struct IndexHealth {
    pub name: String,
    pub columns: Vec<String>,
    /// Lance's index type (BTree, Bitmap, Inverted, IvfPq, ...).
    pub kind: String,
    /// Segments (a base and the deltas folded in since): a query reads each.
    pub segments: u32,
    /// Rows written since the index last took rows in: a query scans these.
    pub unindexed_rows: usize,
}

/// What `optimize_table` did to one table.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Tidied {
    pub fragments_removed: usize,
    pub fragments_added: usize,
    pub indexes_updated: usize,
    pub versions_removed: u64,
    pub files_removed: u64,
    pub bytes_removed: u64,
}

/// Counts files under `dir` (recursively) and their bytes; `data_dir` names the subfolder whose
/// files are counted as data files.
fn walk(dir: &std::path::Path) -> (usize, u64, usize) {
    let mut files = 0;
    let mut bytes = 0;
    let mut data_files = 0;
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (0, 0, 0);
    };
    for entry in entries.flatten() {
        let path = entry.path();
        match entry.metadata() {
            Ok(m) if m.is_dir() => {
                let (f, b, d) = walk(&path);
                files += f;
                bytes += b;
                data_files += d;
                if path.file_name().is_some_and(|n| n == "data") {
                    data_files += f;
                }
            }
            Ok(m) => {
                files += 1;
                bytes += m.len();
            }
            Err(_) => {}
        }
    }
    (files, bytes, data_files)
}

/// When compaction rewrites a fragment (`[retention]` in the configuration). Rewriting a
/// large fragment copies every column of it, embeddings included, and the old copy stays on
/// disk while versions in the retention window use it: a store compacted whole every week
/// holds about two extra copies of itself. So large fragments are left alone until their
/// deleted rows are worth a rewrite, and only small ones merge. (Column updates, such as
/// `scores` writes, replace the columns' files of a fragment, not the fragment.)
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CompactionPolicy {
    /// A fragment is rewritten whole once more than this fraction of its rows were deleted.
    pub deleted_fraction: f64,
    /// Fragments of at least this fraction of the table's rows (and `min_rows`) are not
    /// merged.
    pub fragment_fraction: f64,
    /// Fragments of at least this many rows are left alone whatever the fraction.
    pub min_rows: usize,
}

impl CompactionPolicy {
    /// The nightly merge (`optimize --light`): only fragments under 64 rows, the small ones
    /// a day's commits append (each recall's activation, each integrate round, ...), merge
    /// with their small neighbours; no fragment is rewritten for its deleted rows. A night's
    /// merge is left alone by the next (under 256 rows, the threshold of a full run, the
    /// same ~200-row fragment of `entities` and of `memories`, embeddings and all, was
    /// rewritten every night, and the window kept each copy: a megabyte a night), so what it
    /// rewrites is the day's rows, and reads between the weekly optimizes open a fragment
    /// a day, not a dozen.
    pub const LIGHT: CompactionPolicy = CompactionPolicy {
        deleted_fraction: 2.0,
        fragment_fraction: 0.0,
        min_rows: 64,
    };

    /// The merge a log table's writer runs as small fragments gather
    /// (`Store::merge_small_tail`): fragments under 512 rows merge into ones of up to 1,024,
    /// and one more than half deleted is rewritten (`activations`' rows are replaced as
    /// recalls repeat: with the light merge's 64 rows, a day of 1,000 recalls left 143
    /// fragments of them).
    pub const TAIL: CompactionPolicy = CompactionPolicy {
        deleted_fraction: 0.5,
        fragment_fraction: 0.0,
        min_rows: 1024,
    };

    /// A full run's floor: fragments under 256 rows always merge.
    pub const MIN_ROWS: usize = 256;

    /// The rows a fragment needs to be left alone, for a table of `rows` rows.
    pub fn fragment_rows(&self, rows: usize) -> usize {
        ((rows as f64 * self.fragment_fraction) as usize).clamp(self.min_rows, 1 << 20)
    }

    /// The fragments compaction leaves alone, for a table of `rows` rows: those of at least
    /// half the rows `fragment_rows` asks for, unless their deleted rows are past
    /// `deleted_fraction`. Lance merges every fragment under the target with its neighbours,
    /// and the target grows with the table: a fragment written at a quarter of a 10,000-row
    /// table is under a quarter of a 14,000-row one, and was merged again, embeddings and
    /// all, a copy the version window kept (19 of the 85 MB of the year bench's `memories` on
    /// day 365). So a fragment takes part in a merge only while it is under half the
    /// target: what merges is the week's small fragments and the tail they grow into, never
    /// a settled fragment. A fragment an index's oldest segment covers (`in_base`), whose
    /// merge would also remap, so copy, that whole segment, has settled at half that: as
    /// the table grows, it merges again once the table has doubled, not as soon as the
    /// target passes it. On day 365 of a year bench, 8 MB of the `audit_log` data files only
    /// old versions read were such merges of fragments the growing table had unsettled,
    /// beside 8.5 MB of old index segments; with this rule the year's `audit_log` was 32.7 MB
    /// on that day instead of 42.5 (BENCHMARKS.md, session 44). Small ones still merge: the
    /// many small fragments an import leaves under an index built over them.
    pub fn left_alone(&self, rows: usize, fragments: &[FragmentRows]) -> Vec<u32> {
        let settled = self.fragment_rows(rows).div_ceil(2);
        let settled_in_base = settled.div_ceil(2);
        fragments
            .iter()
            .filter(|f| {
                let deleted = f.deleted as f64 > f.physical as f64 * self.deleted_fraction;
                let at_least = if f.in_base { settled_in_base } else { settled };
                f.physical >= at_least && !deleted
            })
            .filter_map(|f| u32::try_from(f.id).ok())
            .collect()
    }

    fn options(
        &self,
        rows: usize,
        fragments: &[FragmentRows],
    ) -> lancedb::table::CompactionOptions {
        lancedb::table::CompactionOptions {
            target_rows_per_fragment: self.fragment_rows(rows),
            materialize_deletions: true,
            materialize_deletions_threshold: self.deleted_fraction as f32,
            excluded_fragment_ids: self.left_alone(rows, fragments),
            ..Default::default()
        }
    }
}

/// One fragment's rows, as compaction decides on it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FragmentRows {
    pub id: u64,
    /// Rows written, deleted ones included.
    pub physical: usize,
    pub deleted: usize,
    /// Covered by the oldest segment of one of the table's indexes
    /// (`Store::index_base_fragments`): it settles at half the rows (`left_alone`), since
    /// compaction remaps, so copies, every segment covering what it rewrites.
    pub in_base: bool,
}

impl Store {
    /// The local folder of a table, when the database is a local folder.
    fn table_dir(&self, table: &str) -> Option<std::path::PathBuf> {
        if self.uri.contains("://") {
            return None;
        }
        Some(std::path::Path::new(&self.uri).join(format!("{table}.lance")))
    }

    /// Versions, fragments, files and bytes of one table.
    pub async fn table_storage(&self, name: &str) -> Result<TableStorage> {
        self.storage_of(name, true).await
    }

    /// `table_storage` of the current version alone: without the versions (each a manifest
    /// to read) and the files on disk (a walk of every version's files), whose cost grows
    /// with the store's age. `versions` is 0, `oldest_version_at` and `data_files` `None`,
    /// `bytes` the current version's. What a light `optimize` reads before and after.
    pub async fn current_storage(&self, name: &str) -> Result<TableStorage> {
        self.storage_of(name, false).await
    }

    async fn storage_of(&self, name: &str, history: bool) -> Result<TableStorage> {
        let table = self.table(name).await?;
        let stats = table.stats().await?;
        let versions = if history {
            table.list_versions().await?
        } else {
            Vec::new()
        };
        let oldest = versions.iter().map(|v| v.timestamp).min();
        let mut indexes = Vec::new();
        for index in table.list_indices().await? {
            let stats = table.index_stats(&index.name).await?;
            indexes.push(IndexHealth {
                kind: index.index_type.to_string(),
                segments: stats.as_ref().and_then(|s| s.num_indices).unwrap_or(1),
                unindexed_rows: stats.map_or(0, |s| s.num_unindexed_rows),
                name: index.name,
                columns: index.columns,
            });
        }
        let open_files = fragments_of(&table)
            .await?
            .iter()
            .map(|f| f.files.len() + usize::from(f.deletion_file.is_some()))
            .sum();
        let on_disk = self
            .table_dir(name)
            .filter(|d| history && d.exists())
            .map(|d| {
                let (_, bytes, data_files) = walk(&d);
                (bytes, data_files)
            });
        Ok(TableStorage {
            table: name.to_string(),
            version: table.version().await?,
            versions: versions.len(),
            oldest_version_at: oldest.map(|t| t.to_rfc3339()),
            rows: stats.num_rows,
            fragments: stats.fragment_stats.num_fragments,
            small_fragments: stats.fragment_stats.num_small_fragments,
            data_files: on_disk.map(|(_, d)| d),
            open_files,
            bytes: on_disk.map_or(stats.total_bytes as u64, |(b, _)| b),
            live_bytes: stats.total_bytes as u64,
            indexes,
        })
    }

    /// `table_storage` of every table, in schema order.
    pub async fn storage_of_all_tables(&self) -> Result<Vec<TableStorage>> {
        let mut out = Vec::new();
        for spec in crate::model::schema::ALL_TABLES {
            out.push(self.table_storage(spec.name).await?);
        }
        Ok(out)
    }

    /// Whether `version` of a table can still be read (`optimize` removes old ones).
    pub async fn has_version(&self, name: &str, version: u64) -> Result<bool> {
        let table = self.table(name).await?;
        // Listed by name, no manifest read (as `versions_before` lists them).
        if let Some(wrapper) = table.dataset() {
            let dataset = wrapper.get().await?;
            let refs = dataset.version_refs().await.map_err(lancedb::Error::from)?;
            return Ok(refs.iter().any(|r| r.version == version));
        }
        Ok(table
            .list_versions()
            .await?
            .iter()
            .any(|v| v.version == version))
    }

    /// When each readable version of a table was written.
    pub async fn version_times(&self, name: &str) -> Result<Vec<(u64, DateTime<Utc>)>> {
        let table = self.table(name).await?;
        Ok(table
            .list_versions()
            .await?
            .iter()
            .map(|v| (v.version, v.timestamp))
            .collect())
    }

    /// The versions of a table written before `before`, oldest first, never the latest: what
    /// `remove_versions_before` removes. Versions are numbered in commit order, each written
    /// after the one before, so they are listed by name (no manifest read) and the first one
    /// written at or after `before` is found by reading a manifest per halving, not every
    /// manifest: the window holds every commit of two weeks (217 versions of `memories` on
    /// day 365 of `bench year`, thousands for an agent that recalls all day), and reading each
    /// one every night took a third of a light `optimize` (0.60 s against 0.40 s on a copy of
    /// that store, BENCHMARKS.md, session 43). The search trusts the versions' times to rise
    /// with their numbers, as they do when the writers share a clock; across hosts whose
    /// clocks disagree, a version at the window's edge may be named a night early or late
    /// (Lance's cleanup decides by each one's own time). For a table Lance does not open
    /// natively, every version's time is read.
    pub async fn versions_before(&self, name: &str, before: DateTime<Utc>) -> Result<Vec<u64>> {
        let table = self.table(name).await?;
        let Some(wrapper) = table.dataset() else {
            let latest = table.version().await?;
            return Ok(self
                .version_times(name)
                .await?
                .into_iter()
                .filter(|(v, at)| *at < before && *v != latest)
                .map(|(v, _)| v)
                .collect());
        };
        let dataset = wrapper.get().await?;
        let latest = dataset
            .latest_version_id()
            .await
            .map_err(lancedb::Error::from)?;
        let mut versions: Vec<u64> = dataset
            .version_refs()
            .await
            .map_err(lancedb::Error::from)?
            .into_iter()
            .map(|r| r.version)
            .filter(|v| *v < latest)
            .collect();
        let (mut low, mut high) = (0, versions.len());
        while low < high {
            let mid = (low + high) / 2;
            let written = dataset
                .checkout_version(versions[mid])
                .await
                .map_err(lancedb::Error::from)?
                .version()
                .timestamp;
            if written < before {
                low = mid + 1;
            } else {
                high = mid;
            }
        }
        versions.truncate(low);
        Ok(versions)
    }

    /// Compacts a table by `policy`, in one commit (none when nothing qualifies): small
    /// fragments are merged with their neighbours, and a fragment with too many deleted rows
    /// is rewritten whole. Returns the fragments removed and added. The fragments in `base`
    /// (`index_base_fragments`) settle at half the rows of the others
    /// (`CompactionPolicy::left_alone`).
    pub async fn compact_table(
        &self,
        name: &str,
        policy: &CompactionPolicy,
        base: &HashSet<u64>,
    ) -> Result<(usize, usize)> {
        let table = self.table(name).await?;
        let rows = table.count_rows(None).await?;
        let fragments = fragment_rows(&fragments_of(&table).await?, base);
        let options = policy.options(rows, &fragments);
        tracing::debug!(
            table = name,
            rows,
            target = options.target_rows_per_fragment,
            fragments = ?fragments.iter().map(|f| (f.id, f.physical, f.deleted)).collect::<Vec<_>>(),
            left_alone = ?options.excluded_fragment_ids,
            "compaction plan"
        );
        let done = table
            .optimize(lancedb::table::OptimizeAction::Compact {
                options,
                remap_options: None,
            })
            .await?;
        Ok(done
            .compaction
            .map_or((0, 0), |c| (c.fragments_removed, c.fragments_added)))
    }

    /// Folds rows written since each index last took rows in into it (no retraining); with
    /// `one_segment`, every index but the vector ones ends in one segment. Returns how many
    /// indexes the table has. See `fold_into_indexes`.
    pub async fn update_indexes(&self, name: &str, one_segment: bool) -> Result<usize> {
        let table = self.table(name).await?;
        let names: Vec<(String, bool)> = table
            .list_indices()
            .await?
            .into_iter()
            .map(|i| {
                let one = one_segment && kept_whole(&i.index_type);
                (i.name, one)
            })
            .collect();
        let count = names.len();
        self.fold_into_indexes(name, &names).await?;
        Ok(count)
    }

    /// Folds the unindexed rows of a table into the named indexes (each named with whether
    /// it is kept in one segment), one commit per kind of fold (`segments_to_merge`): an
    /// index with no unindexed rows and at most two segments is left alone (merged, if kept
    /// in one segment and it has several). Lance rewrites every segment it merges, and each
    /// rewrite stays on disk while the version window holds it: folding a week's rows into
    /// a single segment copied each index whole every week (39 of the 155 MB of the year
    /// bench's store on day 365 were such copies), so only the few indexes a search reads
    /// segment by segment are kept in one; the others keep their oldest segment and one
    /// delta that takes the new rows.
    pub async fn fold_into_indexes(&self, name: &str, names: &[(String, bool)]) -> Result<()> {
        let table = self.table(name).await?;
        // Rows per segment, read once and only when a base-and-delta index needs them.
        let mut rows: Option<HashMap<String, (u64, u64)>> = None;
        // Merge size -> the indexes folded so (0: a delta appended).
        let mut folds: BTreeMap<usize, Vec<String>> = BTreeMap::new();
        for (index, one_segment) in names {
            let Some(stats) = table.index_stats(index).await? else {
                continue;
            };
            let count = stats.num_indices.unwrap_or(1);
            let unindexed = stats.num_unindexed_rows;
            if !one_segment && count >= 2 && (unindexed > 0 || count > 2) && rows.is_none() {
                rows = Some(segment_rows(&table).await?);
            }
            let segments = Segments {
                count,
                rows: rows.as_ref().and_then(|r| r.get(index).copied()),
            };
            let fold = segments_to_merge(segments, unindexed, *one_segment);
            if let Some(n) = fold {
                // Every segment: Lance merges the newest N, and no index here has more.
                let n = if n > 0 && n >= count as usize {
                    MERGE_ALL
                } else {
                    n
                };
                folds.entry(n).or_default().push(index.clone());
            }
        }
        use lancedb::table::{OptimizeAction, OptimizeOptions};
        for (n, indexes) in folds {
            let options = match n {
                0 => OptimizeOptions::append(),
                n => OptimizeOptions::merge(n),
            };
            let options = options.index_names(indexes);
            table.optimize(OptimizeAction::Index(options)).await?;
        }
        Ok(())
    }

    /// Removes the versions written before `cutoff` (never the latest) and the files only
    /// they referred to. Returns (versions, files, bytes) removed.
    pub async fn remove_versions_before(
        &self,
        name: &str,
        cutoff: DateTime<Utc>,
    ) -> Result<(u64, u64, u64)> {
        let table = self.table(name).await?;
        // The handle may predate this run's own commits (compaction): prune from the latest.
        table.checkout_latest().await?;
        let done = table.optimize_prune_before(cutoff, None, None).await?;
        Ok(done.prune.map_or((0, 0, 0), |p| {
            (
                p.old_versions,
                p.data_files_removed
                    + p.transaction_files_removed
                    + p.index_files_removed
                    + p.deletion_files_removed,
                p.bytes_removed,
            )
        }))
    }
}

/// Fragments the `TAIL` merge would take that a log table may gather between `optimize`
/// runs before the writer that adds one merges them (`Store::merge_small_tail`).
const SMALL_TAIL: usize = 32;

impl Store {
    /// After a commit to a table written many times a day (`runs`, by every job and every
    /// run-due; `audit_log` and `activations`, by every recall): when the table holds
    /// `SMALL_TAIL` fragments or more that the `TAIL` merge would take (under 512 rows, or
    /// more than half deleted), merges them, so that a day of small commits leaves tens of
    /// fragments, not thousands. Every Lance commit adds a fragment until compaction merges
    /// it, and readers open every fragment: after 1,000 recalls in a day, each recall and
    /// each of the night's jobs took several times as long (BENCHMARKS.md, session 53). The
    /// merge changes no row. Returns whether it merged; a concurrent writer's commit
    /// preempting it, or any error, leaves the fragments for later (logged), since the write
    /// it follows has landed.
    pub async fn merge_small_tail(&self, name: &str) -> bool {
        match self.merge_tail_if_long(name).await {
            Ok(merged) => merged,
            Err(e) => {
                tracing::warn!(table = name, "small fragments left for optimize: {e}");
                false
            }
        }
    }

    async fn merge_tail_if_long(&self, name: &str) -> Result<bool> {
        let policy = CompactionPolicy::TAIL;
        let table = self.table(name).await?;
        let fragments = fragment_rows(&fragments_of(&table).await?, &HashSet::new());
        if fragments.len() - policy.left_alone(0, &fragments).len() < SMALL_TAIL {
            return Ok(false);
        }
        self.compact(name, &policy).await
    }
}

/// What compaction decides on, of each fragment; those in `base` are `in_base`.
fn fragment_rows(
    fragments: &[lance::table::format::Fragment],
    base: &HashSet<u64>,
) -> Vec<FragmentRows> {
    fragments
        .iter()
        .map(|f| FragmentRows {
            id: f.id,
            in_base: base.contains(&f.id),
            physical: f.physical_rows.unwrap_or(0),
            // A deletion file that does not say how many rows it deletes: Lance reads it
            // and decides.
            deleted: f
                .deletion_file
                .as_ref()
                .map_or(0, |d| d.num_deleted_rows.unwrap_or(usize::MAX)),
        })
        .collect()
}

/// The current version's fragments (none for a table Lance does not open natively).
async fn fragments_of(table: &lancedb::Table) -> Result<Vec<lance::table::format::Fragment>> {
    Ok(match table.dataset() {
        Some(dataset) => dataset
            .get()
            .await?
            .get_fragments()
            .iter()
            .map(|f| f.metadata().clone())
            .collect(),
        None => Vec::new(),
    })
}

impl Store {
    /// The fragments the oldest segment of some index of the table covers (none for a table
    /// Lance does not open natively).
    pub async fn index_base_fragments(&self, name: &str) -> Result<HashSet<u64>> {
        let table = self.table(name).await?;
        let Some(dataset) = table.dataset() else {
            return Ok(HashSet::new());
        };
        let dataset = dataset.get().await?;
        Ok(segments_oldest_first(&dataset)
            .await?
            .values()
            .filter_map(|segments| segments.first()?.fragment_bitmap.as_ref())
            .flat_map(|bitmap| bitmap.iter().map(u64::from))
            .collect())
    }
}

/// Each index's segments by index name, oldest first.
async fn segments_oldest_first(
    dataset: &lance::Dataset,
) -> Result<HashMap<String, Vec<lance::table::format::IndexMetadata>>> {
    use lance::index::DatasetIndexExt;
    let indices = dataset.load_indices().await.map_err(lancedb::Error::from)?;
    let mut segments: HashMap<String, Vec<lance::table::format::IndexMetadata>> = HashMap::new();
    for index in indices.iter() {
        segments
            .entry(index.name.clone())
            .or_default()
            .push(index.clone());
    }
    for list in segments.values_mut() {
        list.sort_by_key(|segment| segment.dataset_version);
    }
    Ok(segments)
}

/// Rows each index's oldest segment covers and rows its other segments cover, by index
/// name (from the fragments each segment was built over that the table still has).
/// Empty for a table Lance does not open natively.
async fn segment_rows(table: &lancedb::Table) -> Result<HashMap<String, (u64, u64)>> {
    let Some(dataset) = table.dataset() else {
        return Ok(HashMap::new());
    };
    let dataset = dataset.get().await?;
    let fragment_rows: HashMap<u32, u64> = dataset
        .get_fragments()
        .iter()
        .map(|f| {
            let rows = f.metadata().physical_rows.unwrap_or(0) as u64;
            (f.id() as u32, rows)
        })
        .collect();
    let rows_of = |segment: &lance::table::format::IndexMetadata| -> u64 {
        segment.fragment_bitmap.as_ref().map_or(0, |bitmap| {
            bitmap.iter().filter_map(|id| fragment_rows.get(&id)).sum()
        })
    };
    Ok(segments_oldest_first(&dataset)
        .await?
        .into_iter()
        .map(|(name, list)| {
            let oldest = list.first().map_or(0, rows_of);
            let others = list.iter().skip(1).map(rows_of).sum();
            (name, (oldest, others))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::{
        CompactionPolicy, DELTA_SHARE, FragmentRows, MAX_INDEX_SEGMENTS, Segments,
        segments_to_merge,
    };

    fn fragment(id: u64, physical: usize, deleted: usize) -> FragmentRows {
        FragmentRows {
            id,
            physical,
            deleted,
            in_base: false,
        }
    }

    #[test]
    fn settled_fragments_stay_out_of_a_merge_until_their_deletions_call_for_one() {
        let policy = CompactionPolicy {
            deleted_fraction: 0.2,
            fragment_fraction: 0.25,
            min_rows: CompactionPolicy::MIN_ROWS,
        };
        // 14,000 rows: the target is 3,500 rows, a fragment of 1,750 or more has settled.
        let fragments = [
            fragment(0, 2_500, 0),   // written at a quarter of 10,000 rows: left alone
            fragment(1, 2_500, 400), // 16% deleted: still left alone
            fragment(2, 2_500, 600), // 24% deleted: rewritten for its deletions
            fragment(3, 1_749, 0),   // the tail: merges with the week's rows
            fragment(4, 1_750, 0),
            fragment(5, 40, 0),
            fragment(6, 3_000, usize::MAX), // deletions of unknown count: Lance decides
        ];
        assert_eq!(policy.left_alone(14_000, &fragments), vec![0, 1, 4]);
        // On a small table the floor of 256 rows decides: 128 rows have settled.
        assert_eq!(
            policy.left_alone(500, &[fragment(0, 127, 0), fragment(1, 128, 0)]),
            vec![1]
        );
        // The nightly merge never rewrites for deletions, and leaves its own merges alone.
        let light = CompactionPolicy::LIGHT;
        assert_eq!(
            light.left_alone(
                14_000,
                &[
                    fragment(0, 31, 0),
                    fragment(1, 32, 0),
                    fragment(2, 2_500, 2_400)
                ]
            ),
            vec![1, 2]
        );
        // A log table's writer merges what is under 512 rows or more than half deleted.
        let tail = CompactionPolicy::TAIL;
        assert_eq!(
            tail.left_alone(
                0,
                &[
                    fragment(0, 1_024, 500),
                    fragment(1, 1_024, 513),
                    fragment(2, 511, 0),
                    fragment(3, 512, 0),
                ]
            ),
            vec![0, 3]
        );
    }

    #[test]
    fn what_an_index_base_covers_settles_at_half_the_rows() {
        let policy = CompactionPolicy {
            deleted_fraction: 0.2,
            fragment_fraction: 0.25,
            min_rows: CompactionPolicy::MIN_ROWS,
        };
        let base = |id, physical, deleted| FragmentRows {
            in_base: true,
            ..fragment(id, physical, deleted)
        };
        // 14,000 rows: a fragment of 1,750 rows has settled, of 875 if the base covers it.
        let fragments = [
            base(0, 1_000, 0),     // unsettled by the table's growth: left alone
            base(1, 1_000, 300),   // 30% deleted: rewritten, the base remapped
            base(2, 874, 0),       // small: merges
            fragment(3, 1_000, 0), // the delta's: merges
            fragment(4, 40, 0),    // the week's: merges
            fragment(5, 1_750, 0),
        ];
        assert_eq!(policy.left_alone(14_000, &fragments), vec![0, 5]);
    }

    fn known(count: u32, oldest: u64, deltas: u64) -> Segments {
        Segments {
            count,
            rows: Some((oldest, deltas)),
        }
    }

    fn unknown(count: u32) -> Segments {
        Segments { count, rows: None }
    }

    #[test]
    fn new_rows_join_the_one_delta_until_it_outgrows_its_share() {
        // Nothing new, at most a base and a delta: the index is not rewritten at all.
        assert_eq!(segments_to_merge(known(1, 1000, 0), 0, false), None);
        assert_eq!(segments_to_merge(known(2, 1000, 50), 0, false), None);
        // New rows beside one segment: a delta.
        assert_eq!(segments_to_merge(known(1, 1000, 0), 10, false), Some(0));
        // New rows beside a base and a delta: merged with the delta only.
        assert_eq!(segments_to_merge(known(2, 1000, 50), 10, false), Some(1));
        // The deltas an older memlife left are folded into one delta, even with nothing new.
        assert_eq!(segments_to_merge(known(5, 1000, 100), 0, false), Some(4));
        // Past the share the delta may take, everything into one segment.
        let share = (1000.0 * DELTA_SHARE) as u64;
        assert_eq!(
            segments_to_merge(known(2, 1000, share - 10), 10, false),
            Some(1)
        );
        assert_eq!(
            segments_to_merge(known(2, 1000, share - 10), 11, false),
            Some(2)
        );
        assert_eq!(
            segments_to_merge(known(6, 1000, share + 1), 0, false),
            Some(6)
        );
    }

    #[test]
    fn without_row_counts_deltas_pile_up_until_the_segments_are_merged() {
        assert_eq!(segments_to_merge(unknown(1), 0, false), None);
        assert_eq!(segments_to_merge(unknown(5), 0, false), None);
        assert_eq!(segments_to_merge(unknown(1), 10, false), Some(0));
        assert_eq!(
            segments_to_merge(unknown(MAX_INDEX_SEGMENTS - 2), 10, false),
            Some(0)
        );
        // The delta that would make the eighth segment merges them all instead.
        let n = MAX_INDEX_SEGMENTS - 1;
        assert_eq!(segments_to_merge(unknown(n), 10, false), Some(n as usize));
        assert_eq!(segments_to_merge(unknown(20), 1, false), Some(20));
    }

    #[test]
    fn an_index_kept_in_one_segment_merges_whatever_it_lacks() {
        assert_eq!(segments_to_merge(known(1, 1000, 0), 0, true), None);
        assert_eq!(segments_to_merge(known(1, 1000, 0), 10, true), Some(1));
        // Deltas an earlier run left are merged even with nothing new.
        assert_eq!(segments_to_merge(known(3, 1000, 10), 0, true), Some(3));
        assert_eq!(segments_to_merge(unknown(3), 10, true), Some(3));
    }
}
