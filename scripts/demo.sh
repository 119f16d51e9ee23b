#!/bin/sh
# scripts/demo.sh - set up and trace an example, on a GPU if there is one.
#
# Installs what the build needs (scripts/install-deps.sh), builds
# gpumemtrace, then runs tests/progs/example.c - a small training loop
# written against the CUDA runtime - under the gpumemtrace launcher and
# reports on the trace: summary, peak, growth, leaks, and writes its HTML
# page (gpumemreport html). With an NVIDIA GPU and nvcc, the example runs on
# the GPU; otherwise it runs on the simulated CUDA runtime of tests/sim,
# and says so.
set -eu
cd "$(dirname "$0")/.."
scripts/install-deps.sh
make -s all
out=$(mktemp -d "${TMPDIR:-/tmp}/gpumemtrace-demo.XXXXXX")
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1 &&
    command -v nvcc >/dev/null 2>&1; then
    echo "== GPU found: $(nvidia-smi -L | head -n 1)"
    nvcc -cudart shared -o "$out/example" tests/progs/example.c
else
    echo "== No GPU found: running the example on the SIMULATED CUDA runtime (tests/sim)."
    echo "   It proves the tracing logic, not GPU behaviour."
    make -s build/tests/example
    cp build/tests/example "$out/example"
    export LD_LIBRARY_PATH="$PWD/build/sim${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
root=$(pwd)
echo "== build/gpumemtrace -- example 20   (the launcher: preloads the library)"
(cd "$out" && "$root/build/gpumemtrace" -o example.gmt -- ./example 20)
for cmd in "summary" "peak --group stack --depth 2" "growth" "leaks"; do
    echo
    echo "== gpumemreport $cmd example.gmt"
    # shellcheck disable=SC2086
    build/gpumemreport $cmd "$out/example.gmt"
done
echo
echo "== gpumemreport html -o example.html example.gmt   (the picture: open it in a browser)"
build/gpumemreport html -o "$out/example.html" "$out/example.gmt"
echo
echo "trace kept in $out/example.gmt, its page in $out/example.html"
echo "(more: gpumemreport --help, docs/usage.md)"
