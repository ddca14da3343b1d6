#!/usr/bin/env python3
# Where a build's compile time goes, per direct dependency of memlife: its own compile seconds
# and the seconds of every crate only it brings (removing it would drop them), from the
# UNIT_DATA of `cargo build --timings` and cargo metadata's resolve graph; then per group.
# Usage: python3 benches/depcost.py TIMINGS_HTML MANIFEST_DIR   (run by benches/first_build.sh)
import json, re, subprocess, sys
html, root = sys.argv[1], sys.argv[2]
units = json.loads(re.search(r'const UNIT_DATA = (\[.*?\]);\n', open(html).read(), re.S).group(1))
cost = {}
for u in units:
    key = (u['name'], u['version'])
    cost[key] = cost.get(key, 0) + u['duration']
meta = json.loads(subprocess.run(['cargo', 'metadata', '--format-version', '1', '--manifest-path', root + '/Cargo.toml'], capture_output=True, text=True, check=True).stdout)
pkgs = {p['id']: p for p in meta['packages']}
nodes = {n['id']: n for n in meta['resolve']['nodes']}
def normal_deps(pid):
    out = []
    for d in nodes[pid]['deps']:
        kinds = {k['kind'] for k in d['dep_kinds']}
        if kinds & {None, 'build'}:
            out.append(d['pkg'])
    return out
rootid = [p['id'] for p in meta['packages'] if p['name'] == 'memlife'][0]
def reach(start_edges, banned=None):
    seen = set(); stack = list(start_edges)
    while stack:
        x = stack.pop()
        if x in seen or x == banned: continue
        seen.add(x); stack.extend(normal_deps(x))
    return seen
direct = normal_deps(rootid)

alls = reach(direct)
total = sum(cost.get((pkgs[p]['name'], pkgs[p]['version']), 0) for p in alls)
rows = []
for d in direct:
    others = [x for x in direct if x != d]
    without = reach(others)
    excl = alls - without
    own = cost.get((pkgs[d]['name'], pkgs[d]['version']), 0)
    ex = sum(cost.get((pkgs[p]['name'], pkgs[p]['version']), 0) for p in excl)
    rows.append((ex, own, len(excl), pkgs[d]['name'], pkgs[d]['version']))
rows.sort(reverse=True)
print(f"total of the dependency tree: {total:.0f} s over {len(alls)} packages")
for ex, own, n, name, ver in rows:
    print(f"{name:22} {ver:10} own {own:6.1f} s   only-through-it {ex:6.1f} s ({n} packages)")
groups = {
 'storage and SQL (lancedb, lance, datafusion, arrow, parquet, bytes)': ['lancedb','lance','datafusion','arrow','parquet','bytes'],
 'local embedder (candle-core, candle-nn, tokenizers)': ['candle-core','candle-nn','tokenizers'],
 'LLM and HTTP (async-openai, reqwest, tower, rustls, axum)': ['async-openai','reqwest','tower','rustls','axum'],
 'runtime and CLI (tokio, futures, clap, indicatif, tracing, tracing-subscriber)': ['tokio','futures','clap','indicatif','tracing','tracing-subscriber'],
}
byname = {pkgs[d]['name']: d for d in direct}
print()
for g, names in groups.items():
    ids = [byname[n] for n in names if n in byname]
    others = [x for x in direct if x not in ids]
    without = set()
    stack = list(others)
    while stack:
        x = stack.pop()
        if x in without or x in ids: continue
        without.add(x); stack.extend(normal_deps(x))
    excl = alls - without
    ex = sum(cost.get((pkgs[p]['name'], pkgs[p]['version']), 0) for p in excl)
    print(f"{g}: {ex:.0f} s ({len(excl)} packages)")
