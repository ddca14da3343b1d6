"""Airflow DAGs for memlife: one task per job, run in dependency order every night, and the
Batch API side (poll every minute, retry every six hours, clean up daily).

memlife exits 0 when done, 1 when done with some failed items, and 2 on error. Airflow fails
a task on any non-zero exit, so both 1 and 2 show in the UI with the JSON report in the log.
"""

from datetime import datetime, timedelta

from airflow import DAG
from airflow.operators.bash import BashOperator

DB = "/var/lib/memlife/memlife.db"
CONFIG = "/etc/memlife/memlife.toml"
MEMLIFE = f"memlife --db {DB} --config {CONFIG} --json"

with DAG(
    dag_id="memlife_nightly",
    start_date=datetime(2025, 1, 1),
    schedule="30 1 * * *",
    catchup=False,
    default_args={"retries": 1, "retry_delay": timedelta(minutes=10)},
    tags=["memlife"],
) as nightly:
    import_memories = BashOperator(
        task_id="import",
        bash_command=f"{MEMLIFE} import --on-error skip /var/lib/memlife/inbox/memories.jsonl",
    )
    embed = BashOperator(task_id="embed", bash_command=f"{MEMLIFE} embed")
    entities = BashOperator(task_id="entities", bash_command=f"{MEMLIFE} entities")
    describe = BashOperator(
        task_id="describe", bash_command=f"{MEMLIFE} describe --llm providers"
    )
    link = BashOperator(
        task_id="link_submit",
        bash_command=f"{MEMLIFE} link --llm providers --mode batch",
    )
    scores = BashOperator(task_id="scores", bash_command=f"{MEMLIFE} scores")
    stats = BashOperator(task_id="stats", bash_command=f"{MEMLIFE} stats")
    check = BashOperator(task_id="check", bash_command=f"{MEMLIFE} check")
    import_memories >> embed >> entities >> describe >> link >> scores >> stats >> check

with DAG(
    dag_id="memlife_batches",
    start_date=datetime(2025, 1, 1),
    schedule=timedelta(minutes=1),
    catchup=False,
    max_active_runs=1,
    tags=["memlife"],
) as batches:
    # Two overlapping polls are safe (a batch is claimed by one), but one at a time is enough.
    BashOperator(task_id="poll", bash_command=f"{MEMLIFE} batches poll")

with DAG(
    dag_id="memlife_batches_maintenance",
    start_date=datetime(2025, 1, 1),
    schedule="15 */6 * * *",
    catchup=False,
    tags=["memlife"],
) as maintenance:
    retry = BashOperator(task_id="retry", bash_command=f"{MEMLIFE} batches retry")
    cleanup = BashOperator(task_id="cleanup", bash_command=f"{MEMLIFE} batches cleanup")
    retry >> cleanup

with DAG(
    dag_id="memlife_monthly",
    start_date=datetime(2025, 1, 1),
    schedule="0 3 1 * *",
    catchup=False,
    tags=["memlife"],
) as monthly:
    # Seed 000's monthly entity GC: merges, archives, deletions after the grace period.
    BashOperator(task_id="entity_gc", bash_command=f"{MEMLIFE} entity-gc")
