#!/bin/bash
# tests/gpu/gpu-ctypes.sh [BUNDLE] - ctypes on the GPU: the CUDA
# runtime called through ctypes (dlsym on a dlopened libcudart) is traced
# at the runtime level, with the Python line, and pooled. Runs
# tests/gpu/ctypes_rt.py untraced and traced; prints PASS/FAIL lines and
# exits 1 if any failed.
set -u
cd "$(dirname "$0")/../.."
B=$(cd "${1:-.gpubundle}" && pwd)
T=$(mktemp -d)
fail=0
check() { if [ "$2" = 0 ]; then echo "PASS $1: $3"; else echo "FAIL $1: $3"; fail=1; fi; }
u=$(python3 tests/gpu/ctypes_rt.py); check untraced $? "$u"
t=$(env LD_PRELOAD="$B/libgpumemtrace.so" GPUMEMTRACE_OUTPUT="$T/c.gmt" python3 tests/gpu/ctypes_rt.py)
check traced $? "$t"
export LD_LIBRARY_PATH="$B"
apis=$("$B/gpumemreport" info --json "$T/c.gmt" | python3 -c '
import json, sys
d = json.load(sys.stdin)
d = d[0] if isinstance(d, list) else d
print(json.dumps({k: v for k, v in sorted(d["by_api"].items()) if k.startswith("cuda")}))')
want='{"cudaFree": 1, "cudaMalloc": 2, "cudaMemcpy": 1, "cudaMemset": 1}'
[ "$apis" = "$want" ]; check runtime-calls $? "$apis (want $want)"
line=$(grep -n "SITE ctypes_leak" tests/gpu/ctypes_rt.py | cut -d: -f1)
leaks=$("$B/gpumemreport" leaks "$T/c.gmt")
echo "$leaks" | grep -q "ctypes_rt.py:$line"; check leak-at-line $? "3 MiB at ctypes_rt.py:$line"
echo "$leaks"
"$B/gpumemreport" info "$T/c.gmt" | grep -i pool
rm -rf "$T"
exit $fail
