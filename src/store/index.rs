//! Vector indexes on a table's embedding column (Lance IVF-PQ and IVF-HNSW-SQ, cosine), and
//! approximate nearest-neighbour queries through them, for stores too large for exact search.

use arrow::array::{Array, AsArray, RecordBatch};
use futures::TryStreamExt;
use lancedb::DistanceType;
use lancedb::index::Index;
use lancedb::index::vector::{IvfHnswSqIndexBuilder, IvfPqIndexBuilder};
use lancedb::query::{ExecutableQuery, QueryBase, Select};

use super::{Result, Store};

/// The kind and shape of a vector index.
#[derive(Clone, Copy, Debug)]
pub enum VectorIndex {
    IvfPq { partitions: u32, sub_vectors: u32 },
    IvfHnswSq { partitions: u32 },
}

/// How an indexed query searches.
#[derive(Clone, Debug)]
pub struct IndexedSearch {
    pub k: usize,
    /// Partitions searched per query.
    pub nprobes: usize,
    /// Candidates re-ranked exactly: refine_factor * k.
    pub refine_factor: u32,
    /// Only rows matching this SQL predicate (applied before the search).
    pub filter: Option<String>,
}

impl Store {
    /// Builds (or replaces) a cosine vector index on `column` of `table`.
    pub async fn create_vector_index(
        &self,
        table: &str,
        column: &str,
        index: VectorIndex,
    ) -> Result<()> {
        let index = match index {
            VectorIndex::IvfPq {
                partitions,
                sub_vectors,
            } => Index::IvfPq(
                IvfPqIndexBuilder::default()
                    .distance_type(DistanceType::Cosine)
                    .num_partitions(partitions)
                    .num_sub_vectors(sub_vectors),
            ),
            VectorIndex::IvfHnswSq { partitions } => Index::IvfHnswSq(
                IvfHnswSqIndexBuilder::default()
                    .distance_type(DistanceType::Cosine)
                    .num_partitions(partitions),
            ),
        };
        self.table(table)
            .await?
            .create_index(&[column], index)
            .replace(true)
            .execute()
            .await?;
        Ok(())
    }

    /// The ids of the rows nearest to `vector` by cosine distance, through the table's index.
    pub async fn nearest_ids(
        &self,
        table: &str,
        vector: Vec<f32>,
        search: IndexedSearch,
    ) -> Result<Vec<String>> {
        let mut query = self
            .table(table)
            .await?
            .query()
            .nearest_to(vector)?
            .distance_type(DistanceType::Cosine)
            .nprobes(search.nprobes)?
            .refine_factor(search.refine_factor)
            .limit(search.k)
            .select(Select::columns(&["id"]));
        if let Some(filter) = &search.filter {
            query = query.only_if(filter);
        }
        let results: Vec<RecordBatch> = query.execute().await?.try_collect().await?;
        let mut ids = Vec::new();
        for batch in &results {
            if let Some(column) = batch.column_by_name("id") {
                let column = column.as_string::<i32>();
                ids.extend(
                    (0..batch.num_rows())
                        .filter(|&i| column.is_valid(i))
                        .map(|i| column.value(i).to_string()),
                );
            }
        }
        Ok(ids)
    }
}

impl Store {
    /// The `limit` rows of `table` nearest to `vector` by cosine distance among those
    /// `filter` keeps (filtered before the search), with `columns` and `_distance`; through
    /// the vector index when there is one (probing `nprobes` partitions, 0 for Lance's
    /// adaptive choice), else an exact scan.
    pub async fn nearest_rows(
        &self,
        table: &str,
        vector: Vec<f32>,
        limit: usize,
        nprobes: usize,
        filter: String,
        columns: &[&str],
    ) -> Result<Vec<RecordBatch>> {
        let query = self
            .table(table)
            .await?
            .query()
            .only_if(filter)
            .nearest_to(vector)?
            .distance_type(DistanceType::Cosine)
            .limit(limit)
            .select(Select::columns(columns));
        let query = match nprobes {
            0 => query,
            n => query.nprobes(n)?,
        };
        Ok(query.execute().await?.try_collect().await?)
    }
}

