#!/usr/bin/env python3
"""Grid search of recall's ranking weights over the candidates `memlife eval recall
--candidates FILE` wrote (every question's pool, each candidate's unweighted signals and the
evidence turns it stands for). Prints hit@k, evidence recall@k and MRR for each weighting,
best first, beside plain cosine within the same pool. Tune on the dev split only.

    python3 scripts/recall-weights.py candidates.jsonl [--k 10]
"""
import argparse
import itertools
import json
import math


def linear(c, w):
    # Crowding is taken off the score, as recall does; the episode is recomputed below.
    return sum(
        (-1.0 if n == "crowding" else 1.0) * w.get(n, 0.0) * v
        for n, v in c["signals"].items()
        if n != "episode"
    )


def scores(pool, w):
    """Each candidate's score under `w`, its episode recomputed as recall does
    (logic::recall::fill_episodes): the best score among the `episode_top` best other
    candidates of its session."""
    base = [linear(c, w) for c in pool]
    if not w.get("episode"):
        return base
    top = sorted(range(len(pool)), key=lambda i: -base[i])[: int(w.get("episode_top", 5))]
    out = []
    for i, c in enumerate(pool):
        mates = [base[j] for j in top if j != i and c.get("session") and pool[j].get("session") == c["session"]]
        out.append(base[i] + w["episode"] * min(1.0, max([0.0] + mates)))
    return out


def score(questions, w, k):
    hits = rec = rr = 0.0
    for q in questions:
        ev = set(q["evidence"])
        s = scores(q["pool"], w)
        ranked = [q["pool"][i] for i in sorted(range(len(s)), key=lambda i: -s[i])]
        covered = set()
        first = None
        for i, c in enumerate(ranked):
            if c["evidence"] and first is None:
                first = i + 1
            if i < k:
                covered.update(c["evidence"])
        hits += first is not None and first <= k
        rec += len(covered & ev) / len(ev)
        rr += 1.0 / first if first and first <= 20 else 0.0
    n = len(questions)
    return hits / n, rec / n, rr / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--top", type=int, default=15)
    a = ap.parse_args()
    qs = [json.loads(l) for l in open(a.file)]
    grid = {
        "focused": [0.0, 0.3, 0.5],
        "lexical": [0.0, 0.1, 0.15, 0.2],
        "entity": [0.0, 0.05],
        "time": [0.0, 0.1, 0.2],
        "crowding": [0.0, 0.3, 0.5, 0.7],
        "episode": [0.0, 0.05, 0.1, 0.2],
        "salience": [0.0, 0.05],
        "recency": [0.0, 0.05],
    }
    rows = []
    for values in itertools.product(*grid.values()):
        w = dict(zip(grid, values))
        # The cosine and the focused cosine share one unit of weight.
        w["similarity"] = 1.0 - w["focused"]
        rows.append((score(qs, w, a.k), w))
    rows.sort(key=lambda r: (-(r[0][0] + r[0][1]), -r[0][2]))
    base = score(qs, {"similarity": 1.0}, a.k)
    print(f"{len(qs)} questions; cosine within the pool: hit@{a.k} {base[0]:.3f} rec@{a.k} {base[1]:.3f} MRR {base[2]:.3f}")
    for (h, r, m), w in rows[: a.top]:
        print(f"hit@{a.k} {h:.3f} rec@{a.k} {r:.3f} MRR {m:.3f}  {w}")


if __name__ == "__main__":
    main()
