#!/bin/sh
# scripts/bench-naming.sh [STEPS] - what naming and memory kinds cost in
# the report (docs/benchmarks.md). Traces STEPS (default 20000)
# training-like steps over the PyTorch stand-in (tests/e2e/py/
# site-packages: a leaf, `mul`, backward on the autograd engine's thread,
# a two-block model) and times `peak`, `summary` (its kinds replay) and
# `summary --kinds-at` a missing mark, three runs each, with max RSS.
set -eu
cd "$(dirname "$0")/.."
steps=${1:-20000}
make -s all tests >/dev/null
d=$(mktemp -d "${TMPDIR:-/tmp}/bench-naming.XXXXXX")
trap 'rm -rf "$d"' EXIT
mkdir -m 700 "$d/cache"
cat > "$d/loop.py" <<'PY'
import os
import sys
sys.path.insert(0, os.path.join(os.getcwd(), "tests", "e2e", "py", "site-packages"))
import simmodels  # noqa: E402
import simtorch  # noqa: E402
if simtorch.init() != 0:
    sys.exit("init failed")
for _ in range(int(sys.argv[1])):
    x = simtorch.empty(1 << 20)
    y = simtorch.mul(x)
    grads = y.backward()
    for t in [x, y] + grads + simmodels.Model(2)(4096):
        t.free()
PY
SIM_TORCH_LIB=$PWD/build/tests/torch/lib/libc10_cuda.so GMT_BUILD=$PWD/build \
    LD_PRELOAD=$PWD/build/libgpumemtrace.so GPUMEMTRACE_OUTPUT="$d/t.gmt" \
    GPUMEMTRACE_CACHE="$d/cache" python3 "$d/loop.py" "$steps"
build/gpumemreport info "$d/t.gmt" | grep -i "^records\|^trace"
for run in 1 2 3; do
    for cmd in "peak" "summary" "summary --kinds-at no-such-mark"; do
        # shellcheck disable=SC2086
        /usr/bin/time -f "$cmd: %e s, max RSS %M KB" build/gpumemreport $cmd "$d/t.gmt" \
            >/dev/null 2>"$d/time" || true
        tail -1 "$d/time"
    done
done
