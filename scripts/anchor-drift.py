#!/usr/bin/env python3
"""The profile anchor over a store's narratives, session by session (issue 37, seed 004
"Temporal Continuity Anchor": drift < 0.1 per consolidation cycle).

Runs `memlife anchor --now T` once at each narrative's creation time, oldest first, so every
run folds in the narratives of one moment (a LoCoMo session a cycle), then reads the ANCHOR
audit rows: per user, the largest move of one cycle, the final drift from the origin, and the
drift events. Changes the store (run it on a copy).

    python3 scripts/anchor-drift.py BIN DB
"""
import json
import subprocess
import sys


def sql(binary, db, query):
    out = subprocess.run(
        [binary, "--db", db, "sql", "--format", "jsonl", query],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def main():
    binary, db = sys.argv[1:3]
    times = [
        r["created_at"]
        for r in sql(
            binary,
            db,
            "SELECT DISTINCT created_at FROM memories WHERE kind = 'narrative' ORDER BY created_at",
        )
    ]
    for t in times:
        subprocess.run(
            [binary, "--db", db, "anchor", "--now", t], check=True, capture_output=True
        )
    rows = sql(
        binary,
        db,
        "SELECT user_id, classification, after_state FROM audit_log "
        "WHERE operation = 'ANCHOR' ORDER BY created_at",
    )
    users = {}
    for r in rows:
        u = users.setdefault(r["user_id"], {"cycles": 0, "moves": [], "drift": 0.0})
        after = json.loads(r["after_state"])
        u["cycles"] += 1
        if r["classification"] == "UPDATE":
            u["moves"].append(after["moved"])
        u["drift"] = after["anchor"]["drift"]
    events = sql(
        binary,
        db,
        "SELECT user_id, classification, confidence FROM audit_log "
        "WHERE operation = 'ANCHOR_DRIFT' ORDER BY created_at",
    )
    out = {}
    for user, u in sorted(users.items()):
        moves = u["moves"] or [0.0]
        out[user] = {
            "cycles": u["cycles"],
            "largest_move": round(max(moves), 4),
            "mean_move": round(sum(moves) / len(moves), 4),
            "final_drift": round(u["drift"], 4),
            "events": [e["classification"] for e in events if e["user_id"] == user],
        }
    all_moves = [m for u in users.values() for m in u["moves"]]
    out["all"] = {
        "cycles_over_0.1": sum(1 for m in all_moves if m > 0.1),
        "cycles": len(all_moves),
        "largest_move": round(max(all_moves or [0.0]), 4),
    }
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
