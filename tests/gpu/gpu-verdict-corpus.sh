#!/bin/bash
# tests/gpu/gpu-verdict-corpus.sh [BUNDLE] [OUTDIR] - record the labelled
# corpus the report's verdicts are scored against, on a GPU machine with
# PyTorch, transformers, timm and torchvision: each case of
# tests/gpu/verdict_corpus.py (real models, clean and with faults whose
# truth is known by construction, a crash, an out-of-memory) run under the
# launcher with PyTorch's cache on (the default), and a two-rank job on one
# GPU (tests/gpu/dist_train.py, gloo, steps unmarked). The traces carry
# their function names (--embed-symbols): the report reads them on a
# machine without the run's PyTorch, as CI does, and names the libraries'
# workspaces as it does where the run was.
#
# Writes OUTDIR/NAME.gmt.xz and OUTDIR/NAME.truth.json for each case
# (tests/corpus/verdicts/ takes them as they are), each run's stdout and
# stderr, and OUTDIR/cases.txt. CASES="name ..." records a subset. A
# truth file holds the lines of verdict_corpus.py as the run saw them
# (its fault's line, the OOM's), so traces recorded by older versions of
# the script stay right beside newer ones.
# Exit 1 if a run that should succeed failed or left no trace.
set -u
cd "$(dirname "$0")/../.."
B=$(cd "${1:-.gpubundle}" && pwd)
O=${2:-gpu-verdict-out}
mkdir -p "$O"
O=$(cd "$O" && pwd)
export LD_LIBRARY_PATH="$B"
P=tests/gpu/verdict_corpus.py
# name | arguments | expected exit (0, or 1 for a crash or out of memory)
CORPUS="
clean-gpt2|gpt2|0
clean-bert|bert|0
clean-t5|t5|0
clean-resnet|resnet|0
clean-mobilenet|mobilenet|0
clean-generate|generate --steps 6|0
clean-vit-infer|vit-infer|0
clean-mlp|mlp --steps 40|0
clean-gpt2-marked|gpt2 --mark|0
crash-t5-first|t5 --crash-step 1|1
crash-gpt2-mid|gpt2 --crash-step 7|1
crash-t5-layers|t5 --layers 6 --crash-step 1 --crash-in decoder.block.0|1
single-vit-infer|vit-infer --steps 1|0
clean-gpt2-long|gpt2 --steps 80|0
list-gpt2-long|gpt2 --fault list --steps 80|0
oom-resnet50|oom --steps 2|1
oom-frag|fragoom --steps 1|1
list-gpt2|gpt2 --fault list|0
list-resnet|resnet --fault list|0
list-gpt2-marked|gpt2 --fault list --mark|0
cache-gpt2|gpt2 --fault cache|0
graph-resnet|resnet --fault graph|0
graph-gpt2|gpt2 --fault graph|0
retain-mlp|mlp --fault retain --steps 40|0
every-mobilenet|mobilenet --fault every --steps 15|0
closure-t5|t5 --fault closure|0
global-bert|bert --fault global|0
clean-trainer|trainer|0
list-trainer|trainer --fault list|0
clean-trainer-marked|trainer --mark|0
clean-lightning|lightning|0
every-lightning|lightning --fault every --steps 15|0
clean-lightning-marked|lightning --mark|0
clean-resnet-marked|resnet --mark|0
clean-bert-marked|bert --mark|0
"
fail=0
: > "$O/cases.txt"
while IFS='|' read -r name args want; do
    [ -n "$name" ] || continue
    if [ -n "${CASES:-}" ] && ! [[ " $CASES " == *" $name "* ]]; then continue; fi
    t=$O/$name.gmt
    rm -f "$t" "$t.xz" "$O/$name.truth.json"
    # shellcheck disable=SC2086
    "$B/gpumemtrace" --embed-symbols -o "$t" -- python3 "$P" $args --truth "$O/$name.truth.json" \
        > "$O/$name.out" 2> "$O/$name.err"
    rc=$?
    echo "$name|$args|rc=$rc" >> "$O/cases.txt"
    if [ "$rc" != "$want" ] || [ ! -s "$t" ] || [ ! -s "$O/$name.truth.json" ]; then
        echo "FAIL $name: rc $rc (want $want), trace $(stat -c %s "$t" 2>/dev/null || echo none)"
        tail -5 "$O/$name.err"
        fail=1
    else
        echo "ok   $name ($(stat -c %s "$t") bytes)"
    fi
    [ -s "$t" ] && xz -9 -f "$t"
done <<< "$CORPUS"
# two ranks on one GPU, gloo, no step marks: each rank's loop is 8 steps
if [ -z "${CASES:-}" ] || [[ " $CASES " == *" ranks "* ]]; then
    rm -f "$O"/ranks.r*.gmt*
    "$B/gpumemtrace" --embed-symbols -o "$O/ranks.%R%p.gmt" -- torchrun --standalone --nproc_per_node 2 \
        tests/gpu/dist_train.py --backend gloo --mode ddp --shared-device --steps 8 \
        --marks none --out "$O/ranks-json" > "$O/ranks.out" 2> "$O/ranks.err"
    rc=$?
    echo "ranks|dist_train gloo ddp shared-device 8 steps|rc=$rc" >> "$O/cases.txt"
    for t in "$O"/ranks.r*.gmt; do
        [ -s "$t" ] || continue
        r=$(basename "$t" | sed 's/^ranks\.r\([0-9]*\)\..*/\1/')
        mv "$t" "$O/ranks-r$r.gmt"
        printf '{"workload": "dist_train gloo ddp, 2 ranks on one GPU", "fault": null, "loop_steps": 8, "steps_done": 8, "rank": %s, "file": "dist_train.py"}\n' "$r" > "$O/ranks-r$r.truth.json"
        xz -9 -f "$O/ranks-r$r.gmt"
    done
    if [ "$rc" != 0 ]; then echo "FAIL ranks: rc $rc"; tail -5 "$O/ranks.err"; fail=1; else echo "ok   ranks"; fi
fi
exit $fail
