"""The docs tell the truth about the options: every GPUMEMTRACE_* option
of the table in preload/gmt_options.h is in the options table of
docs/usage.md (its "Options" section) with its default, and that table
lists no option the library doesn't have."""
import os
import re

from gmt import *

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def table_options():
    text = open(os.path.join(ROOT, "preload", "gmt_options.h")).read()
    block = text.split("#define GMT_OPTIONS(X)", 1)[1].split("\n\n", 1)[0]
    # hex options (the session id) are generated, not defaulted
    return {m.group(1): (m.group(3).strip() if m.group(2) != "hex" else None)
            for m in re.finditer(r"X\((\w+),\s*\w+,\s*(\w+),\s*(\"[^\"]*\"|[\w.]+),", block)}


def test_usage_lists_every_option_with_its_default():
    opts = table_options()
    expect(len(opts) >= 10, opts)
    usage = open(os.path.join(ROOT, "docs", "usage.md")).read()
    rows = dict(re.findall(r"^\| `GPUMEMTRACE_(\w+)` \| ([^|]*) \|", usage, re.M))
    for name, default in opts.items():
        expect(name in rows, f"GPUMEMTRACE_{name} is not in docs/usage.md's options table")
        shown = rows[name].strip().strip("`")
        if default is None:
            continue
        if default.startswith('"'):
            expect(shown == default.strip('"'), f"{name}: docs/usage.md says {shown}, table {default}")
        elif default.isdigit():
            expect(shown == default, f"{name}: docs/usage.md says {shown}, table {default}")
    for name in rows:
        expect(name in opts, f"docs/usage.md lists GPUMEMTRACE_{name}, which the library lacks")
