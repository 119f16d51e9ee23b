"""The map of the code (docs/architecture.md) is true, and the walls it
draws hold: libgmttrace (report/trace/) includes no header of the
commands, the launcher sees libgmttrace and preload/'s shared headers
only, and the preloaded library includes nothing of report/."""
import glob
import os
import re

from gmt import *

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)


def rel(p):
    return os.path.relpath(p, ROOT)


def sources(folder):
    return sorted(glob.glob(os.path.join(ROOT, folder, "*.[ch]")) +
                  glob.glob(os.path.join(ROOT, folder, "*.cpp")))


def resolve(src, name, search):
    """Where a quoted include lands: the including file's folder first,
    then the -I folders in order (the compiler's rule); None: nowhere in
    the tree (a system or generated header)."""
    for d in [os.path.dirname(src)] + [os.path.join(ROOT, s) for s in search]:
        p = os.path.normpath(os.path.join(d, name))
        if os.path.isfile(p):
            return rel(p)
    return None


def includes(folder, search):
    for src in sources(folder):
        for name in INCLUDE.findall(open(src, errors="replace").read()):
            yield rel(src), name, resolve(src, name, search)


def test_trace_library_includes_no_command_header():
    # searched as if report/ were on the path too: an include that would
    # only resolve there is a wall crossed, even if the build refuses it
    seen = 0
    for src, name, got in includes("report/trace", ["preload", "report/trace", "report"]):
        seen += 1
        expect(got is None or got.startswith(("report/trace/", "preload/")),
               f"{src} includes {name} ({got}): libgmttrace knows no command")
        expect(got is None or got.split("/")[-1] not in ("internal.h", "pool_internal.h"),
               f"{src} includes {got}: the preloaded library's internals")
    expect(seen > 20, f"only {seen} includes read in report/trace/")


def test_launcher_links_the_library_not_the_commands():
    for src, name, got in includes("report/launcher", ["preload", "report/trace", "report"]):
        expect(got is None or got.startswith(("report/trace/", "report/launcher/", "preload/")),
               f"{src} includes {name} ({got}): the launcher sees libgmttrace only")
    mk = open(os.path.join(ROOT, "Makefile")).read()
    rule = re.search(r"^LAUNCHER_OBJ\s*:=(.*)$", mk, re.M)
    expect(rule and "REPORT_OBJ" not in rule.group(1) and "CMD_" not in rule.group(1),
           f"the launcher's objects: {rule.group(1) if rule else 'no LAUNCHER_OBJ'}")


def test_preload_includes_nothing_of_report():
    n = 0
    for src, name, got in includes("preload", ["preload", "report", "report/trace"]):
        n += 1
        expect(got is None or got.startswith("preload/"),
               f"{src} includes {name} ({got}): the library never includes the report's code")
    expect(n > 30, f"only {n} includes read in preload/")


def folder_rows():
    doc = open(os.path.join(ROOT, "docs", "architecture.md")).read()
    table = doc.split("## The folders", 1)[1].lstrip("\n").split("\n\n", 1)[0]
    rows = {}
    for line in table.splitlines():
        m = re.match(r"^\| `([^`]+)`", line)
        if m:
            rows[m.group(1).rstrip("/")] = line
    return rows


def test_architecture_map_names_every_report_file():
    rows = folder_rows()
    folders = ["report"] + sorted(rel(d) for d in glob.glob(os.path.join(ROOT, "report", "*"))
                                  if os.path.isdir(d) and not d.endswith("__pycache__"))
    expect(len(folders) >= 6, folders)
    missing = []
    for folder in folders:
        expect(folder in rows, f"docs/architecture.md has no row for {folder}/")
        row = rows[folder]
        named = set(re.findall(r"`([\w.+-]+\.(?:c|h|js|css|html))`", row))
        for src in glob.glob(os.path.join(ROOT, folder, "*")):
            base = os.path.basename(src)
            if not re.search(r"\.(c|h|js|css|html)$", base):
                continue
            covered = base in named or (base.startswith("cmd_") and "`cmd_<name>.c`" in row)
            if not covered:
                missing.append(f"{folder}/{base}")
        for name in named:
            expect(os.path.isfile(os.path.join(ROOT, folder, name)),
                   f"docs/architecture.md's row for {folder}/ names {name}, which is not there")
    expect(not missing, f"docs/architecture.md's folder rows do not name {', '.join(missing)}")


def test_architecture_map_names_real_folders():
    rows = folder_rows()
    for top in ("preload", "report", "scripts", "tests", "docs"):
        expect(top in rows, f"docs/architecture.md has no row for {top}/")
    for folder in rows:
        path = folder.split(" ")[0].split(",")[0]
        expect(os.path.exists(os.path.join(ROOT, path)),
               f"docs/architecture.md has a row for {folder}, which is not in the tree")
