#!/bin/sh
# py-offsets.sh - print the row of preload/pystack.c's g_layouts table for
# a CPython, measured from its own headers (the internal ones included).
#
# usage: scripts/py-offsets.sh PYTHON   e.g. ~/.pyenv/versions/3.12.1/bin/python3.12
# Needs the interpreter's headers (a -dev package, or pyenv/conda builds).
set -eu
py=${1:?usage: py-offsets.sh PYTHON}
inc=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
[ -f "$inc/Python.h" ] || { echo "py-offsets.sh: no Python.h in $inc" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cat > "$tmp/off.c" <<'C'
#define Py_BUILD_CORE 1
#include <Python.h>
#include <stddef.h>
#include <stdio.h>
#if PY_VERSION_HEX >= 0x030b0000
#include "internal/pycore_frame.h"
#include "internal/pycore_code.h"
#else
#include <frameobject.h>
#endif
#define O(t, f) (unsigned)offsetof(t, f)
int main(void)
{
    unsigned ts, cf = 0, back, code, instr, owner = 0, co_code = 0, first = 0;
    const char *kind, *fmt, *units = "false";
#if PY_VERSION_HEX >= 0x030d0000
    kind = "PY_CURRENT_FRAME";
    ts = O(PyThreadState, current_frame);
    back = O(_PyInterpreterFrame, previous);
    code = O(_PyInterpreterFrame, f_executable);
    instr = O(_PyInterpreterFrame, instr_ptr);
#elif PY_VERSION_HEX >= 0x030b0000
    kind = "PY_CFRAME";
    ts = O(PyThreadState, cframe);
    cf = O(_PyCFrame, current_frame);
    back = O(_PyInterpreterFrame, previous);
    code = O(_PyInterpreterFrame, f_code);
    instr = O(_PyInterpreterFrame, prev_instr);
#else
    kind = "PY_FRAME_OBJECTS";
    ts = O(PyThreadState, frame);
    back = O(PyFrameObject, f_back);
    code = O(PyFrameObject, f_code);
    instr = O(PyFrameObject, f_lasti);
#endif
#if PY_VERSION_HEX >= 0x030b0000
    owner = O(_PyInterpreterFrame, owner);
    co_code = O(PyCodeObject, co_code_adaptive);
    first = O(PyCodeObject, _co_firsttraceable);
    fmt = "PY_LOCATIONS";
    unsigned name = O(PyCodeObject, co_qualname), table = O(PyCodeObject, co_linetable);
#elif PY_VERSION_HEX >= 0x030a0000
    fmt = "PY_LINETABLE_310";
    units = "true";
    unsigned name = O(PyCodeObject, co_name), table = O(PyCodeObject, co_linetable);
#else
    fmt = "PY_LNOTAB";
    unsigned name = O(PyCodeObject, co_name), table = O(PyCodeObject, co_lnotab);
#endif
    printf("{%d, %d, %s, %u, %u, %u, %u, %u, %u,\n", PY_MAJOR_VERSION, PY_MINOR_VERSION,
           kind, ts, cf, back, code, instr, owner);
    printf(" %u, %u, %u, %u, %u, %u, %u, %u, %s, %s},\n", O(PyCodeObject, co_filename),
           name, table, O(PyCodeObject, co_firstlineno), co_code, first,
           (unsigned)sizeof(PyASCIIObject), (unsigned)sizeof(PyCompactUnicodeObject),
           fmt, units);
    return 0;
}
C
${CC:-cc} -w -I"$inc" -I"$inc/internal" "$tmp/off.c" -o "$tmp/off"
"$tmp/off"
