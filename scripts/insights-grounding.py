#!/usr/bin/env python3
"""How well `memlife insights`'s patterns recur in LoCoMo's own annotations (issue 37).

A store built by `memlife eval recall --locomo FILE --narratives --keep DIR` holds one
narrative per LoCoMo session (session_id "<sample>:session_<n>"); after `memlife insights`
ran on it, each learning_pattern names the narratives it rests on. A pattern is grounded in
an evidence session when LoCoMo's observations of that session (the dataset's own
annotations, never our text) share at least two of the pattern's content words. The session
the pattern's words were drawn from is trivially grounded, so per pattern the best-matching
evidence session is left out and the rest are scored. The baseline draws the same number of
sessions of the same conversation at random (fixed seed, 200 draws per pattern).

    python3 scripts/insights-grounding.py BIN DB ../shared/data/locomo-dev.json
"""
import json
import random
import re
import subprocess
import sys

STOP = set(
    """about above after again against also always another any anything around back been
    before being below between both came come could does doing done down during each even
    ever every feel felt from gave give going good great have having here into just keep
    know last like little look love made make many more most much must need never next only
    other over really same said says should since some something still such sure take than
    that their them then there these they thing things think this those though through time
    today told took very want well were what when where which while will with would year
    years your yours you'll it's that's i'm i've i'd you're we're they're""".split()
)


def words(text):
    """Lower-case content words of four letters or more; capitalised words (names) and the
    speaker label dropped."""
    text = re.sub(r"^\w+:\s*", "", text.strip())
    out = set()
    for w in re.findall(r"[A-Za-z][A-Za-z']+", text):
        if w[0].isupper() or len(w) < 4:
            continue
        w = w.lower()
        if w not in STOP:
            out.add(w.rstrip("s"))
    return out


def sql(binary, db, query):
    out = subprocess.run(
        [binary, "--db", db, "sql", "--format", "jsonl", query],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return [json.loads(line) for line in out.splitlines() if line.strip()]


def main():
    binary, db, locomo = sys.argv[1:4]
    observed = {}
    for sample in json.load(open(locomo)):
        for key, by_speaker in sample["observation"].items():
            session = key.replace("_observation", "")
            text = " ".join(o[0] for obs in by_speaker.values() for o in obs)
            observed[f"{sample['sample_id']}:{session}"] = words(text)
    narratives = {
        r["id"]: r["session_id"]
        for r in sql(binary, db, "SELECT id, session_id FROM memories WHERE kind = 'narrative'")
    }
    patterns = sql(
        binary,
        db,
        "SELECT id, user_id, text, consolidates_memory_ids FROM memories "
        "WHERE kind = 'learning_pattern'",
    )
    rng = random.Random(7)
    by_conversation = {}
    for session in observed:
        by_conversation.setdefault(session.split(":")[0], []).append(session)

    def grounded(pattern_words, sessions):
        hits = sorted(
            (len(pattern_words & observed.get(s, set())) for s in sessions), reverse=True
        )
        rest = hits[1:]
        return sum(1 for h in rest if h >= 2), len(rest)

    ours = [0, 0]
    base = [0, 0]
    sizes = []
    for p in patterns:
        pattern_words = words(p["text"].split(": ", 1)[-1])
        sessions = [narratives[i] for i in p["consolidates_memory_ids"] if i in narratives]
        sizes.append(len(sessions))
        g, n = grounded(pattern_words, sessions)
        ours[0] += g
        ours[1] += n
        pool = by_conversation.get(p["user_id"], [])
        for _ in range(200):
            g, n = grounded(pattern_words, rng.sample(pool, min(len(sessions), len(pool))))
            base[0] += g / 200
            base[1] += n / 200
    report = {
        "patterns": len(patterns),
        "conversations": len({p["user_id"] for p in patterns}),
        "mean_evidence": round(sum(sizes) / max(len(sizes), 1), 2),
        "evidence_grounded": round(ours[0] / max(ours[1], 1), 3),
        "random_sessions_grounded": round(base[0] / max(base[1], 1), 3),
    }
    print(json.dumps(report))


if __name__ == "__main__":
    main()
