#!/bin/sh
# scripts/install-deps.sh - install the Debian/Ubuntu packages gpumemtrace
# needs to build and test. Installs only what is missing; uses sudo when
# not root. The CUDA toolkit is not installed here (it is large and comes
# from NVIDIA): the build needs its headers, found through CUDA_HOME
# (default /usr/local/cuda).
set -eu
pkgs="make gcc g++ clang libclang-rt-dev libunwind-dev uthash-dev libdw-dev libelf-dev python3 python3-dev binutils chromium golang-go python3-torch"
# (golang-go: `go tool pprof` reads the profiles of export --format pprof in the tests;
# python3-torch: the retention tests walk real autograd graphs on a CPU PyTorch)
# Node and npm for the browser test's driver, unless a Node install (one
# that bundles npm, which conflicts with Debian's npm) is there already
command -v node >/dev/null 2>&1 || pkgs="$pkgs nodejs"
command -v npm >/dev/null 2>&1 || pkgs="$pkgs npm"
missing=""
for p in $pkgs; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    echo "installing:$missing"
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -q </dev/null
    # shellcheck disable=SC2086
    $sudo apt-get install -y -q --no-install-recommends $missing </dev/null
fi
# The browser test of `gpumemreport html` (tests/e2e/test_html.py) drives
# Debian's /usr/bin/chromium with playwright-core, pinned by the lockfile.
(cd "$(dirname "$0")/../tests/browser" && npm ci --no-audit --no-fund --loglevel=error)
cuda=${CUDA_HOME:-/usr/local/cuda}
if [ ! -f "$cuda/include/cuda_runtime_api.h" ]; then
    echo "install-deps: no CUDA toolkit headers in $cuda; install the CUDA toolkit" \
         "(https://developer.nvidia.com/cuda-downloads) or set CUDA_HOME" >&2
    exit 1
fi
echo "dependencies ok (CUDA headers in $cuda)"
