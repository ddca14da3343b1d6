"""Airflow DAGs for memlife, written by `memlife schedule dag` from jobs/schedule.toml (edit
that file, not this one; a test keeps them equal). One DAG per group of the schedule, its
tasks in the schedule's order, on the group's first cadence.

memlife exits 0 when done, 1 when done with some failed items, and 2 on error. Airflow fails
a task on any non-zero exit, so both 1 and 2 show in the UI with the JSON report in the log.

Jobs that work per user fan out over SHARDS mapped tasks (`--shard I/N`: users split by a
stable hash, every user in exactly one shard), which Airflow may run on different workers
against one shared store; jobs on whole tables (optimize) and the other commands run once.
Exclusivity comes from Airflow: one task per shard, and `max_active_runs=1`, so two runs of a
DAG never overlap. (On one host under cron, memlife's own file locks do that instead.)
"""

from datetime import datetime, timedelta

from airflow import DAG
from airflow.operators.bash import BashOperator

DB = "/var/lib/memlife/memlife.db"
CONFIG = "/etc/memlife/memlife.toml"
MEMLIFE = f"memlife --db {DB} --config {CONFIG} --json"
SHARDS = 4

with DAG(
    dag_id="memlife_nightly",
    start_date=datetime(2025, 1, 1),
    schedule="30 1 * * *",
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 1, "retry_delay": timedelta(minutes=10)},
    tags=["memlife"],
):
    # load the agent's export of new memories (rows already present are upserted) (one task per shard)
    import_task = BashOperator.partial(
        task_id="import",
    ).expand(
        bash_command=[f"{MEMLIFE} import --on-error skip /var/lib/memlife/inbox/memories.jsonl --shard {i}/{SHARDS}" for i in range(SHARDS)],
    )
    # vectors for new memories and entities (one task per shard)
    embed_task = BashOperator.partial(
        task_id="embed",
    ).expand(
        bash_command=[f"{MEMLIFE} embed --shard {i}/{SHARDS}" for i in range(SHARDS)],
    )
    # sessions that ended (30 minutes without a new memory) told as one narrative each (seed 004; offline narrative when no provider answers) (one task per shard)
    sessions_task = BashOperator.partial(
        task_id="sessions",
    ).expand(
        bash_command=[f"{MEMLIFE} sessions --llm providers --shard {i}/{SHARDS}" for i in range(SHARDS)],
    )
    # recurring patterns in the last 7 days' narratives (clusters of 3 or more), stored as learning_pattern memories with their evidence (seed 004) (one task per shard)
    insights_task = BashOperator.partial(
        task_id="insights",
    ).expand(
        bash_command=[f"{MEMLIFE} insights --llm providers --shard {i}/{SHARDS}" for i in range(SHARDS)],
    )
    # named entities of new or changed memories, and shares_entity links (one task per shard)
    entities_task = BashOperator.partial(
        task_id="entities",
    ).expand(
        bash_command=[f"{MEMLIFE} entities --shard {i}/{SHARDS}" for i in range(SHARDS)],
    )
    # short descriptions of entities whose memories or notes changed (offline fallback when no provider answers) (one task per shard)
    describe_task = BashOperator.partial(
        task_id="describe",
    ).expand(
        bash_command=[f"{MEMLIFE} describe --llm providers --shard {i}/{SHARDS}" for i in range(SHARDS)],
    )
    # typed links between similar memories, submitted to the Batch API (half price) (one task per shard)
    link_task = BashOperator.partial(
        task_id="link",
    ).expand(
        bash_command=[f"{MEMLIFE} link --llm providers --mode batch --shard {i}/{SHARDS}" for i in range(SHARDS)],
    )
    # salience decay, lifecycle states, TTL, retention tiers and importance; archivals are audited before they happen; idempotent for a given day (one task per shard)
    scores_task = BashOperator.partial(
        task_id="scores",
    ).expand(
        bash_command=[f"{MEMLIFE} scores --shard {i}/{SHARDS}" for i in range(SHARDS)],
    )
    # each user's profile anchor moved 10% toward the new narratives' mean; drift from the origin logged above 0.2 and 0.4 (seed 004) (one task per shard)
    anchor_task = BashOperator.partial(
        task_id="anchor",
    ).expand(
        bash_command=[f"{MEMLIFE} anchor --shard {i}/{SHARDS}" for i in range(SHARDS)],
    )
    # seed 004's pruner in the 2-5am maintenance window: decayed, unemotional, unused memories no keep rule protects are archived (provenance) or exported to Parquet and deleted (logged first) (one task per shard)
    prune_task = BashOperator.partial(
        task_id="prune",
    ).expand(
        bash_command=[f"{MEMLIFE} prune --shard {i}/{SHARDS}" for i in range(SHARDS)],
    )
    # merge the small fragments the day's commits appended and fold the day's rows into the indexes recall searches, so reads between the weekly optimizes neither open a dozen more fragments a day nor scan the rows no index holds; remove the versions that left the retention window that day, so the window holds its 14 days of versions, not up to 20
    optimize_light_task = BashOperator(
        task_id="optimize_light",
        bash_command=f"{MEMLIFE} optimize --light",
    )
    # delete batch records and files older than llm.batch_retention_days
    batches_cleanup_task = BashOperator(
        task_id="batches_cleanup",
        bash_command=f"{MEMLIFE} batches cleanup",
    )
    # a machine-readable summary for dashboards
    stats_task = BashOperator(
        task_id="stats",
        bash_command=f"{MEMLIFE} stats",
    )
    # verify the store's invariants after the night's jobs (exit 1 lists violations)
    check_task = BashOperator(
        task_id="check",
        bash_command=f"{MEMLIFE} check",
    )
    import_task >> embed_task >> sessions_task >> insights_task >> entities_task >> describe_task >> link_task >> scores_task >> anchor_task >> prune_task >> optimize_light_task >> batches_cleanup_task >> stats_task >> check_task

