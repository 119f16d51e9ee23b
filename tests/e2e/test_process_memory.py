"""Memory beyond the trace, per process: the library asks NVML for the
device memory this process holds (preload/nvml.c), so two ranks sharing
one card do not each count the other's memory. Run against the simulated
NVML (tests/sim/sim_nvml.c): it lists this process with what the
simulated runtime charged to it plus SIM_NVML_CONTEXT, and another
process (pid 1) with SIM_CUDA_OTHER_USED, which the device-wide figure
(cuMemGetInfo) also counts."""
import json
import os

from gmt import *

MiB = 1 << 20
SIM = os.path.join(BUILD, "sim")


def traced(nvml=True, **env):
    """Run an allocating program; its summary --json object and dump."""
    extra = {"SIM_CUDA_OTHER_USED": "500M", "SIM_NVML_CONTEXT": "100M"}
    if nvml:
        extra["LD_LIBRARY_PATH"] = SIM
    extra.update(env)
    run([prog("launched"), "alloc", str(3 * MiB), "alloc", "2048"], **extra)
    t = one_trace()
    s = json.loads(report("summary", "--json", t).stdout)["traces"][0]
    text = report("summary", t).stdout
    d = dump(t)
    # each proc_mem record with the sample record just before it
    lines = [(d[i - 1], l) for i, l in enumerate(d) if " proc_mem " in l]
    os.unlink(t)
    return s, text, lines


def test_own_figure_from_nvml():
    s, text, lines = traced()
    # NVML's row for this pid: the pool's segment(s) plus the context;
    # beyond the trace is exactly the context, not the other process's 500 MiB
    expect(s["beyond_trace_source"] == "process", s)
    expect(s["beyond_trace"] == 100 * MiB, s["beyond_trace"])
    expect(s["devices"][0]["beyond_trace"] == 100 * MiB, s["devices"])
    expect(lines and all("device=0" in l for _, l in lines), lines)
    for sample, l in lines:  # NVML's figure: what the pool held then + context
        expect(" sample " in sample, sample)
        reserved = int(sample.split("reserved=")[1].split()[0])
        used = int(l.split("used=")[1].split()[0])
        expect(used == reserved + 100 * MiB, (sample, l))
    expect("NVML's per-process figure" in text, text)


def test_device_wide_without_nvml():
    s, text, lines = traced(nvml=False)
    # the driver's free/total: the other process's memory counts
    expect(s["beyond_trace_source"] == "device", s)
    expect(s["beyond_trace"] == 500 * MiB, s["beyond_trace"])
    expect(lines == [], lines)
    expect("device-wide: other processes on the card count too" in text, text)


def test_nvml_that_cannot_see_us_or_fails_is_left_alone():
    # a pid namespace NVML does not see: our pid is never listed
    s, _, lines = traced(SIM_NVML_PID="999999999")
    expect(s["beyond_trace_source"] == "device" and lines == [], (s, lines))
    expect(s["beyond_trace"] == 500 * MiB, s["beyond_trace"])
    s, _, lines = traced(SIM_NVML="off")
    expect(s["beyond_trace_source"] == "device" and lines == [], (s, lines))


def test_no_samples_no_figure():
    s, text, _ = traced(GPUMEMTRACE_SAMPLE_MS="0")
    expect(s["beyond_trace_source"] is None and s["beyond_trace"] == 0, s)
    expect("beyond trace:    unknown" in text, text)
