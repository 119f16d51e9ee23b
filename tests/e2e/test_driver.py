"""The driver-level observer: programs that reach the CUDA driver without a
dynamically linked runtime (a static cudart, CuPy, JAX) are traced through
dlsym and cuGetProcAddress; nothing is counted twice when the runtime hooks
see the same allocation. Against the simulated driver (build/sim/libcuda.so.1)."""
import json
import os

from gmt import *

MiB = 1 << 20
SIM = os.path.join(BUILD, "sim")


def drv(mode, **env):
    p = run([prog("drv_calls"), mode], **env)
    expect(p.stdout.rstrip().endswith("done"), p.stdout + p.stderr)
    return p


def summary(path):
    return json.loads(report("summary", "--json", path).stdout)["traces"][0]


def test_static_style_program_observed():
    drv("alloc")
    t = one_trace()
    got = info(t)
    expect(got["by_api"] == {"cuMemAlloc": 3, "cuMemAllocManaged": 1, "cuMemAllocPitch": 1,
                             "cuMemFree": 3},
           f"calls: {got['by_api']}")
    s = summary(t)
    expect(s["peak_requested"] == 6 * MiB + 1000 * 10, f"peak {s['peak_requested']}")
    expect(s["leaked"] == 2 * MiB and s["leaked_allocations"] == 1, f"leak {s['leaked']}")
    expect(s["ooms"] == 1, f"the failed 1 PiB cuMemAlloc is an out-of-memory event: {s['ooms']}")
    expect(s["driver_allocations"] == 4, f"driver allocations {s['driver_allocations']}")
    expect([d["name"] for d in got["devices"]] == ["gpumemtrace simulated device"],
           f"the device is described by the driver: {got['devices']}")
    peak = report("peak", "--group", "line", t).stdout
    expect("drv_calls.c" in peak, f"the allocating line is the program's:\n{peak}")


def test_virtual_memory_accounting():
    drv("vmm")
    t = one_trace()
    s = summary(t)
    # physical memory at cuMemCreate/cuMemRelease; the host-located handle
    # is not device memory; mappings and reservations are address space
    expect(s["peak_requested"] == 4 * MiB, f"device peak {s['peak_requested']}")
    expect(s["peak_mapped"] == 4 * MiB, f"mapped {s['peak_mapped']}")
    expect(s["peak_address_reserved"] == 64 * MiB, f"reserved VA {s['peak_address_reserved']}")
    expect(s["leaked"] == 0 and s["leaked_host"] == 0, f"leaks: {s}")
    text = report("summary", t).stdout
    expect("pinned host:     2.00 MiB" in text, text)
    expect("virtual memory:  4.00 MiB" in text, text)
    lines = dump(t)
    expect(sum("cuMemMap" in l for l in lines) == 2 and sum("cuMemUnmap" in l for l in lines) == 2,
           "\n".join(lines))
    expect("note: one allocation" not in text, text)


def test_arena_hint():
    # one allocation of half the device or more: the summary says it is
    # most likely a framework's arena (JAX preallocates 75%)
    drv("vmm", SIM_CUDA_MEM="4M")
    text = report("summary", one_trace()).stdout
    expect("note: one allocation holds 2.00 MiB (50% of the device)" in text, text)


def test_stream_ordered_allocations():
    p = drv("async")
    expect("per-thread variant differs: yes" in p.stdout, p.stdout)
    t = one_trace()
    got = info(t)
    expect(got["by_api"] == {"cuMemAllocAsync": 1, "cuMemAllocAsync_ptds": 1,
                             "cuMemAllocFromPoolAsync": 1, "cuMemFreeAsync": 2,
                             "cuMemFreeAsync_ptds": 1}, f"calls: {got['by_api']}")
    s = summary(t)
    expect(s["peak_requested"] == 7 * MiB and s["leaked"] == 0, f"{s}")
    # the pools as the driver reports them: the device's pool (1 + 2 MiB)
    # and the program's own (4 MiB), sampled at exit at the latest
    expect(s["stream_ordered_pools"] == 2 and s["pools_peak_reserved"] == 7 * MiB
           and s["pools_peak_used"] == 7 * MiB, f"pools: {s}")
    expect(sum("mempool" in l for l in dump(t)) >= 2, "no pool samples")


def test_pinned_host_memory():
    drv("host")
    s = summary(one_trace())
    expect(s["peak_requested"] == 0, f"host memory is not device memory: {s['peak_requested']}")
    text = report("summary", one_trace()).stdout
    expect("pinned host:     192.00 KiB" in text, text)


def test_dlsym_lookup_observed():
    drv("dlsym")
    got = info(one_trace())
    expect(got["by_api"] == {"cuMemAlloc": 1, "cuMemFree": 1}, f"calls: {got['by_api']}")


