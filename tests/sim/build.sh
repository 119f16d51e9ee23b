#!/bin/sh
# build.sh - builds the simulated libcudart.so.13 (tests/sim) and its self
# test, with the same flags as the project Makefile, for working on the
# simulator by itself.
#
#   tests/sim/build.sh [outdir]        build with $CC (default cc)
#   tests/sim/build.sh --check         build + run the self test with gcc
#                                      and clang (and ASan/UBSan, TSan,
#                                      valgrind when available)
#
# Output: <outdir>/libcudart.so.13, <outdir>/libcudart.so -> libcudart.so.13,
# <outdir>/selftest (default outdir: build/sim under the repository root).
set -eu

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
cuda_inc=${CUDA_INC:-/usr/local/cuda/include}
cflags="-std=c11 -D_GNU_SOURCE -O2 -g -fPIC -Wall -Wextra -Werror -pthread -I$cuda_inc"

# Runtime sources: every .c here except the self test's and the driver's
# files (sim_driver.c, sim_drv_*.c), which build libcuda.so.1.
lib_srcs=$(ls "$here"/*.c | grep -v -e '/selftest[^/]*\.c$' -e '/sim_driver\.c$' -e '/sim_drv_[^/]*\.c$')
drv_srcs=$(ls "$here"/sim_driver.c "$here"/sim_drv_*.c)

build() { # build <cc> <outdir> [extra flags...]
    cc=$1 out=$2
    shift 2
    mkdir -p "$out"
    # shellcheck disable=SC2086
    $cc $cflags "$@" -shared -Wl,-soname,libcudart.so.13 \
        -Wl,--version-script="$here/libcudart.map" -o "$out/libcudart.so.13" $lib_srcs
    ln -sf libcudart.so.13 "$out/libcudart.so"
    # shellcheck disable=SC2086
    $cc $cflags "$@" -shared -Wl,-soname,libcuda.so.1 \
        -Wl,--version-script="$here/libcuda.map" -o "$out/libcuda.so.1" $drv_srcs
    ln -sf libcuda.so.1 "$out/libcuda.so"
    # shellcheck disable=SC2086
    $cc $cflags "$@" -I"$here" -o "$out/selftest" "$here"/selftest*.c \
        -L"$out" -lcudart -Wl,-rpath,"$out"
}

if [ "${1:-}" != "--check" ]; then
    build "${CC:-cc}" "${1:-$root/build/sim}"
    exit 0
fi

tmp=${TMPDIR:-/tmp}/gmt-sim-check.$$
trap 'rm -rf "$tmp"' EXIT
for cc in gcc clang; do
    command -v $cc >/dev/null || { echo "== $cc: not installed, skipped"; continue; }
    echo "== $cc"
    build $cc "$tmp/$cc"
    "$tmp/$cc/selftest"
done
echo "== gcc -fsanitize=address,undefined"
build gcc "$tmp/asan" -O1 -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=all
"$tmp/asan/selftest"
echo "== gcc -fsanitize=thread"
build gcc "$tmp/tsan" -O1 -fsanitize=thread
"$tmp/tsan/selftest"
if command -v valgrind >/dev/null; then
    echo "== valgrind"
    valgrind -q --error-exitcode=99 --leak-check=full --errors-for-leak-kinds=definite --show-possibly-lost=no \
        "$tmp/gcc/selftest"
fi
echo "all checks passed"
