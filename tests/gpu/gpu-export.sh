#!/bin/bash
# tests/gpu/gpu-export.sh [BUNDLE] [OUTDIR] - export on the GPU: a real
# PyTorch training trace (tests/gpu/torch_models.py gpt2, bf16, 2 steps,
# PyTorch's allocator and the bridge) exported with `gpumemreport export`
# and read by PyTorch's own torch.cuda._memory_viz: its trace_plot and
# segment_plot must write pages, and its text views (stats, trace) must
# read the pickle. Also writes the page of
# `gpumemreport html` and the other exports, and prints their sizes.
# PASS/FAIL lines; exit 1 if any failed.
set -u
cd "$(dirname "$0")/../.."
B=$(cd "${1:-.gpubundle}" && pwd)
O=${2:-gpu-export-out}
mkdir -p "$O"
export LD_LIBRARY_PATH="$B"
fail=0
check() { if [ "$2" = 0 ]; then echo "PASS $1: $3"; else echo "FAIL $1: $3"; fail=1; fi; }
env LD_PRELOAD="$B/libgpumemtrace.so" GPUMEMTRACE_OUTPUT="$O/gpt2.gmt" \
    GPUMEMTRACE_CACHE="$O/cache" python3 tests/gpu/torch_models.py gpt2 --bf16 --steps 2 \
    > "$O/gpt2.out" 2>&1
check record $? "$(tail -c 300 "$O/gpt2.out")"
"$B/gpumemreport" export --format memory-viz -o "$O/gpt2.pickle" "$O/gpt2.gmt"
check export $? "$(stat -c %s "$O/gpt2.pickle" 2>/dev/null) bytes"
for view in trace_plot segment_plot; do
    python3 -m torch.cuda._memory_viz "$view" "$O/gpt2.pickle" -o "$O/$view.html" \
        > "$O/$view.log" 2>&1
    rc=$?
    [ -s "$O/$view.html" ] || rc=1
    check "_memory_viz $view" $rc "$(stat -c %s "$O/$view.html" 2>/dev/null) bytes; $(tail -c 200 "$O/$view.log")"
done
# (its segments and memory views are not run: they download flamegraph.pl,
# and the GPU machine has no network)
for view in stats trace; do
    python3 -m torch.cuda._memory_viz "$view" "$O/gpt2.pickle" > "$O/$view.txt" 2>&1
    rc=$?
    check "_memory_viz $view" $rc "$(wc -l < "$O/$view.txt") lines: $(head -c 300 "$O/$view.txt" | tr '\n' ' ')"
done
# what the pickle says against the trace: allocations and the peak
python3 - "$O/gpt2.pickle" <<'PY'
import pickle, sys
s = pickle.load(open(sys.argv[1], "rb"))
tr = [e for dev in s["device_traces"] for e in dev]
acts = {}
for e in tr:
    acts[e["action"]] = acts.get(e["action"], 0) + 1
live = peak = 0
for e in tr:
    if e["action"] == "alloc":
        live += e["size"]
    elif e["action"] == "free_requested":
        live -= e["size"]
    peak = max(peak, live)
print(f"pickle: {len(s['segments'])} segments, actions {acts}, peak of alloc - free_requested "
      f"{peak:,} B")
PY
"$B/gpumemreport" info --json "$O/gpt2.gmt" | python3 -c '
import json, sys
d = json.load(sys.stdin); d = d[0] if isinstance(d, list) else d
print("trace: by_kind", {k: v for k, v in d["by_kind"].items() if v})'
"$B/gpumemreport" summary --json "$O/gpt2.gmt" | python3 -c '
import json, sys
t = json.load(sys.stdin)["traces"][0]
fw = t.get("framework") or {}
print("trace: peak_requested", t["peak_requested"], "framework", {k: fw.get(k) for k in ("peak_allocated", "peak_requested", "allocs", "frees")})'
for f in perfetto speedscope pprof; do
    "$B/gpumemreport" export --format $f -o "$O/gpt2.$f" "$O/gpt2.gmt"
    check "export $f" $? "$(stat -c %s "$O/gpt2.$f" 2>/dev/null) bytes"
done
"$B/gpumemreport" html -o "$O/gpt2.html" "$O/gpt2.gmt"
check html $? "$(stat -c %s "$O/gpt2.html" 2>/dev/null) bytes"
exit $fail