def test_copies_and_sets():
    # what a static runtime's cudaMemcpy/cudaMemset become, and what JAX
    # calls itself: direction from the function (or, for cuMemcpy, from
    # the pointers), the host side pinned or pageable
    p = drv("copies")
    expect("copied back: 7" in p.stdout, p.stdout)
    t = one_trace()
    got = info(t)
    expect(got["by_api"] == {"cuMemAlloc": 1, "cuMemAllocHost": 1, "cuMemcpy": 7,
                             "cuMemcpy_ptds": 1, "cuMemset": 3}, f"calls: {got['by_api']}")
    doc = json.loads(report("transfers", "--json", t).stdout)["traces"][0]
    dirs = {(d["direction"], d["host_memory"]): (d["bytes"], d["count"])
            for d in doc["directions"]}
    want = {("H2D", "pageable"): (4196, 2), ("H2D", "pinned"): (16384, 2),
            ("D2H", "pageable"): (4096, 1), ("D2H", "pinned"): (4096, 1),
            ("D2D", "unknown"): (17384, 2)}
    expect(dirs == want, f"directions: {dirs}")
    expect(doc["sets"] == {"bytes": 768, "count": 3}, f"sets: {doc['sets']}")


def test_runtime_through_a_handle():
    """dlsym(handle, "cudaMalloc") on the dlopened
    runtime (what ctypes does) found the runtime's own functions, which
    bypassed the hooks and the pool: only the driver calls underneath were
    recorded, without the runtime's view. The lookup now hands out the
    hooks: the calls are recorded as the runtime calls they are, with the
    caller's stack, and the pool serves them."""
    drv("rthandle", LD_LIBRARY_PATH=SIM, SIM_CUDA_DRIVER="1")
    t = one_trace()
    got = info(t)
    expect(got["by_api"] == {"cudaMalloc": 2, "cudaFree": 1}, f"calls: {got['by_api']}")
    expect(summary(t)["leaked"] == 2 * MiB, "2 MiB left")
    leaks = report("leaks", "--no-symbols", "--json", t).stdout
    expect("mode_rthandle" in report("leaks", t).stdout, f"caller not on the stack: {leaks[:400]}")


def test_threads_observed():
    # 8 threads look the driver up and allocate at once: every call is
    # recorded, once, on its own thread
    drv("threads")
    got = info(one_trace())
    expect(got["by_api"] == {"cuMemAlloc": 8000, "cuMemFree": 8000}, f"calls: {got['by_api']}")
    expect(summary(one_trace())["leaked"] == 0, "leak")
    expect(got["threads"] == 8, f"recording threads: {got['threads']}")


def test_linked_program_observed():
    p = run([prog("drv_linked")])
    expect(p.stdout.strip() == "done", p.stdout + p.stderr)
    got = info(one_trace())
    expect(got["by_api"] == {"cuMemAlloc": 2, "cuMemFree": 1}, f"calls: {got['by_api']}")
    expect(summary(one_trace())["leaked"] == 1 * MiB, "1 MiB left at exit")


def test_linked_stream_calls_reach_the_fences():
    """A program linked with -lcuda creates and destroys a non-blocking
    stream by the exported names: the pool sees both (ordered reuse ends,
    fences go off), as through cuGetProcAddress."""
    p = run([prog("drv_linked"), "stream"], GPUMEMTRACE_VERBOSE="1",
            GPUMEMTRACE_POOL_ORDERED="1")
    expect("ordered reuse off (the program created a non-blocking stream "
           "(cuStreamCreate))" in p.stderr, p.stderr)
    expect("fences off: the program destroyed a non-blocking stream "
           "(cuStreamDestroy)" in p.stderr, p.stderr)


def test_old_abi_passes_through_untouched():
    p = drv("v1")
    expect("v1 passed through: yes" in p.stdout and "v2 differs from v1: yes" in p.stdout,
           p.stdout)
    # it used the driver and allocated nothing we follow: no trace, and no
    # warning (torchrun's agent touches the driver the same way at every
    # run); the reason only with GPUMEMTRACE_VERBOSE
    expect(traces() == [], f"{traces()}")
    expect("gpumemtrace" not in p.stderr, p.stderr)
    p = drv("v1", GPUMEMTRACE_VERBOSE="1")
    expect("used the CUDA driver but nothing was recorded: the program made no CUDA memory call"
           in p.stderr and "warning" not in p.stderr, p.stderr)


def test_non_blocking_stream_seen_at_the_driver():
    """A runtime linked statically (cuDNN's) creates its streams through the
    driver: the observer enters a non-blocking one for the pool's fences to
    cover, so they stay on; its destruction through the driver turns them
    off before it goes (work queued on it may still run)."""
    p = drv("nbstream", GPUMEMTRACE_VERBOSE="1")
    expect("pool: 0 fences recorded" in p.stderr and "fences off" not in p.stderr,
           p.stderr)
    p = drv("nbdestroy", GPUMEMTRACE_VERBOSE="1")
    expect("fences off: the program destroyed a non-blocking stream "
           "(cuStreamDestroy)" in p.stderr, p.stderr)
    p = drv("async", GPUMEMTRACE_VERBOSE="1")  # a blocking one: still on
    expect("pool: 0 fences recorded" in p.stderr and "fences off" not in p.stderr,
           p.stderr)


