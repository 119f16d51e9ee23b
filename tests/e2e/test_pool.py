"""The caching pool on the simulated runtime: never reuses memory that
queued GPU work may still touch, recovers from running out, and stays
honest to the program (cudaMemGetInfo, IPC, stream capture)."""
from gmt import *


def scenario(name, mem="64M", args=(), **env):
    p = run([prog("pool"), name, *args], check=False, SIM_CUDA_MEM=mem, **env)
    expect(p.returncode == 0 and p.stdout.rstrip().endswith("ok"),
           f"pool {name}: exit {p.returncode}\n{p.stdout}{p.stderr}")
    return p


def test_no_reuse_under_pending_work():
    """With fences off, device-wide synchronizations make freed blocks
    reusable: one per wave of frees."""
    p = scenario("reuse", mem="3M", GPUMEMTRACE_POOL_FENCES="0")
    words = p.stdout.split()
    reused = int(words[words.index("reused_addresses") + 1])
    expect(reused > 0, "the scenario must make the pool reuse addresses")
    got = info(one_trace())
    pool = got["pool"]
    # one synchronization per wave of frees, never one per free
    expect(0 < pool["syncs"] <= 2 * 40, f"pool syncs: {pool}")
    expect(pool["free_completed"] == got["by_api"]["cudaFree"], f"{pool} {got['by_api']}")


def fenced(name):
    """Scenario `name` reuses memory through fences only: waits for them,
    no device synchronization, and fences never went off."""
    p = scenario(name, mem="3M", GPUMEMTRACE_VERBOSE="1")
    words = p.stdout.split()
    expect(int(words[words.index("reused_addresses") + 1]) > 0, p.stdout)
    pool = info(one_trace())["pool"]
    expect(pool["fence_waits"] > 0 and pool["syncs"] == 0, f"{pool}")
    expect("fences off" not in p.stderr, p.stderr)


def test_fences_on_the_legacy_stream():
    """Every kernel on the legacy stream: the pool waits for its fences
    (events on that stream), not for the device, and still never hands out
    memory the old kernels write into."""
    fenced("reuse-legacy")


def test_fences_cover_non_blocking_streams():
    """The same waves on four non-blocking streams: a fence records an
    event on each of them as well as on the legacy stream, so the pool
    still waits for fences, not for the device (were the non-blocking
    streams left out, the old kernels' late writes would land in the new
    owners' memory, and the scenario would fail)."""
    fenced("reuse")


def test_ordered_reuse_ends_at_the_first_non_blocking_stream():
    """GPUMEMTRACE_POOL_ORDERED=1 ends before the first non-blocking stream
    exists (its work is not ordered by the legacy stream's fences), saying
    why; fences still cover the stream, and no late write lands in reused
    memory."""
    p = scenario("reuse", mem="3M", GPUMEMTRACE_POOL_ORDERED="1", GPUMEMTRACE_VERBOSE="1")
    expect("ordered reuse off (the program created a non-blocking stream "
           "(cudaStreamCreateWithFlags))" in p.stderr, p.stderr)
    expect("fences off" not in p.stderr, p.stderr)


def test_ordered_reuse_across_blocking_streams():
    """Ordered reuse hands a 4 MiB block freed while a kernel on one
    blocking stream still writes it to the next request at once; the new
    owner's kernel runs on another blocking stream. Only the barrier's
    event on the legacy stream orders the two (the first waits for the
    old kernel, the second for it): the new owner's data survives in
    every round. A barrier without its event (tried in 949d09b) corrupted
    99 of the 100 rounds here, and 342 million words on an H200."""
    p = scenario("ordered-blocking", GPUMEMTRACE_POOL_ORDERED="1", GPUMEMTRACE_VERBOSE="1")
    words = p.stdout.split()
    expect(int(words[words.index("corrupt") + 1]) == 0 and
           int(words[words.index("reused_addresses") + 1]) == 100, p.stdout)
    expect("ordered reuse: 199 fences made frees reusable when recorded" in p.stderr, p.stderr)


def joined(name, **env):
    return scenario(name, mem="3M", GPUMEMTRACE_VERBOSE="1",
                    args=[os.path.join(BUILD, "tests", "libjoinlib.so")], **env)