/// The scalar (BTree) indexes lookups by id need: traversal walks `links` by either end and
/// reads the memories it reaches by id (or, walking many times, a user's whole graph by
/// `user_id`); entity jobs read `memory_entities` both ways; audit writes that may repeat
/// (a resumed job's, a batch applied again) merge on `audit_log.id`, and resuming jobs and
/// recall look their rows up by it; `link` looks up
/// the judgements of the night's pairs by their target (`audit_log.target_id`); `entities`
/// reads the scans of the users it reads and merges the night's scans on `memory_id` (without
/// the index Lance joins them against every scan: 24 ms on day 1 of `bench year`, 41 on day
/// 365). Every job writes its `runs` row twice, appended when it starts and merged on
/// `run_id` when it finishes: without the index Lance joins the merge against every run.
/// `integrate` looks up its own run's audit rows by `run_id` to resume, and `entities` reads
/// a user's `memory_entities` by `user_id`. With these three and the bitmaps on `runs.job`
/// and `audit_log.operation`, `integrate` took 0.61x its time and `link` 0.86x on a store
/// whose `runs` held 99k rows and `audit_log` 647k; at the year bench's 2,400 and 65k they
/// change nothing measurable (BENCHMARKS.md, session 49).
pub const SCALAR_INDEXES: &[(&str, &str)] = &[
    ("runs", "run_id"),
    ("audit_log", "id"),
    ("audit_log", "target_id"),
    ("audit_log", "run_id"),
    ("memories", "id"),
    ("memories", "user_id"),
    ("links", "user_id"),
    ("links", "source_id"),
    ("links", "target_id"),
    ("memory_entities", "memory_id"),
    ("memory_entities", "entity_id"),
    ("memory_entities", "user_id"),
    ("entities", "id"),
    ("entity_scans", "memory_id"),
    ("entity_scans", "user_id"),
];

/// The full-text (BM25, Lance's inverted index) indexes recall searches beside vectors:
/// lower-cased, English-stemmed words without stop words. Without one, Lance's full-text
/// search scans the rows with the same tokenizer (right, slower); rows written since the
/// index was built are scanned likewise until it is brought up to date.
pub const TEXT_INDEXES: &[(&str, &str)] = &[("memories", "text")];

/// The bitmap indexes of the few-valued columns recall's filter reads on every search
/// (`tier IN (..)`, `state <> 'archived'`, `embedding_model = ..`): with them Lance computes
/// the prefilter from the index instead of reading the columns of every row, which at 100k
/// memories cut a filtered vector search from 69-78 ms to 45-48 ms and a filtered full-text
/// search from 48-50 ms to 28-30 ms (BENCHMARKS.md, "recall at 100k").
pub const BITMAP_INDEXES: &[(&str, &str)] = &[
    ("memories", "tier"),
    ("memories", "state"),
    ("memories", "embedding_model"),
    // With it every column of links' key is indexed, and Lance's merge on that key probes
    // the indexes instead of joining against the whole table (1 s of a debug integrate's
    // round at 68k links, day 365 of `bench year`).
    ("links", "link_type"),
    // Every job looks for a run of its own still running, and `scores` for its last
    // finished one. The first asks `status = 'running'` of the `status` index alone (runs
    // still running are few; the job only when there are some) instead of reading the
    // status of every run of the job, which grows by one a night: 7-9 ms of each job's
    // start on day 366 of `bench year`, against 4 on day 2 (no index).
    ("runs", "job"),
    ("runs", "status"),
    // Which runs `undo` reverted (`operation = 'UNDO'`), asked by every job that skips what
    // an earlier run did, and the nightly summary's consolidations.
    ("audit_log", "operation"),
];

/// Tables indexed from fewer rows than the jobs' threshold (`refresh_scalar_indexes`):
/// `runs` grows by a few rows a night and would never reach it, yet every job merges its row
/// into it when it finishes.
const MIN_ROWS_OF: &[(&str, usize)] = &[("runs", 1_000)];

/// The rows `table` needs before its indexes are built (and unindexed ones folded in), for a
/// caller's threshold `min_rows`.
fn min_rows_of(table: &str, min_rows: usize) -> usize {
    MIN_ROWS_OF
        .iter()
        .find(|(t, _)| *t == table)
        .map_or(min_rows, |(_, own)| min_rows.min(*own))
        .max(1)
}

/// What `refresh_scalar_indexes` did to one index.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ScalarIndexChange {
    pub table: String,
    pub column: String,
    /// `created` or `updated` (unindexed rows folded in).
    pub action: &'static str,
    pub rows: usize,
    /// Time it took (an update's folding of all the table's stale indexes, on each).
    pub ms: u64,
}

