"""No event is lost when many threads allocate at full speed."""
from gmt import *


def test_16_threads_100k_events_each():
    p = run([prog("threads"), "16", "50000"], timeout=600)
    calls = int(p.stdout.split()[1])
    expect(calls == 16 * 100000, p.stdout)
    got = info(one_trace())
    events = got["by_kind"].get("alloc", 0) + got["by_kind"].get("free_requested", 0)
    expect(events == calls, f"trace has {events} events for {calls} calls")
    # the 16 workers, and main: at exit it gives the pool's segments back
    expect(got["threads"] == 17, f"threads: {got['threads']}")


def test_threads_without_stacks():
    p = run([prog("threads"), "8", "20000"], GPUMEMTRACE_STACK_DEPTH="0")
    calls = int(p.stdout.split()[1])
    got = info(one_trace())
    expect(got["by_api"]["cudaMalloc"] + got["by_api"]["cudaFree"] == calls, f"{got['by_api']}")