def test_fences_leave_a_joining_library_s_streams_out():
    """The old kernels run on the 16 non-blocking streams of a library that
    forks them from the legacy stream and joins them back, as cuDNN does.
    Named by GPUMEMTRACE_POOL_JOINED_STREAMS, its streams are left out of
    fences (not past the 8 a fence covers): the fence on the legacy stream
    waits for the joined work, so no late write lands in reused memory, and
    the pool waits for fences, not for the device."""
    for driver in ("0", "1"):  # 1: the runtime creates each stream through the driver
        p = joined("reuse-joined", GPUMEMTRACE_POOL_JOINED_STREAMS="libcudnn, libjoinlib",
                   SIM_CUDA_DRIVER=driver, LD_LIBRARY_PATH=os.path.join(BUILD, "sim"),
                   SIM_NVML="off")
        expect("simcudart" not in p.stderr, p.stderr)  # the driver was found
        pool = info(one_trace())["pool"]
        expect(pool["fence_waits"] > 0 and pool["syncs"] == 0, f"{pool}")
        # the driver's creation under the runtime's is the same stream: not
        # entered (it would count the 16 again, past 8), nor counted twice
        expect("fences off" not in p.stderr, p.stderr)
        expect("pool: 16 non-blocking streams of libjoinlib.so left out of fences"
               in p.stderr, p.stderr)
        os.remove(one_trace())


def test_leaving_out_a_library_that_does_not_join_is_unsafe():
    """Control: the same library not joining its streams back. Left out of
    fences, its late writes land in reused memory (the scenario sees them:
    so the test above could fail); that is why only libraries that join
    may be named."""
    joined("reuse-unjoined", GPUMEMTRACE_POOL_JOINED_STREAMS="libjoinlib")


def test_a_joining_library_s_frees_wait_for_the_device():
    """Inside one call, the same library frees scratch memory while its own
    kernel, on a stream fences leave out, still writes into it (the join
    comes only at the end of the call). Such a free synchronizes the
    device, as the real cudaFree does, so the block is not handed out under
    that kernel (without it, a late write lands in the block's next owner:
    a fence on the legacy stream does not wait for the unjoined stream)."""
    p = joined("joined-scratch", GPUMEMTRACE_POOL_JOINED_STREAMS="libjoinlib")
    words = p.stdout.split()
    expect(int(words[words.index("reused_addresses") + 1]) > 0, p.stdout)
    pool = info(one_trace())["pool"]
    expect(pool["syncs"] >= 16, f"one synchronization per scratch free: {pool}")


def test_other_libraries_streams_count_as_the_program_s():
    """By default only cuDNN's streams are left out: another library's 16
    count as the program's, past the 8 a fence covers, so fences go off and
    the pool synchronizes the device - safe even where it does not join."""
    for name in ("reuse-joined", "reuse-unjoined"):
        p = run([prog("pool"), name, os.path.join(BUILD, "tests", "libjoinlib.so")],
                check=False, SIM_CUDA_MEM="3M", GPUMEMTRACE_VERBOSE="1")
        want = 0 if name == "reuse-joined" else 1  # no late write to see
        expect(p.returncode == want, f"{name}: exit {p.returncode}\n{p.stdout}{p.stderr}")
        expect("corrupt 0 " in p.stdout, p.stdout)
        expect("fences off: the program created more than 8 non-blocking streams "
               "(cudaStreamCreateWithFlags)" in p.stderr, p.stderr)
        os.remove(one_trace())


def test_fences_off_past_eight_non_blocking_streams():
    """Nine non-blocking streams, one past what a fence records events on:
    fences go off, and the pool synchronizes the device instead."""
    p = scenario("reuse-many", mem="3M", GPUMEMTRACE_VERBOSE="1")
    pool = info(one_trace())["pool"]
    expect(pool["fence_waits"] == 0 and pool["syncs"] > 0, f"{pool}")
    expect("fences off: the program created more than 8 non-blocking streams "
           "(cudaStreamCreateWithFlags)" in p.stderr, p.stderr)