impl Store {
    /// Creates the missing `SCALAR_INDEXES`, `BITMAP_INDEXES` and `TEXT_INDEXES` of tables
    /// holding at least `min_rows` rows (fewer for the tables of `MIN_ROWS_OF`), and
    /// folds rows written since into existing ones once that many of them are unindexed
    /// (Lance scans unindexed rows anyway, so a query is right either way; this keeps it fast).
    /// `only`: the tables to look at (a job's finish passes those it wrote: a table no one
    /// wrote since its last look has nothing new to fold, and each look opens the table, counts
    /// its rows and reads each index's statistics); `None` looks at every indexed table.
    pub async fn refresh_scalar_indexes(
        &self,
        min_rows: usize,
        only: Option<&std::collections::BTreeSet<String>>,
    ) -> Result<Vec<ScalarIndexChange>> {
        let mut changes = Vec::new();
        #[derive(Clone, Copy)]
        enum Kind {
            BTree,
            Bitmap,
            Text,
        }
        let all: Vec<(&str, &str, Kind)> = SCALAR_INDEXES
            .iter()
            .map(|(t, c)| (*t, *c, Kind::BTree))
            .chain(BITMAP_INDEXES.iter().map(|(t, c)| (*t, *c, Kind::Bitmap)))
            .chain(TEXT_INDEXES.iter().map(|(t, c)| (*t, *c, Kind::Text)))
            .collect();
        let mut tables: Vec<&str> = all.iter().map(|(t, _, _)| *t).collect();
        tables.sort();
        tables.dedup();
        tables.retain(|t| only.is_none_or(|only| only.contains(*t)));
        for name in tables {
            let table = self.table(name).await?;
            let rows = table.count_rows(None).await?;
            let min_rows = min_rows_of(name, min_rows);
            if rows < min_rows {
                continue;
            }
            let indices = table.list_indices().await?;
            let mut stale = Vec::new();
            for (_, column, kind) in all.iter().filter(|(t, _, _)| *t == name) {
                match indices.iter().find(|i| i.columns == [column.to_string()]) {
                    None => {
                        let index = match kind {
                            Kind::Text => Index::FTS(Default::default()),
                            Kind::Bitmap => Index::Bitmap(Default::default()),
                            Kind::BTree => Index::BTree(Default::default()),
                        };
                        let started = std::time::Instant::now();
                        table.create_index(&[*column], index).execute().await?;
                        changes.push(ScalarIndexChange {
                            table: name.to_string(),
                            column: column.to_string(),
                            action: "created",
                            rows,
                            ms: started.elapsed().as_millis() as u64,
                        });
                    }
                    Some(index) => {
                        let unindexed = table
                            .index_stats(&index.name)
                            .await?
                            .map_or(0, |s| s.num_unindexed_rows);
                        if unindexed >= min_rows.max(1) {
                            stale.push(index.name.clone());
                            changes.push(ScalarIndexChange {
                                table: name.to_string(),
                                column: column.to_string(),
                                action: "updated",
                                rows: unindexed,
                                ms: 0,
                            });
                        }
                    }
                }
            }
            if !stale.is_empty() {
                // Only the stale ones, as deltas (`fold_into_indexes`): Lance rewrites every
                // segment it merges, so folding a day's few new rows into every index of
                // `memories` kept a copy of each per day in the version window.
                let started = std::time::Instant::now();
                let stale: Vec<(String, bool)> = stale.into_iter().map(|n| (n, false)).collect();
                self.fold_into_indexes(name, &stale).await?;
                let ms = started.elapsed().as_millis() as u64;
                let folded = changes
                    .iter_mut()
                    .filter(|c| c.action == "updated" && c.table == name);
                folded.for_each(|c| c.ms = ms);
            }
        }
        Ok(changes)
    }
}

impl Store {
    /// The `limit` rows of `table` whose `column` best matches `query` by BM25 (Lance's
    /// full-text search: through the inverted index when there is one, else a flat scan with
    /// the same tokenizer), among those `filter` keeps (filtered first), with `columns` and
    /// `_score`.
    pub async fn text_search_rows(
        &self,
        table: &str,
        column: &str,
        query: &str,
        limit: usize,
        filter: String,
        columns: &[&str],
    ) -> Result<Vec<RecordBatch>> {
        use lancedb::index::scalar::FullTextSearchQuery;
        let fts = FullTextSearchQuery::new(query.to_string())
            .with_column(column.to_string())
            .map_err(lancedb::Error::from)?;
        let query = self
            .table(table)
            .await?
            .query()
            .full_text_search(fts)
            .only_if(filter)
            .limit(limit)
            .select(Select::columns(columns));
        Ok(query.execute().await?.try_collect().await?)
    }
}

#[cfg(test)]
mod tests {
    use super::min_rows_of;

    #[test]
    fn runs_is_indexed_from_fewer_rows_than_the_jobs_threshold_and_no_other_table_is() {
        // The jobs' threshold: `runs` from 1,000 rows, every other table from 10,000.
        assert_eq!(min_rows_of("runs", 10_000), 1_000);
        assert_eq!(min_rows_of("audit_log", 10_000), 10_000);
        assert_eq!(min_rows_of("memories", 10_000), 10_000);
        // `index --scalar` asks for every table from one row, `runs` too.
        assert_eq!(min_rows_of("runs", 1), 1);
        assert_eq!(min_rows_of("memories", 0), 1);
    }
}
