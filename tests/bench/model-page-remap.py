#!/usr/bin/env python3
"""Model a pool that moves physical pages instead of growing.

usage: tests/bench/model-page-remap.py TRACE [SLACK]

Replays a trace's cudaMalloc/cudaFree sequence (via `gpumemreport dump`;
GPUMEMREPORT names the binary, default build/gpumemreport) through a model,
not through pool.c: requests over 1 MiB go to one address range per
device, best fit over free ranges, preferring the placement that needs the
fewest unmapped 2 MiB pages; mapped pages of free ranges stay mapped. When
a request needs new pages and the mapped total would pass SLACK x the peak
requested so far (default 1.0), pages that lie wholly in free ranges are
unmapped and their memory reused instead. Frees are reusable at once (the
model has no pending frees). Requests of 1 MiB or less are counted at
their size. Prints peak reserved / peak requested and the page maps and
unmaps the policy needs; with SLACK of 1e9 it never moves pages (plain
segments that grow in place).
"""
import os
import subprocess
import sys

PAGE = 2 << 20
SMALL = 1 << 20


def events(trace):
    exe = os.environ.get("GPUMEMREPORT", "build/gpumemreport")
    out = subprocess.run([exe, "dump", "--no-stacks", trace], check=True,
                         capture_output=True, text=True).stdout
    for line in out.splitlines():
        f = line.split()
        if len(f) > 7 and f[4] == "alloc" and f[5] == "cudaMalloc":
            yield "A", f[6].split("=")[1], int(f[7].split("=")[1])
        elif len(f) > 6 and f[4] == "free_requested":
            ptr = [x for x in f[5:] if x.startswith("ptr=")]
            if ptr:
                yield "F", ptr[0].split("=")[1], 0


def pages(start, end):
    return range(start // PAGE, (end + PAGE - 1) // PAGE)


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    slack = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    blocks = [[0, 1 << 50, False]]  # [start, size, used], address order
    mapped = set()
    live = {}
    req = peak_req = peak_res = small = maps = unmaps = 0
    for kind, ptr, size in events(sys.argv[1]):
        if kind == "A":
            req += size
            peak_req = max(peak_req, req)
            if size <= SMALL:
                small += size
                live[ptr] = ("s", size)
                continue
            n = (size + 511) // 512 * 512
            best = None
            for i, b in enumerate(blocks):
                if b[2] or b[1] < n:
                    continue
                new = sum(1 for pg in pages(b[0], b[0] + n) if pg not in mapped)
                if best is None or (new, b[1]) < best[0]:
                    best = ((new, b[1]), i)
            i = best[1]
            b = blocks[i]
            s = b[0]
            parts = [[s, n, True]]
            if b[1] > n:
                parts.append([s + n, b[1] - n, False])
            blocks[i:i + 1] = parts
            need = [pg for pg in pages(s, s + n) if pg not in mapped]
            if need and (len(mapped) + len(need)) * PAGE + small > slack * peak_req:
                used = set()
                for x in blocks:
                    if x[2]:
                        used.update(pages(x[0], x[0] + x[1]))
                spare = [pg for pg in mapped if pg not in used]
                for pg in spare[:len(need)]:
                    mapped.discard(pg)
                    unmaps += 1
            for pg in need:
                mapped.add(pg)
                maps += 1
            live[ptr] = ("l", s, size)
        else:
            v = live.pop(ptr, None)
            if v is None:
                continue
            if v[0] == "s":
                small -= v[1]
                req -= v[1]
                continue
            req -= v[2]
            i = next(j for j, x in enumerate(blocks) if x[0] == v[1])
            blocks[i][2] = False
            if i + 1 < len(blocks) and not blocks[i + 1][2]:
                blocks[i][1] += blocks[i + 1][1]
                del blocks[i + 1]
            if i > 0 and not blocks[i - 1][2]:
                blocks[i - 1][1] += blocks[i][1]
                del blocks[i]
        peak_res = max(peak_res, len(mapped) * PAGE + small)
    print("peak_requested %d peak_reserved %d ratio %.4f page_maps %d page_unmaps %d"
          % (peak_req, peak_res, peak_res / max(peak_req, 1), maps, unmaps))


if __name__ == "__main__":
    main()
