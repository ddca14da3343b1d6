#!/bin/bash
# Issue 35: lives the next day of a `bench year --keep` folder once, on a copy, as
# benches/year_first_and_last.py does (the same 20 facts, one of its recalls, embed, entities,
# scores, link, optimize --light), each job with Lance's and memlife's logs kept in OUTDIR
# (JOB.json: the report; JOB.log: the log), for benches/year_day_attr.py.
# Usage: bash benches/year_day_logs.sh BIN STORE OUTDIR
BIN=$1; S=$2; O=$3; mkdir -p $O
D=$(python3 -c "import json;print(json.load(open('$S/year-state.json'))['day_done'])")
NOW=$(python3 -c "import datetime as dt;print((dt.datetime(2026,1,1,2,tzinfo=dt.timezone.utc)+dt.timedelta(days=$D+1)).isoformat())")
W=$(mktemp -d ${TMPDIR:-/tmp}/memlife-day.XXXX); cp -r $S/db $W/db
python3 - $S $NOW $W <<'PY'
import json,sys,datetime as dt
S,now,W=sys.argv[1:4]
clock=dt.datetime.fromisoformat(now)
rows=[json.loads(l) for l in open(S+"/all.jsonl")]
with open(W+"/facts.jsonl","w") as out:
    for i,r in enumerate(rows[-20:]):
        r={k:v for k,v in r.items() if k not in ("id","last_accessed_at","access_count","recall_frequency","state")}
        r["text"]=r["text"]+f" (again, {i})"
        r["created_at"]=(clock-dt.timedelta(hours=1)).isoformat()
        out.write(json.dumps(r)+"\n")
base=[json.loads(l) for l in open(S+"/base.jsonl")]
q=[(r["user_id"], r["text"]) for r in base[:: max(1, len(base) // 5)][:5]]
json.dump(q, open(W+"/q.json","w"))
PY
C="--config $S/memlife.toml --db $W/db --json"
export MEMLIFE_LOG=memlife=debug,lance=info
$BIN $C integrate $W/facts.jsonl --embedder hash --llm offline --now $NOW > $O/integrate.json 2> $O/integrate.log
python3 -c "
import json;[print(u+'\t'+t) for u,t in json.load(open('$W/q.json'))]" | head -1 | while IFS=$'\t' read u t; do $BIN $C recall "$t" --user "$u" --embedder hash --now $NOW > $O/recall.json 2> $O/recall.log; done
for j in embed entities scores link; do
  case $j in embed|entities) X="--embedder hash";; link) X="--llm offline";; *) X="";; esac
  $BIN $C $j $X --now $NOW > $O/$j.json 2> $O/$j.log
done
$BIN $C optimize --light --now $NOW > $O/optimize.json 2> $O/optimize.log
rm -rf $W