def test_a_joining_library_s_driver_streams_are_left_out():
    """A non-blocking stream made through the driver by a module that
    GPUMEMTRACE_POOL_JOINED_STREAMS names (here the program itself, as
    cuDNN's libcudnn_graph by default) is not entered: destroying it turns
    nothing off, and the count says whose it was."""
    p = drv("nbdestroy", GPUMEMTRACE_VERBOSE="1", GPUMEMTRACE_POOL_JOINED_STREAMS="libfoo,drv_call")
    expect("fences off" not in p.stderr, p.stderr)
    expect("pool: 1 non-blocking streams of drv_calls left out of fences"
           in p.stderr, p.stderr)


def test_ordered_reuse_ends_at_a_stream_made_before_any_memory_call():
    """The program's first CUDA call creates a non-blocking stream through
    the driver, before anything starts the tracer: the pool's options are
    read there all the same, so GPUMEMTRACE_POOL_ORDERED=1 ends at it (it
    would otherwise be on, with a stream its fences do not order)."""
    p = drv("nbstream", GPUMEMTRACE_VERBOSE="1", GPUMEMTRACE_POOL_ORDERED="1")
    expect("ordered reuse off (the program created a non-blocking stream "
           "(cuStreamCreate))" in p.stderr, p.stderr)


def test_observer_off():
    p = drv("alloc", GPUMEMTRACE_DRIVER="0")
    expect(traces() == [], f"GPUMEMTRACE_DRIVER=0 still traced: {traces()}")
    expect("GPUMEMTRACE_DRIVER=0" in p.stderr, p.stderr)


def test_disabled_is_silent():
    p = drv("alloc", GPUMEMTRACE_DISABLE="1")
    expect(traces() == [] and "gpumemtrace" not in p.stderr, f"{traces()} {p.stderr!r}")


def test_rtld_next_still_starts_after_the_caller():
    plain = run([prog("nexter")], traced=False)
    traced = run([prog("nexter")])
    want = "next: 2\ncuInit: absent\n"
    expect(plain.stdout == want and traced.stdout == want,
           f"plain {plain.stdout!r}, traced {traced.stdout!r}")


def runtime_calls(**env):
    p = run([prog("calls")], LD_LIBRARY_PATH=SIM, **env)
    expect(p.stdout.strip().endswith("ok"), p.stdout + p.stderr)
    return p, info(one_trace())


def test_runtime_allocations_counted_once():
    # The simulated runtime calls the driver under each allocation, as the
    # real one does (SIM_CUDA_DRIVER=1); the trace must be the same.
    for pool in ("1", "0"):
        for f in traces():
            os.unlink(f)
        _, plain = runtime_calls(GPUMEMTRACE_POOL=pool)
        for f in traces():
            os.unlink(f)
        p, via = runtime_calls(GPUMEMTRACE_POOL=pool, SIM_CUDA_DRIVER="1",
                               SIM_CUDA_DRIVER_STATS="1")
        expect(via["by_api"] == plain["by_api"],
               f"pool={pool}: with the driver {via['by_api']}\nwithout {plain['by_api']}")
        expect(not any(k.startswith("cu") and not k.startswith("cuda") for k in via["by_api"]),
               f"driver calls recorded: {via['by_api']}")
        expect(program_kinds(via) == program_kinds(plain), f"{via['by_kind']}")
        # and the driver really was called underneath
        calls = [l for l in p.stderr.splitlines() if l.startswith("sim driver:")]
        expect(calls and int(calls[0].split()[2]) > 0, f"driver not used: {p.stderr}")


def test_free_of_pool_memory_that_bypasses_our_cudaFree():
    """A free of pool memory that does not pass our
    cudaFree reaches the driver: a static runtime's, the program's own
    cuMemFree / cuMemFreeAsync, and (before dlsym(handle) handed out the
    hooks) the runtime's
    cudaFree found with dlsym(handle), as ctypes does. The driver must
    never free pool memory: a segment's first block freed the whole
    segment (C, D and E lost their bytes), an interior one failed. The
    observer hands such frees to the pool. dlsym(handle, "cudaFree") now
    hands out our cudaFree itself."""
    p = run([prog("dlsymfree")], check=False, LD_LIBRARY_PATH=SIM, SIM_CUDA_DRIVER="1")
    want = ("dlsym cudaFree is the library's: yes\n"
            "driver cuMemFree: interior 1, A 0, B 0, A again 1\n"
            "driver cuMemFreeAsync: G 0\n"
            "C kept: 1, D kept: 1, E kept: 1\n"
            "512 KiB at A: yes\n"
            "stale writes: 0\n")
    expect(p.returncode == 0 and p.stdout == want, (p.returncode, p.stdout, p.stderr))
    t = one_trace()
    got = info(t)
    # recorded once each, as the driver calls they were; the refused ones
    # are failed calls
    expect(got["by_api"] == {"cudaMalloc": 7, "cudaMemset": 3, "cudaMemcpy": 3,
                             "cudaDeviceSynchronize": 1, "cuMemFree": 4,
                             "cuMemFreeAsync": 1}, f"calls: {got['by_api']}")
    s = summary(t)
    # C, D, E and the 512 KiB block: A, B and G went back to the pool
    expect(s["leaked"] == 5 * 256 * 1024 and s["leaked_allocations"] == 4, f"{s}")
