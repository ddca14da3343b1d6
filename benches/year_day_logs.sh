#!/bin/bash
# Issue 35: lives the next day of a `bench year --keep` folder once, on a copy, as
# benches/year_first_and_last.py does (the same 20 facts, one of its recalls, embed, entities,
# scores, link, optimize --light), each job with Lance's and memlife's logs kept in OUTDIR
# (JOB.json: the report; JOB.log: the log; indexes.txt: each index's table), for
# benches/year_day_attr.py.
# Usage: bash benches/year_day_logs.sh BIN STORE OUTDIR
BIN=$1; S=$2; O=$3; mkdir -p $O
D=$(python3 -c "import json;print(json.load(open('$S/year-state.json'))['day_done'])")
NOW=$(python3 -c "import datetime as dt;print((dt.datetime(2026,1,1,2,tzinfo=dt.timezone.utc)+dt.timedelta(days=$D+1)).isoformat())")
W=$(mktemp -d ${TMPDIR:-/tmp}/memlife-day.XXXX); cp -r $S/db $W/db
python3 "$(dirname "$0")/year_next_facts.py" $S $NOW $W/facts.jsonl
python3 - $S $W <<'PY'
import json,sys
S,W=sys.argv[1:3]
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
# Each index's folder name and its table, for year_day_attr.py --tables.
(cd $W/db && for d in *.lance/_indices/*; do echo "${d##*/} ${d%%.lance/*}"; done) > $O/indexes.txt
rm -rf $W
