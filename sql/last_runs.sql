-- The last run of each job, with its outcome (used by `memlife stats`).
SELECT job, status, started_at, finished_at, duration_ms, items_failed, counts, run_id
FROM (
    SELECT *, ROW_NUMBER() OVER (PARTITION BY job ORDER BY started_at DESC) AS recency
    FROM runs
)
WHERE recency = 1
ORDER BY job