def test_fences_off_once_a_non_blocking_stream_is_destroyed():
    """A non-blocking stream destroyed while its kernel still writes into a
    freed block: no later event on it could cover that work, so fences go
    off before it goes, and the pool synchronizes the device instead."""
    p = scenario("reuse-destroyed", mem="3M", GPUMEMTRACE_VERBOSE="1")
    pool = info(one_trace())["pool"]
    expect(pool["fence_waits"] == 0 and pool["syncs"] > 0, f"{pool}")
    expect("fences off: the program destroyed a non-blocking stream "
           "(cudaStreamDestroy)" in p.stderr, p.stderr)


def test_fences_cover_blocking_streams():
    """Two blocking streams, the legacy and the per-thread stream: an event
    on the legacy stream waits for the blocking streams' earlier work, so
    fences stay on and cover them."""
    fenced("reuse-blocking")


def test_fences_off_by_option():
    scenario("reuse-legacy", mem="3M", GPUMEMTRACE_POOL_FENCES="0")
    pool = info(one_trace())["pool"]
    expect(pool["fence_waits"] == 0 and pool["syncs"] > 0, f"{pool}")


def test_detector_sees_unsafe_reuse():
    """Negative control: the hazard made on purpose is detected."""
    scenario("control")


def test_out_of_memory_cascade():
    p = scenario("oom", mem="64M")
    # two per 16 MiB segment, nothing left over: the whole card
    expect("filled 8 blocks" in p.stdout, p.stdout)
    got = info(one_trace())
    # two real out-of-memory failures: the end of the filling loop, and
    # the 100 MiB request; the recovered one in between is not one
    expect(got["by_kind"]["oom"] == 2, f"{got['by_kind']}")
    expect(got["pool"]["oom_states"] == 2, f"{got['pool']}")
    lines = [l for l in dump(one_trace()) if " oom_state " in l]
    expect(len(lines) == 2 and "size=8388608" in lines[0] and "size=104857600" in lines[1]
           and "reserved=" in lines[1], f"{lines}")


def test_mem_get_info_counts_idle_pool_memory():
    scenario("meminfo", mem="256M")


def test_ipc_handles_name_the_block_or_fail_loudly():
    p = scenario("ipc")
    errs = [l for l in p.stderr.splitlines() if "cudaIpcGetMemHandle" in l]
    expect(len(errs) == 1 and errs[0].startswith("gpumemtrace: error:"), p.stderr)


def test_no_pool_activity_during_capture():
    scenario("capture")
    lines = dump(one_trace(), "--no-stacks")
    begin = next(i for i, l in enumerate(lines) if "cudaErrorStreamCaptureUnsupported" in l)
    # the refused cudaMalloc went to the runtime, not the pool: no pool sync
    # and no segment traffic next to it
    window = lines[max(0, begin - 3):begin + 3]
    expect(not any("pool-synchronize" in l or "segment_alloc" in l for l in window),
           "\n".join(window))


def test_pool_off_passes_through():
    # the scenario needs the simulated runtime's own reuse of addresses,
    # which ASan's quarantine (make asan) would hold back
    extra = {"ASAN_OPTIONS": "detect_leaks=0:quarantine_size_mb=0"} if SANITIZED else {}
    scenario("reuse", mem="3M", GPUMEMTRACE_POOL="0", **extra)
    got = info(one_trace())
    expect(got["pool"]["segments_allocated"] == 0 and not got["features"] & 4, f"{got['pool']}")


def test_every_segment_returned_at_exit():
    run([prog("threads"), "8", "20000"])
    pool = info(one_trace())["pool"]
    expect(pool["segments_allocated"] > 0 and
           pool["segments_allocated"] == pool["segments_freed"], f"{pool}")