with DAG(
    dag_id="memlife_integrate",
    start_date=datetime(2025, 1, 1),
    schedule="*/15 * * * *",
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 1, "retry_delay": timedelta(minutes=10)},
    tags=["memlife"],
):
    # integrate the facts the agent appends to its inbox (ADD, UPDATE, SUPERSEDE, MERGE, NOOP; unsure ones wait in `memlife review list`); facts already integrated are skipped, so the file may keep growing (one task per shard)
    integrate_task = BashOperator.partial(
        task_id="integrate",
    ).expand(
        bash_command=[f"{MEMLIFE} integrate --llm providers --on-error skip /var/lib/memlife/inbox/facts.jsonl --shard {i}/{SHARDS}" for i in range(SHARDS)],
    )

with DAG(
    dag_id="memlife_batches",
    start_date=datetime(2025, 1, 1),
    schedule="* * * * *",
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 1, "retry_delay": timedelta(minutes=10)},
    tags=["memlife"],
):
    # apply finished batches, exactly once (a poll with nothing to do writes nothing)
    batches_poll_task = BashOperator(
        task_id="batches_poll",
        bash_command=f"{MEMLIFE} batches poll",
    )

with DAG(
    dag_id="memlife_batches_retry",
    start_date=datetime(2025, 1, 1),
    schedule="15 */6 * * *",
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 1, "retry_delay": timedelta(minutes=10)},
    tags=["memlife"],
):
    # resubmit failed or expired batches (seed 000: retry_failed_extractions)
    batches_retry_task = BashOperator(
        task_id="batches_retry",
        bash_command=f"{MEMLIFE} batches retry",
    )

with DAG(
    dag_id="memlife_weekly",
    start_date=datetime(2025, 1, 1),
    schedule="0 4 * * 0",
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 1, "retry_delay": timedelta(minutes=10)},
    tags=["memlife"],
):
    # clusters of similar memories around hubs, the candidates of consolidation (seed 000 consolidates weekly) (one task per shard)
    cluster_task = BashOperator.partial(
        task_id="cluster",
    ).expand(
        bash_command=[f"{MEMLIFE} cluster --shard {i}/{SHARDS}" for i in range(SHARDS)],
    )
    # two-pass consolidation of those clusters (reasoning role proposes, fast role verifies); approved groups become one memory each, the members archived (one task per shard)
    consolidate_task = BashOperator.partial(
        task_id="consolidate",
    ).expand(
        bash_command=[f"{MEMLIFE} consolidate --llm providers --shard {i}/{SHARDS}" for i in range(SHARDS)],
    )
    # split or trim verbose, well-used memories (refused ones counted) (one task per shard)
    refine_task = BashOperator.partial(
        task_id="refine",
    ).expand(
        bash_command=[f"{MEMLIFE} refine --llm providers --shard {i}/{SHARDS}" for i in range(SHARDS)],
    )
    # episodic to semantic (seed 002): episodes older than 7 days with salience under 0.2 that share meaning or entities become semantic facts with provenance links; the episodes they rest on are archived (one task per shard)
    distill_task = BashOperator.partial(
        task_id="distill",
    ).expand(
        bash_command=[f"{MEMLIFE} distill --llm providers --shard {i}/{SHARDS}" for i in range(SHARDS)],
    )
    # compact small fragments, update indexes, remove table versions older than [retention] keep_versions_days (undo reads them until then)
    optimize_task = BashOperator(
        task_id="optimize",
        bash_command=f"{MEMLIFE} optimize",
    )
    cluster_task >> consolidate_task >> refine_task >> distill_task >> optimize_task

with DAG(
    dag_id="memlife_monthly",
    start_date=datetime(2025, 1, 1),
    schedule="0 3 1 * *",
    catchup=False,
    max_active_runs=1,
    default_args={"retries": 1, "retry_delay": timedelta(minutes=10)},
    tags=["memlife"],
):
    # entity GC (seed 000): merge near-duplicate entities, archive the ones no live memory names, delete them after 30 days archived (logged first) (one task per shard)
    entity_gc_task = BashOperator.partial(
        task_id="entity_gc",
    ).expand(
        bash_command=[f"{MEMLIFE} entity-gc --shard {i}/{SHARDS}" for i in range(SHARDS)],
    )
