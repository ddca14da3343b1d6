"""Airflow DAG for memlife: one task per job, run in dependency order every night.

memlife exits 0 when done, 1 when done with some failed items, and 2 on error. Airflow fails
a task on any non-zero exit, so both 1 and 2 show in the UI with the JSON report in the log.
"""

from datetime import datetime, timedelta

from airflow import DAG
from airflow.operators.bash import BashOperator

DB = "/var/lib/memlife/memlife.db"

with DAG(
    dag_id="memlife_nightly",
    start_date=datetime(2025, 1, 1),
    schedule="30 1 * * *",
    catchup=False,
    default_args={"retries": 1, "retry_delay": timedelta(minutes=10)},
    tags=["memlife"],
) as dag:
    import_memories = BashOperator(
        task_id="import",
        bash_command=f"memlife --db {DB} --json import --on-error skip /var/lib/memlife/inbox/memories.jsonl",
    )
    stats = BashOperator(
        task_id="stats",
        bash_command=f"memlife --db {DB} --json stats",
    )
    import_memories >> stats
