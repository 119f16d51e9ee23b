#!/bin/bash
# tests/gpu/gpu-validate.sh - prove the recorder on a real GPU.
#
# Run from the repository root on a machine with an NVIDIA GPU, nvcc and
# PyTorch. Uses the library and report tool from a bundle made on the
# build machine by scripts/gpu-bundle.sh (GMT_BUNDLE, default .gpubundle/),
# since GPU hosts may lack libunwind. Writes logs and a summary under
# $OUT (default /tmp/gmt-gpu) and exits non-zero if a check failed.
#
# Checks:
#  1. calls:  tests/gpu/gpu_calls.cu built with `nvcc -cudart shared`, run
#             under LD_PRELOAD: every entry point's count, each event
#             kind's count and the bytes allocated match what the program
#             says it did; the trace is closed.
#  2. static: the same program built with nvcc's default static cudart:
#             the runtime hooks see nothing; the driver observer records
#             its allocations (driver API names only).
#  5. stress_vmm, torch_vmm: the stress program and the PyTorch loop with
#             GPUMEMTRACE_POOL_VMM=1 (memory moved between free blocks):
#             zero corruptions, bit-identical losses.
#  6. stress_ordered, torch_ordered: the same with GPUMEMTRACE_POOL_ORDERED=1
#             (blocks reused once a fence is recorded): zero corruptions on
#             blocking streams, the mode ended by non-blocking ones,
#             bit-identical losses.
#  6b. stress_whole, torch_whole: the same with GPUMEMTRACE_POOL_VMM_WHOLE=1
#             (each large segment one mapping, given back unsynchronized),
#             ordered and not: zero corruptions, bit-identical losses;
#             oom_whole: the card filled to out-of-memory and freed, the
#             same errors and checksums as without the library.
#  7. stress_joined, torch_cudnn: a library's own non-blocking streams,
#             forked from and joined to the caller's (libgmtjoin.so, and
#             cuDNN's under resnet50): left out of fences, which stay on,
#             with zero corruptions and bit-identical losses; a library
#             that does not join is caught by the check (control).
#  3. torch:  a PyTorch training loop with PYTORCH_NO_CUDA_MEMORY_CACHING=1
#             under LD_PRELOAD: the trace's cudaMalloc count and requested
#             bytes equal PyTorch's own allocation count and requested
#             bytes from an identical run with its caching allocator, and
#             the losses are the same in both runs.
set -u
OUT=${OUT:-/tmp/gmt-gpu}
ROOT=$(pwd)
B=$(cd "${GMT_BUNDLE:-.gpubundle}" && pwd)
LIB=$B/libgpumemtrace.so
export GPUMEMREPORT=$B/gpumemreport
# the bundle's report tool needs its libdw (gpu-bundle.sh)
export LD_LIBRARY_PATH=$B${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
W=$(mktemp -d)
mkdir -p "$OUT"
fail=0
say() { echo "$*" | tee -a "$OUT/summary.txt"; }
check() { # name, command...: run, log, record pass/fail
    local name=$1
    shift
    local log=$W/$name.log
    if ("$@") >"$log" 2>&1; then # a subshell: checks cd freely
        say "PASS $name: $(tail -n 1 "$log")"
    else
        say "FAIL $name: $(tail -n 3 "$log" | tr '\n' ' ')"
        fail=1
    fi
    { echo "==== $name"; cat "$log"; } >>"$OUT/checks.log"
}

pool_has() { # TRACE KEY: print the trace's pool counters; fail unless KEY > 0
    "$GPUMEMREPORT" info --json "$1" | python3 -c "
import json, sys
d = json.load(sys.stdin)[0]['pool']
print('pool:', d)
sys.exit(0 if d[sys.argv[1]] > 0 else 1)" "$2"
}

say "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
say "gpu: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | head -n 1)"
say "commit: ${GMT_COMMIT:-$(cat "$B/commit" 2>/dev/null || git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
say "nvcc: $(nvcc --version | tail -n 1)"
say "torch: $(python3 -c 'import torch; print(torch.__version__, torch.version.cuda)' 2>&1 | tail -n 1)"

# ---- 1. a CUDA C++ program with a shared cudart --------------------------
nvcc -O2 -cudart shared -o "$W/gpu_calls" "$ROOT/tests/gpu/gpu_calls.cu" 2>"$W/nvcc.log" || cat "$W/nvcc.log" >>"$OUT/checks.log"
calls() {
    cd "$W" && LD_PRELOAD=$LIB GPUMEMTRACE_OUTPUT=calls.gmt ./gpu_calls >calls.out 2>calls.err
    cat calls.err
    python3 "$ROOT/tests/gpu/gpu_check.py" calls calls.out calls.gmt
}
check calls calls
"$GPUMEMREPORT" info "$W/calls.gmt" >"$OUT/calls-info.txt" 2>&1

# ---- 2. the same program with nvcc's default static cudart -------------------
nvcc -O2 -o "$W/gpu_calls_static" "$ROOT/tests/gpu/gpu_calls.cu" 2>>"$W/nvcc.log" || cat "$W/nvcc.log" >>"$OUT/checks.log"
static() {
    cd "$W" && LD_PRELOAD=$LIB GPUMEMTRACE_OUTPUT=static.gmt ./gpu_calls_static >static.out 2>static.err
    cat static.err
    # only the driver observer can see it: driver-level allocations, no
    # runtime calls, the same bytes allocated as the shared build's
    "$GPUMEMREPORT" info --json static.gmt >static.json &&
        python3 -c '
import json, sys
s = json.load(open("static.json"))[0]
drv = {k: v for k, v in s["by_api"].items() if not k.startswith("cuda")}
rt = {k: v for k, v in s["by_api"].items() if k.startswith("cuda")}
assert drv and not rt, s["by_api"]
print("static build traced at the driver level:", drv)'
}
check static static

# ---- 3. PyTorch, uncached, traced vs its own caching allocator -------------------
# Three runs of the same deterministic loop: PyTorch's caching allocator;
# uncached without the library; uncached under the library (pool on, stacks
# on). Losses must be bit-identical between the two uncached runs (the pool
# must not change what is computed), and the trace's allocations must
# match PyTorch's own count of the cached run.
torch_run() {
    local steps=8
    cd "$W" || return 1
    python3 "$ROOT/tests/gpu/torch_train.py" transformer $steps >cached.json 2>cached.err || return 1
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 \
        python3 "$ROOT/tests/gpu/torch_train.py" transformer $steps >plain.json 2>plain.err || return 1
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 LD_PRELOAD=$LIB GPUMEMTRACE_OUTPUT=torch.gmt \
        python3 "$ROOT/tests/gpu/torch_train.py" transformer $steps >uncached.json 2>uncached.err || {
        cat uncached.err
        return 1
    }
    cat uncached.err
    python3 - cached.json plain.json uncached.json <<'PY' || return 1
import json, sys
a, p, b = (json.loads(open(f).read().strip().splitlines()[-1]) for f in sys.argv[1:])
print(f"losses: cached {a['losses'][-1]!r}, uncached {p['losses'][-1]!r}, "
      f"uncached+pool+trace {b['losses'][-1]!r}; all {len(b['losses'])} steps "
      f"identical with/without the library: {p['losses'] == b['losses']}, "
      f"and to the cached run: {a['losses'] == b['losses']}")
sys.exit(0 if p["losses"] == b["losses"] else 1)
PY
    python3 "$ROOT/tests/gpu/gpu_check.py" torch cached.json torch.gmt
}
check torch torch_run
# PyTorch uses the legacy stream only: the pool waited for its fences, not
# for the device (and the losses above stayed bit-identical).
torch_fences() {
    "$GPUMEMREPORT" info --json "$W/torch.gmt" | python3 -c "
import json, sys
d = json.load(sys.stdin)[0]['pool']
print('pool:', d)
sys.exit(0 if d['fence_waits'] > 0 else 1)" && echo "fences used by PyTorch's training loop"
}
check torch_fences torch_fences

# ---- 4. the pool's safety rule: kernels still writing at cudaFree ---------------
# libgmtjoin.so: the fork-join library of STRESS_STREAMS=joined (section 7)
nvcc -O2 -cudart shared -shared -Xcompiler -fPIC -o "$W/libgmtjoin.so" "$ROOT/tests/gpu/joinlib.cu" -lcuda \
    2>>"$W/nvcc.log" || cat "$W/nvcc.log" >>"$OUT/checks.log"
nvcc -O2 -cudart shared -o "$W/stress" "$ROOT/tests/gpu/stress_streams.cu" -L"$W" -lgmtjoin \
    -Xlinker -rpath -Xlinker '$ORIGIN' 2>>"$W/nvcc.log" || cat "$W/nvcc.log" >>"$OUT/checks.log"
stress() {
    cd "$W" || return 1
    echo "without the library (real cudaFree, which waits for the device):"
    ./stress 100 || return 1
    echo "with the pool (rounds, corruptions, addresses reused while the old kernels ran):"
    LD_PRELOAD=$LIB GPUMEMTRACE_OUTPUT=stress.gmt GPUMEMTRACE_VERBOSE=1 ./stress 300 >stress.out 2>stress.err ||
        { cat stress.out stress.err; return 1; }
    cat stress.out stress.err
    "$GPUMEMREPORT" info --json stress.gmt | python3 -c "import json,sys; d=json.load(sys.stdin)[0]; print('pool:', d['pool'])"
    # the streams are non-blocking: fences cover them with an event on each
    pool_has stress.gmt fence_waits || return 1
    grep -q "corrupted_words 0 " stress.out && ! grep -q "reused_addresses 0$" stress.out &&
        echo "zero corruptions, with reuse, through fences on non-blocking streams"
}
check stress stress
# The same on blocking streams, the legacy and the per-thread stream: what
# the pool's fences (events on the legacy stream) cover; it must wait for
# them (fence_waits > 0) and still never hand out memory in use.
stress_blocking() {
    cd "$W" || return 1
    STRESS_STREAMS=blocking ./stress 50 || return 1
    STRESS_STREAMS=blocking LD_PRELOAD=$LIB GPUMEMTRACE_OUTPUT=stressb.gmt GPUMEMTRACE_VERBOSE=1 \
        ./stress 300 >stressb.out 2>stressb.err || { cat stressb.out stressb.err; return 1; }
    cat stressb.out stressb.err
    pool_has stressb.gmt fence_waits || return 1
    grep -q "corrupted_words 0 " stressb.out && ! grep -q "reused_addresses 0$" stressb.out &&
        echo "zero corruptions, with reuse, through fences"
}
check stress_blocking stress_blocking
# ---- 5. the same with virtual memory: memory moves between free blocks ----------
# GPUMEMTRACE_POOL_VMM=1: blocks over 1 MiB sit on mappings (up to 16 MiB)
# the pool unmaps from free blocks and maps where a request needs them.
# Memory taken while an old kernel still wrote into it would corrupt the
# new owner's data; the losses must stay bit-identical too.
stress_vmm() {
    cd "$W" || return 1
    GPUMEMTRACE_POOL_VMM=1 LD_PRELOAD=$LIB GPUMEMTRACE_OUTPUT=stressv.gmt ./stress 300 >stressv.out 2>stressv.err ||
        { cat stressv.out stressv.err; return 1; }
    cat stressv.out stressv.err
    pool_has stressv.gmt segments_freed || return 1
    grep -q "corrupted_words 0 " stressv.out && ! grep -q "reused_addresses 0$" stressv.out &&
        echo "zero corruptions, with reuse, on moving pages"
}
check stress_vmm stress_vmm
# same_losses RUN.json LABEL: the losses of RUN equal the uncached run's
# (plain.json), every step, bit for bit.
same_losses() {
    python3 - plain.json "$1" "$2" <<'PY'
import json, sys
p, v = (json.loads(open(f).read().strip().splitlines()[-1]) for f in sys.argv[1:3])
print(f"losses: uncached {p['losses'][-1]!r}, {sys.argv[3]} {v['losses'][-1]!r}; "
      f"all {len(v['losses'])} steps identical: {p['losses'] == v['losses']}")
sys.exit(0 if p["losses"] == v["losses"] else 1)
PY
}
torch_vmm() {
    cd "$W" || return 1
    [ -s plain.json ] || return 1
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 GPUMEMTRACE_POOL_VMM=1 LD_PRELOAD=$LIB GPUMEMTRACE_OUTPUT=torchv.gmt \
        python3 "$ROOT/tests/gpu/torch_train.py" transformer 8 >vmm.json 2>vmm.err || { cat vmm.err; return 1; }
    cat vmm.err
    "$GPUMEMREPORT" info --json torchv.gmt | python3 -c "
import json, sys
d = json.load(sys.stdin)[0]['pool']
print('pool:', d)"
    same_losses vmm.json uncached+pool+vmm
}
check torch_vmm torch_vmm
# ---- 6. ordered reuse (GPUMEMTRACE_POOL_ORDERED=1): blocks handed out again
# once a fence is recorded after the free, before the GPU reaches it. On
# blocking streams (all ordered after the legacy stream's fence) the new
# owners' writes must still never meet an old kernel's; with non-blocking
# streams the mode must end (one synchronization) before the first one
# exists; the transformer's losses must stay bit-identical, with virtual
# memory too (memory reused at once, unmapped only when idle).
stress_ordered() {
    cd "$W" || return 1
    STRESS_STREAMS=blocking GPUMEMTRACE_POOL_ORDERED=1 GPUMEMTRACE_POOL_VMM=1 LD_PRELOAD=$LIB \
        GPUMEMTRACE_OUTPUT=stresso.gmt GPUMEMTRACE_VERBOSE=1 ./stress 300 >stresso.out 2>stresso.err ||
        { cat stresso.out stresso.err; return 1; }
    cat stresso.out stresso.err
    grep -q "ordered reuse: [1-9][0-9]* fences made" stresso.err || return 1
    GPUMEMTRACE_POOL_ORDERED=1 LD_PRELOAD=$LIB GPUMEMTRACE_OUTPUT=stresson.gmt GPUMEMTRACE_VERBOSE=1 \
        ./stress 300 >stresson.out 2>stresson.err || { cat stresson.out stresson.err; return 1; }
    cat stresson.out stresson.err
    grep -q "ordered reuse off" stresson.err || return 1
    grep -q "corrupted_words 0 " stresso.out && ! grep -q "reused_addresses 0$" stresso.out &&
        grep -q "corrupted_words 0 " stresson.out &&
        echo "zero corruptions, with reuse, ordered on blocking streams and ended by non-blocking ones"
}
check stress_ordered stress_ordered
torch_ordered() {
    cd "$W" || return 1
    [ -s plain.json ] || return 1
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 GPUMEMTRACE_POOL_ORDERED=1 GPUMEMTRACE_POOL_VMM=1 \
        GPUMEMTRACE_VERBOSE=1 LD_PRELOAD=$LIB GPUMEMTRACE_OUTPUT=torcho.gmt \
        python3 "$ROOT/tests/gpu/torch_train.py" transformer 8 >ordered.json 2>ordered.err ||
        { cat ordered.err; return 1; }
    cat ordered.err
    grep -q "ordered reuse: [1-9][0-9]* fences made" ordered.err || return 1
    same_losses ordered.json uncached+pool+vmm+ordered
}
check torch_ordered torch_ordered
# ---- 6b. whole-mapped segments (GPUMEMTRACE_POOL_VMM_WHOLE=1): each large
# segment one mapping, given back (OOM trims here) without a device
# synchronization - with ordered reuse only once a fence shows the GPU past
# its last free. A segment unmapped under a running kernel would fault or
# corrupt; the losses must stay bit-identical.
stress_whole() {
    cd "$W" || return 1
    GPUMEMTRACE_POOL_VMM_WHOLE=1 LD_PRELOAD=$LIB GPUMEMTRACE_OUTPUT=stressw.gmt \
        GPUMEMTRACE_VERBOSE=1 ./stress 300 >stressw.out 2>stressw.err ||
        { cat stressw.out stressw.err; return 1; }
    cat stressw.out stressw.err
    grep -q "segments mapped whole" stressw.err || return 1
    STRESS_STREAMS=blocking GPUMEMTRACE_POOL_ORDERED=1 GPUMEMTRACE_POOL_VMM_WHOLE=1 LD_PRELOAD=$LIB \
        GPUMEMTRACE_OUTPUT=stresswo.gmt GPUMEMTRACE_VERBOSE=1 ./stress 300 >stresswo.out 2>stresswo.err ||
        { cat stresswo.out stresswo.err; return 1; }
    cat stresswo.out stresswo.err
    grep -q "ordered reuse: [1-9][0-9]* fences made" stresswo.err || return 1
    pool_has stresswo.gmt segments_freed || return 1
    grep -q "corrupted_words 0 " stressw.out && ! grep -q "reused_addresses 0$" stressw.out &&
        grep -q "corrupted_words 0 " stresswo.out && ! grep -q "reused_addresses 0$" stresswo.out &&
        echo "zero corruptions, with reuse, on whole-mapped segments given back unsynchronized (ordered and not)"
}
check stress_whole stress_whole
torch_whole() {
    cd "$W" || return 1
    [ -s plain.json ] || return 1
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 GPUMEMTRACE_POOL_ORDERED=1 GPUMEMTRACE_POOL_VMM_WHOLE=1 \
        GPUMEMTRACE_VERBOSE=1 LD_PRELOAD=$LIB GPUMEMTRACE_OUTPUT=torchw.gmt \
        python3 "$ROOT/tests/gpu/torch_train.py" transformer 8 >whole.json 2>whole.err ||
        { cat whole.err; return 1; }
    cat whole.err
    grep -q "segments mapped whole" whole.err || return 1
    same_losses whole.json uncached+pool+whole+ordered
}
check torch_whole torch_whole
# Out of memory with whole segments: the card filled with 8 GiB tensors,
# errors caught, then freed and smaller ones allocated (the free 8 GiB
# segments are given back rather than cut): the same as without the library.
oom_whole() {
    cd "$W" || return 1
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 python3 "$ROOT/tests/gpu/oom_fill.py" >oomn.json 2>oomn.err ||
        { cat oomn.err; return 1; }
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 GPUMEMTRACE_POOL_ORDERED=1 GPUMEMTRACE_POOL_VMM_WHOLE=1 \
        GPUMEMTRACE_VERBOSE=1 LD_PRELOAD=$LIB GPUMEMTRACE_OUTPUT=oomw.gmt \
        python3 "$ROOT/tests/gpu/oom_fill.py" >oomw.json 2>oomw.err || { cat oomw.err; return 1; }
    cat oomw.err
    grep -q "segments mapped whole" oomw.err || return 1
    echo "untraced: $(tail -n 1 oomn.json); whole: $(tail -n 1 oomw.json)"
    [ "$(tail -n 1 oomn.json)" = "$(tail -n 1 oomw.json)" ]
}
check oom_whole oom_whole
# ---- 7. a library's own streams (GPUMEMTRACE_POOL_JOINED_STREAMS) ---------------
# libgmtjoin.so runs the old kernels on 16 non-blocking streams of its own,
# forked from the caller's (blocking) stream and joined back, as cuDNN does.
# Named, its streams are left out of fences: the fences must stay on and
# still never hand out memory its kernels write into, also with ordered
# reuse, which must stay on. Control: the library not joining, left out
# all the same - the late writes must be seen. Not named: its streams
# count as the program's, past 8, and fences go off.
stress_joined() {
    cd "$W" || return 1
    export STRESS_STREAMS=joined
    ./stress 50 || return 1
    GPUMEMTRACE_POOL_JOINED_STREAMS=libgmtjoin LD_PRELOAD=$LIB GPUMEMTRACE_OUTPUT=stressj.gmt \
        GPUMEMTRACE_VERBOSE=1 ./stress 300 >stressj.out 2>stressj.err || { cat stressj.out stressj.err; return 1; }
    cat stressj.out stressj.err
    pool_has stressj.gmt fence_waits || return 1
    grep -q "16 non-blocking streams of libgmtjoin.so left out of fences" stressj.err || return 1
    ! grep -q "fences off" stressj.err || return 1
    GPUMEMTRACE_POOL_JOINED_STREAMS=libgmtjoin GPUMEMTRACE_POOL_ORDERED=1 LD_PRELOAD=$LIB \
        GPUMEMTRACE_OUTPUT=stressjo.gmt GPUMEMTRACE_VERBOSE=1 ./stress 300 >stressjo.out 2>stressjo.err ||
        { cat stressjo.out stressjo.err; return 1; }
    cat stressjo.out stressjo.err
    grep -q "ordered reuse: [1-9][0-9]* fences made" stressjo.err || return 1
    ! grep -q "ordered reuse off" stressjo.err || return 1
    LD_PRELOAD=$LIB GPUMEMTRACE_OUTPUT=stressjd.gmt GPUMEMTRACE_VERBOSE=1 ./stress 100 >stressjd.out 2>stressjd.err ||
        { cat stressjd.out stressjd.err; return 1; }
    cat stressjd.out stressjd.err
    grep -q "fences off: the program created more than 8 non-blocking streams" stressjd.err || return 1
    echo "control, the library not joining:"
    GMTJOIN_NOJOIN=1 GPUMEMTRACE_POOL_JOINED_STREAMS=libgmtjoin LD_PRELOAD=$LIB GPUMEMTRACE_OUTPUT=stressjn.gmt \
        ./stress 100 >stressjn.out 2>stressjn.err
    cat stressjn.out stressjn.err
    grep -q "corrupted_words [1-9]" stressjn.out || return 1
    grep -q "corrupted_words 0 " stressj.out && ! grep -q "reused_addresses 0$" stressj.out &&
        grep -q "corrupted_words 0 " stressjo.out && ! grep -q "reused_addresses 0$" stressjo.out &&
        grep -q "corrupted_words 0 " stressjd.out &&
        echo "zero corruptions, with reuse, through fences and ordered reuse that leave the library's 16 streams out; the control's late writes seen"
}
check stress_joined stress_joined
# cuDNN itself: resnet50 training (convolutions: cuDNN makes 16 streams per
# handle, from libcudnn_graph), cache off. Fences must stay on, leaving
# cuDNN's streams out, and the loss be bit-identical to the run without us.
torch_cudnn() {
    cd "$W" || return 1
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 python3 "$ROOT/tests/gpu/torch_models.py" timm --steps 4 \
        >cudnn-plain.json 2>cudnn-plain.err || { cat cudnn-plain.err; return 1; }
    PYTORCH_NO_CUDA_MEMORY_CACHING=1 GPUMEMTRACE_VERBOSE=1 LD_PRELOAD=$LIB GPUMEMTRACE_OUTPUT=cudnn.gmt \
        python3 "$ROOT/tests/gpu/torch_models.py" timm --steps 4 >cudnn.json 2>cudnn.err || { cat cudnn.err; return 1; }
    cat cudnn.err
    grep -q "non-blocking streams of libcudnn" cudnn.err || return 1
    ! grep -q "fences off" cudnn.err || return 1
    pool_has cudnn.gmt fence_waits || return 1
    python3 - cudnn-plain.json cudnn.json <<'PY'
import json, sys
a, b = (json.loads(open(f).read().strip().splitlines()[-1]) for f in sys.argv[1:])
print(f"resnet50 loss after 4 steps: without the library {a['result']!r}, with it {b['result']!r}")
sys.exit(0 if a["result"] == b["result"] else 1)
PY
}
check torch_cudnn torch_cudnn
"$GPUMEMREPORT" info "$W/torch.gmt" >"$OUT/torch-info.txt" 2>&1
"$GPUMEMREPORT" dump --limit 400 "$W/torch.gmt" >"$OUT/torch-dump-head.txt" 2>&1
cat "$W"/cached.json "$W"/uncached.json >"$OUT/torch-runs.json" 2>/dev/null

say "result: $([ $fail = 0 ] && echo PASS || echo FAIL)"
exit $fail
