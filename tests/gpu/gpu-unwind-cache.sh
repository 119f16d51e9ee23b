#!/bin/sh
# tests/gpu/gpu-unwind-cache.sh [WORKLOAD...] - on a GPU machine, with the
# bundle of scripts/gpu-bundle.sh in .gpubundle: trace each real model
# (tests/gpu/torch_models.py; default llama timm, cache off) with the
# unwind cache on and off (GPUMEMTRACE_UNWIND_CACHE), and check that the
# two traces define the same stacks, frame for frame. Prints the stacks
# the cache served and the ones unwound in full (GPUMEMTRACE_VERBOSE).
# UNWIND_CACHE_ORDER="0 1" runs without the cache first (the first run
# of a fresh machine reads the libraries from disk). Exit status: 0 when
# every workload's stacks are the same.
set -u
cd "$(dirname "$0")/../.."
B=$PWD/.gpubundle
export LD_LIBRARY_PATH=$B
tmp=$(mktemp -d)
rc=0
[ $# -gt 0 ] || set -- llama timm
for w in "$@"; do
    args=$w
    case $w in llama|gpt2|bert|effnet|tv-vit) args="$w --bf16" ;; esac
    for c in ${UNWIND_CACHE_ORDER:-1 0}; do
        rm -f "$tmp/$w-$c.gmt"
        PYTORCH_NO_CUDA_MEMORY_CACHING=1 GPUMEMTRACE_UNWIND_CACHE=$c \
            GPUMEMTRACE_VERBOSE=1 GPUMEMTRACE_OUTPUT="$tmp/$w-$c.gmt" \
            LD_PRELOAD="$B/libgpumemtrace.so" \
            python3 tests/gpu/torch_models.py $args --steps 6 \
            >"$tmp/$w-$c.out" 2>"$tmp/$w-$c.err" || { echo "$w cache=$c failed"; tail -5 "$tmp/$w-$c.err"; rc=1; }
        grep "stacks:" "$tmp/$w-$c.err" | sed "s/^/$w cache=$c: /"
        "$B/gpumemreport" dump "$tmp/$w-$c.gmt" >"$tmp/$w-$c.dump"
    done
    python3 - "$tmp/$w-1.dump" "$tmp/$w-0.dump" "$w" <<'PY' || rc=1
import collections, re, sys
def stacks(path):
    got, cur = collections.Counter(), None
    for line in open(path):
        if re.match(r"\s+#\d+ ", line) and cur is not None:
            cur.append(line.split(None, 1)[1].strip())
            continue
        if cur is not None:
            got[tuple(cur)] += 1
            cur = None
        if " stack " in line and "id=" in line:
            cur = []
    if cur is not None:
        got[tuple(cur)] += 1
    return got
a, b = stacks(sys.argv[1]), stacks(sys.argv[2])
frames = sum(len(k) * n for k, n in a.items())
same = a == b
print(f"{sys.argv[3]}: {sum(a.values())} stacks ({frames} frames) with the cache, "
      f"{sum(b.values())} without: {'the same' if same else 'DIFFERENT'}")
if not same:
    print("  only with the cache:", sum((a - b).values()), " only without:", sum((b - a).values()))
sys.exit(0 if same else 1)
PY
done
rm -rf "$tmp"
exit $rc
