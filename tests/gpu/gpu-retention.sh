#!/bin/sh
# tests/gpu/gpu-retention.sh [BUNDLE] [OUTDIR] - retention captures on real
# models: each case of tests/gpu/retention_cases.py runs under the launcher
# with --retention signal, and each holder the program lets go of must be
# reported by `gpumemreport retention` with the bytes PyTorch's own
# memory_allocated() saw freed: the holder's blocks (allocated), exactly,
# block for block against PyTorch's snapshot; its storages' bytes
# (retained) are the sizes asked for, at most the blocks' (the caching
# allocator rounds, and keeps a block whole when the rest would be small).
# CASES="a b" picks cases. Prints a line per holder and PASS/FAIL; exits 1
# on any failure.
set -u
cd "$(dirname "$0")/../.."
bundle=${1:-.gpubundle}
out=${2:-/tmp/gmt-retention}
cases=${CASES:-"gpt2-kept resnet-cache opt-state vit-hook bert-frame"}
mkdir -p "$out"
export LD_LIBRARY_PATH="$bundle${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fail=0
for c in $cases; do
    rm -f "$out/$c.gmt"
    start=$(date +%s.%N)
    if ! "$bundle/gpumemtrace" -q --retention signal -o "$out/$c.gmt" -- \
            python3 tests/gpu/retention_cases.py "$c" > "$out/$c.truth" 2> "$out/$c.err"; then
        echo "FAIL $c: the program failed"; tail -5 "$out/$c.err"; fail=1; continue
    fi
    end=$(date +%s.%N)
    "$bundle/gpumemreport" retention --json --top 0 "$out/$c.gmt" > "$out/$c.json" 2>> "$out/$c.err"
    "$bundle/gpumemreport" retention "$out/$c.gmt" > "$out/$c.txt" 2>&1
    python3 - "$out/$c.truth" "$out/$c.json" "$c" "$start" "$end" <<'EOF' || fail=1
import json, sys
truth = json.loads(open(sys.argv[1]).read().strip().splitlines()[-1])
doc = json.load(open(sys.argv[2]))["traces"][0]
caps = doc["captures"]
if len(caps) != 1:
    print(f"FAIL {sys.argv[3]}: {len(caps)} captures ({doc.get('why')})"); sys.exit(1)
cap = caps[0]
holders = {"".join(h["chain"]): h for h in cap["holders"]}
bad = False
print(f"{sys.argv[3]}: {cap['objects']} objects walked in {cap['seconds']:.3f} s, "
      f"{cap['storages']} storages, {len(holders)} holders, bound '{cap['bound']}', "
      f"program {float(sys.argv[5]) - float(sys.argv[4]):.1f} s")
for key, freed in truth["freed"].items():
    # the holder the program dropped: the one whose chain names it
    hit = [(k, h) for k, h in holders.items() if k == key or k.endswith(" " + key) or
           k.endswith("." + key)]
    if not hit:
        print(f"  FAIL {key}: freed {freed} B, no holder names it; holders: {sorted(holders)[:8]}")
        bad = True
        continue
    k, h = max(hit, key=lambda kh: kh[1]["retained"])
    ok = h["allocated"] == freed and h["retained"] <= freed
    print(f"  {'PASS' if ok else 'FAIL'} {k}: freed {freed} B; allocated {h['allocated']} B, "
          f"retained {h['retained']} B in {h['storages']} storages; sites "
          f"{[s['site'] for s in h['sites']][:2]}")
    # block by block: what PyTorch freed against the holder's storages
    rank = cap["holders"].index(h)
    field = "nested" if h["parent"] >= 0 else "holder"
    mine = {b["address"] for b in cap["blocks"] if b[field] == rank}
    where = {b["address"]: b for b in cap["blocks"]}
    gone = {a: n for a, n in truth["blocks"].get(key, [])}
    missed = {a: n for a, n in gone.items() if a not in mine}
    extra = mine - set(gone)
    ok = ok and not missed and not extra
    if missed or extra:
        print(f"    freed but not under it: {len(missed)} blocks, {sum(missed.values())} B; "
              f"under it but not freed: {len(extra)}")
        for a, n in sorted(missed.items(), key=lambda x: -x[1])[:6]:
            b = where.get(a)
            print(f"      {n} B at {a:#x}: " + (f"walked, holder {b['holder']}, chain "
                  f"{''.join(b['chain'])[:160]}" if b else "not found by the walk"))
    # sizes: the trace's block against PyTorch's, block by block
    sized = [(a, n, where[a].get("allocated")) for a, n in gone.items()
             if a in where and where[a].get("allocated") != n]
    if sized:
        print(f"    {len(sized)} blocks sized differently (PyTorch's, the trace's at the capture):")
        for a, n, m in sorted(sized, key=lambda x: -x[1])[:6]:
            print(f"      {a:#x}: {n} B, {m} B; site {where[a].get('site')}")
    print(f"  {'PASS' if ok else 'FAIL'} {k}: {len(gone)} blocks freed, all under it: "
          f"{not missed and not extra}")
    bad |= not ok
sys.exit(1 if bad else 0)
EOF
done
[ $fail = 0 ] && echo "PASS gpu-retention" || echo "FAIL gpu-retention"
exit $fail