def vmm_scenario(page_mb, chunk_mb):
    """GPUMEMTRACE_POOL_VMM=1 with pages of page_mb MiB and mappings of at
    most chunk_mb: five freed 8 MiB holes on a full device serve a 24 MiB
    request - their memory moves instead of the device growing - and the
    trace shows each mapping as a segment of its own; IPC on such a block
    is refused loudly; a request no memory can serve fails as the
    runtime's own would; everything goes back at exit."""
    page, chunk = page_mb << 20, chunk_mb << 20
    p = run([prog("vmm")], check=False, SIM_CUDA_MEM="80M", GPUMEMTRACE_POOL_VMM="1",
            GPUMEMTRACE_POOL_VMM_PAGE_MB=str(page_mb),
            GPUMEMTRACE_POOL_VMM_CHUNK_MB=str(chunk_mb))
    expect(p.returncode == 0 and p.stdout.rstrip().endswith("ok"),
           f"vmm: exit {p.returncode}\n{p.stdout}{p.stderr}")
    errs = [l for l in p.stderr.splitlines() if "cudaIpcGetMemHandle" in l]
    expect(len(errs) == 1 and "virtual memory" in errs[0], p.stderr)
    lines = dump(one_trace(), "--no-stacks")
    segs = [(" segment_alloc " in l, int(l.split("size=")[1].split()[0]))
            for l in lines if " segment_alloc " in l or " segment_free " in l]
    expect(segs and all(s % page == 0 and s <= chunk for _, s in segs), f"{segs}")
    maps = [s for alloc, s in segs if alloc]
    unmaps = [s for alloc, s in segs if not alloc]
    # one mapping per 8 MiB block, the 24 MiB block's in chunks, from the
    # holes' memory; the failed 96 MiB request unmapped the other holes
    # and gave them back; the rest unmapped at exit
    want = 10 + -(-24 // chunk_mb)
    expect(len(maps) == want and len(unmaps) == want and
           sum(maps) == 104 << 20 and sum(unmaps) == 104 << 20,
           f"maps {maps}, unmaps {unmaps}, want {want} of each")
    held = peak = 0
    for alloc, s in segs:
        held += s if alloc else -s
        peak = max(peak, held)
    expect(peak == 80 << 20, f"peak held {peak}: the device's 80 MiB")
    oom = [l for l in lines if " oom_state " in l]
    expect(len(oom) == 1 and "largest_free=0 " in oom[0], f"{oom}")


def test_virtual_memory_moves_free_memory():
    vmm_scenario(2, 16)


def test_virtual_memory_with_other_sizes():
    vmm_scenario(4, 8)


def test_free_async_of_pool_blocks_stays_in_the_pool():
    # cudaFreeAsync of a block
    # the pool served went to the runtime - an interior block failed with
    # cudaErrorInvalidValue, a segment's first block freed the whole
    # segment. Both frees succeed, the pool takes them, and the memory is
    # allocated and used again without an error.
    p = run([prog("freeasync")])
    expect("free_async: 0 0" in p.stdout and "last error: 0" in p.stdout, p.stdout)
    frees = [l for l in dump(one_trace()) if "free_requested" in l and "cudaFreeAsync" in l]
    expect(len(frees) == 2 and all("->" not in l for l in frees), frees)


def test_free_on_another_device_is_no_sync_of_this_one():
    # a cudaFree of memory the pool does not own, made
    # while another device is current, made that device's pending blocks
    # reusable as if it had been drained: a kernel still queued wrote into
    # the block handed out again (C lost its bytes).
    p = run([prog("crossfree")], check=False, SIM_CUDA_DEVICES="2")
    expect(p.returncode == 0 and "reused A: no" in p.stdout and "C kept: 1" in p.stdout,
           (p.returncode, p.stdout, p.stderr))


def test_free_of_stream_ordered_memory_is_no_sync():
    # on an H100 a real cudaFree of cudaMallocAsync memory waits
    # for nothing, though the runtime calls it the current device's memory
    # (docs/validation.md); counting it as a synchronization handed out a
    # block a queued kernel still wrote. The driver says which memory is a
    # pool's: only plain device memory of the current device counts.
    p = run([prog("crossfree"), "same"], check=False)
    expect(p.returncode == 0 and "reused A: no" in p.stdout and "C kept: 1" in p.stdout,
           (p.returncode, p.stdout, p.stderr))


IDLE_MODES = ("async", "frompool", "managed", "pitch", "3d", "array", "3darray",
              "cumem", "cumempitch", "cumemmanaged", "cumemasync", "cumemcreate")


def test_idle_pool_memory_goes_to_other_allocators():
    """On an 8 MiB device the pool keeps the 6 MiB of 48 freed 128 KiB
    blocks, and cudaMemGetInfo calls them free. A 4 MiB allocation made
    any other way - the runtime's stream-ordered, managed, pitched, 3D
    and array allocations, the driver's cuMemAlloc family, cuMemCreate -
    that runs out gets them: the pool gives back its idle segments and
    the call is made once more, leaving no error behind, as untraced it
    succeeds at once. (Before, every one of them failed.) The trace shows
    the segments going back before the allocation."""
    failed = []
    for mode in IDLE_MODES:
        for t in traces():
            os.remove(t)
        # the runtime allocates through the driver (the driver's modes
        # share its memory), loaded from the simulator's folder
        env = dict(SIM_CUDA_MEM="8M", SIM_CUDA_DRIVER="1",
                   LD_LIBRARY_PATH=os.path.join(BUILD, "sim"))
        plain = run([prog("idle_give"), mode], traced=False, check=False, **env)
        expect(plain.returncode == 0 and "free 8388608 of 8388608" in plain.stdout and
               "could not be loaded" not in plain.stderr,
               f"{mode} untraced: {plain.stdout}{plain.stderr}")
        p = run([prog("idle_give"), mode], check=False, **env)
        if p.returncode != 0 or not p.stdout.rstrip().endswith("ok") or \
                "free 8388608 of 8388608" not in p.stdout:
            failed.append(f"{mode}: exit {p.returncode}\n{p.stdout}{p.stderr}")
            continue
        lines = dump(one_trace(), "--no-stacks")
        freed = [i for i, l in enumerate(lines) if " segment_free " in l]
        expect(len(freed) >= 2, f"{mode}: segments given back: {len(freed)}")
    expect(not failed, "\n".join(failed))


def test_a_request_that_fits_where_its_segment_does_not():
    """cudaMalloc of 7 MiB on an 8 MiB device: the pool's segment for it
    (a multiple of the request, 14 MiB) cannot be had, but the request
    can: the runtime gets the program's own request as the last word and
    serves it, as untraced. (Before, the call failed.)"""
    p = run([prog("idle_give"), "exact"], check=False, SIM_CUDA_MEM="8M")
    expect(p.returncode == 0 and "exact: 0, last error 0" in p.stdout,
           f"exit {p.returncode}\n{p.stdout}{p.stderr}")


def test_sizes_no_device_has_fail_as_untraced():
    """(size_t)-1, sizes within a rounding of 2^64, 2^63 and one byte more
    than the device, through cudaMalloc, cudaMallocManaged,
    cudaMallocAsync, cudaMallocPitch and cudaMalloc3D with counts whose
    product wraps, cuMemAlloc and cuMemAllocPitch: every call returns what
    it returns untraced, leaves the pointer and the last error as it
    does, and the pool serves the next request. (Before, cudaMalloc of
    (size_t)-1 succeeded with a 512-byte block, and sizes from 2^64 - 2
    MiB crashed the program.) The trace records the wrapped counts as
    more than 2^64 - 1 bytes can say, not as their wrapped product, and
    the pool gave nothing back for any of them above 2^60."""
    env = dict(SIM_CUDA_MEM="64M", LD_LIBRARY_PATH=os.path.join(BUILD, "sim"))
    plain = run([prog("huge")], traced=False, check=False, **env)
    expect(plain.returncode == 0 and plain.stdout.rstrip().endswith("ok"),
           f"untraced: {plain.stdout}{plain.stderr}")
    p = run([prog("huge")], check=False, **env)
    expect(p.returncode == 0 and p.stdout == plain.stdout,
           f"exit {p.returncode}\ntraced:\n{p.stdout}{p.stderr}\nuntraced:\n{plain.stdout}")
    lines = dump(one_trace(), "--no-stacks")
    wrapped = [l for l in lines if " oom " in l and
               any(f" {api} " in l for api in ("cudaMallocPitch", "cudaMalloc3D", "cuMemAllocPitch"))]
    expect(len(wrapped) == 4 and all("size=18446744073709551615" in l for l in wrapped),
           "\n".join(wrapped))
    # up to the requests of one byte more than the device (cudaMalloc's
    # gives the cache back first, as any out-of-memory of the pool's does)
    first = next(i for i, l in enumerate(lines) if " oom " in l)
    last = next(i for i, l in enumerate(lines) if " oom_state " in l and "size=67108865" in l)
    last = max(i for i in range(last) if "size=9223372036854775808" in lines[i])
    expect(not any("segment_free" in l or "pool-synchronize" in l for l in lines[first:last]),
           "the pool gave memory back for a request no device can serve")
