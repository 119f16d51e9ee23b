#!/usr/bin/env python3
"""Compare `gpumemreport summary --json`'s memory by kind with PyTorch's
own figures for the same process (tests/gpu/gpu-kinds.sh runs it after
tests/gpu/kinds_memtracker.py).

usage: kinds_compare.py NAME PROGRAM_JSON PREFIX
  PROGRAM_JSON  what kinds_memtracker.py printed: MemTracker's breakdown at
                its peak, and the program's own bytes of parameters,
                buffers, gradients and optimizer state after the last step
  PREFIX        PREFIX.{peak,end,memtracker-peak}.json: `summary --json`
                at the trace's peak, --kinds-at end, --kinds-at
                memtracker-peak

Checks, each a PASS or FAIL line (exit 1 if any failed):
  end      at the mark after the last step: parameters and buffers,
           gradients and optimizer state equal the program's bytes exactly,
           and MemTracker's figures then up to its rounding (it counts each
           storage rounded up to 512 bytes: |difference| < 512 per block)
  mt-peak  at MemTracker's peak (the last "memtracker-peak" mark, the same
           instant): parameters and optimizer state equal MemTracker's up
           to its rounding; activations and temporaries each within
           TOLERANCE of MemTracker's peak total. Gradients are shown, not
           checked, here: MemTracker counts as a gradient the tensor its
           gradient hook was given, which the engine may then copy into
           .grad and give back - a temporary in the trace (its copy is the
           gradient, checked at the end).
"""
import json
import sys

TOLERANCE = 0.01  # of MemTracker's peak total, for activations and temporaries
MiB = 1 << 20


def kinds(path):
    t = json.load(open(path))["traces"][0]
    return {k["kind"]: k for k in t["kinds"]}, t


def main():
    name, prog_path, prefix = sys.argv[1:4]
    prog = json.load(open(prog_path))
    ok = True

    def check(label, good, text):
        nonlocal ok
        ok &= good
        print(f"{'PASS' if good else 'FAIL'} {name} {label}: {text}")

    # at the end: the program's own figures, to the byte
    end, _ = kinds(prefix + ".end.json")
    e = prog["end"]
    mte = prog["memtracker_end"]
    for kind, want, theirs in (
            ("parameters", e["parameters"][0] + e["buffers"][0],
             mte.get("Parameter", 0) + mte.get("Buffer", 0)),
            ("gradients", e["gradients"][0], mte.get("Gradient", 0)),
            ("optimizer_state", e["optimizer_state"][0], mte.get("Optstate", 0))):
        got, blocks = end[kind]["bytes"], end[kind]["blocks"]
        check(f"end {kind}", got == want and abs(got - theirs) < 512 * max(blocks, 1),
              f"{got:,} B in {blocks} blocks; the program's {want:,} B, "
              f"MemTracker's {theirs:,} B")

    # at MemTracker's peak
    mt = prog["memtracker_peak"]
    ours, t = kinds(prefix + ".memtracker-peak.json")
    total = mt.get("Total", 0)
    rows = [("parameters", mt.get("Parameter", 0) + mt.get("Buffer", 0), "round"),
            ("gradients", mt.get("Gradient", 0), None),
            ("optimizer_state", mt.get("Optstate", 0), "round"),
            ("activations", mt.get("Activation", 0), "tol"),
            ("temporaries", mt.get("Temp", 0), "tol"),
            ("held", mt.get("Other", 0), None),
            ("workspaces", 0, None)]
    print(f"{name}: at MemTracker's peak ({total:,} B by MemTracker; "
          f"{t['kinds_at']['requested']:,} B requested in the trace then)")
    print(f"  {'kind':16} {'gpumemtrace':>15} {'MemTracker':>15} {'difference':>24}")
    for kind, theirs, rule in rows:
        got, blocks = ours[kind]["bytes"], ours[kind]["blocks"]
        d = got - theirs
        print(f"  {kind:16} {got:15,} {theirs:15,} {d:+15,} ({100.0 * d / total:+.2f}%)"
              + ("  (MemTracker: Other, the inputs)" if kind == "held" else "")
              + ("  (MemTracker does not see them)" if kind == "workspaces" else ""))
        if rule == "round":
            check(f"mt-peak {kind}", abs(d) < 512 * max(blocks, 1),
                  f"{d:+,} B over {blocks} blocks (MemTracker rounds each up to 512 B)")
        elif rule == "tol":
            check(f"mt-peak {kind}", abs(d) <= TOLERANCE * total,
                  f"{d:+,} B, {100.0 * d / total:+.2f}% of MemTracker's peak "
                  f"(tolerance {100 * TOLERANCE:.0f}%)")

    peak, t = kinds(prefix + ".peak.json")
    print(f"{name}: at the trace's own peak ({t['peak_requested']:,} B requested): "
          + ", ".join(f"{k} {v['bytes'] / MiB:.2f} MiB" for k, v in peak.items()))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
