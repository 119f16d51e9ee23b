#!/bin/sh
# scripts/gpu-bundle.sh [DIR] - put the built library, the launcher, the report tool and
# the shared libraries they need but a GPU host may lack (libunwind) into
# DIR (default .gpubundle/, ignored by git), for carrying to a GPU machine,
# with the commit it was built from in DIR/commit.
# The library's RUNPATH is $ORIGIN, so it finds libunwind next to itself;
# the report tool and the launcher need libdw (and the libelf and libbz2 it
# was built with): run them with LD_LIBRARY_PATH=DIR.
set -eu
dir=${1:-.gpubundle}
make -s all
mkdir -p "$dir"
make -s build/tests/bench_pool
cp build/libgpumemtrace.so build/gpumemreport build/gpumemtrace build/tests/bench_pool "$dir/"
for lib in libunwind.so.8 libunwind-x86_64.so.8 libdw.so.1 libelf.so.1 libbz2.so.1.0; do
    src=$(ldconfig -p | awk -v l="$lib" '$1 == l && /x86-64/ {print $NF; exit}')
    [ -n "$src" ] || { echo "gpu-bundle: $lib not found" >&2; exit 1; }
    cp -L "$src" "$dir/$lib"
done
# what it was built from (tests/gpu/gpu-validate.sh prints it): the commit,
# -dirty when the tree had changes
c=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
git diff --quiet HEAD 2>/dev/null || c="$c-dirty"
echo "$c" > "$dir/commit"
echo "bundle in $dir: $(ls "$dir" | tr '\n' ' ')"
