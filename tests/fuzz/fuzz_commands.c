/* fuzz_commands.c - libFuzzer entry point for the report commands.
 *
 * Each input is a trace: it is written to a memory file and every
 * gpumemreport command runs on it in-process through its entry point
 * (cmd_summary ... cmd_ranks, as main.c's table calls them): the text
 * output and the --json output, `check --max-peak 1`, the same and
 * `--max-growth 1/step` with --allow-damaged (a fuzzed trace is mostly a
 * damaged one, which check refuses without it) and `check` against the
 * trace itself as the baseline, `diff` of the trace against itself,
 * `dump` with and without stacks, `timeline --csv`, `flamegraph --total`,
 * `phases --occurrences`, `html`, `export` in each format, `summary
 * --kinds-at step` (the memory by kind at a mark, a second replay),
 * `ranks` in its three forms, and `whatif` under every allocator model
 * (PyTorch's with a configuration, gpumemtrace's pool with its options,
 * the driver's async pool), with and without --device-memory, whose
 * out-of-memory paths name sites. This covers what fuzz_reader.c leaves
 * out: grouping, the per-command tables and JSON writers, the check
 * verdicts, the allocator models.
 *
 * Always --no-symbols: symbolization opens the binaries a trace names, and
 * a fuzzed trace must not make the fuzzer open arbitrary host files.
 * stdout goes to /dev/null (once, at the first input); error lines go to
 * stderr (run libFuzzer with -close_fd_mask=2, as scripts/fuzz.sh does).
 * No command calls exit(): each returns 0, 1 or 2, whatever the input.
 *
 * Any crash, sanitizer report, hang or unbounded allocation is a bug.
 * Build and run: scripts/fuzz.sh commands (libFuzzer, clang). The test
 * suite runs the same entry point over the corpus and mutations
 * (tests/fuzz/smoke.c) without clang's fuzzer runtime.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "report.h"
#include "whatif/whatif.h" /* cmd_whatif */

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define T "\1" /* stands for the trace's path */
#define MAXARGS 12

struct run {
    int (*fn)(int, char **);
    const char *args[MAXARGS]; /* argv, NULL-terminated; T: the trace */
};

static const struct run runs[] = {
    {cmd_summary, {"summary", "--no-symbols", T}},
    {cmd_summary, {"summary", "--no-symbols", "--json", T}},
    {cmd_summary, {"summary", "--no-symbols", "--kinds-at", "step", "--markdown", T}},
    {cmd_summary, {"summary", "--no-symbols", "--kinds-at", "step", "--json", T}},
    {cmd_peak, {"peak", "--no-symbols", T}},
    {cmd_peak, {"peak", "--no-symbols", "--json", "--group", "stack", T}},
    {cmd_frag, {"frag", "--no-symbols", T}},
    {cmd_frag, {"frag", "--no-symbols", "--json", T}},
    {cmd_retention, {"retention", "--no-symbols", T}},
    {cmd_retention, {"retention", "--no-symbols", "--json", "--top", "0", T}},
    {cmd_timeline, {"timeline", "--no-symbols", T}},
    {cmd_timeline, {"timeline", "--no-symbols", "--json", T}},
    {cmd_timeline, {"timeline", "--no-symbols", "--csv", T}},
    {cmd_leaks, {"leaks", "--no-symbols", T}},
    {cmd_leaks, {"leaks", "--no-symbols", "--json", "--group", "function", T}},
    {cmd_growth, {"growth", "--no-symbols", T}},
    {cmd_growth, {"growth", "--no-symbols", "--json", T}},
    {cmd_phases, {"phases", "--no-symbols", T}},
    {cmd_phases, {"phases", "--no-symbols", "--json", "--occurrences", T}},
    {cmd_transfers, {"transfers", "--no-symbols", "--markdown", T}},
    {cmd_transfers, {"transfers", "--no-symbols", "--json", T}},
    {cmd_flamegraph, {"flamegraph", "--no-symbols", T}},
    {cmd_flamegraph, {"flamegraph", "--no-symbols", "--total", T}},
    {cmd_info, {"info", T}},
    {cmd_info, {"info", "--json", T}},
    {cmd_dump, {"dump", T}},
    {cmd_dump, {"dump", "--no-stacks", "--limit", "100", T}},
    {cmd_ranks, {"ranks", "--no-symbols", T}},
    {cmd_ranks, {"ranks", "--no-symbols", "--json", T}},
    {cmd_ranks, {"ranks", "--no-symbols", "--markdown", "--bytes", T}},
    {cmd_whatif, {"whatif", "--no-symbols", T}},
    /* the driver's pool models every 32 MiB page of what it holds: with
     * no card size, a hostile 2^48-byte request costs 8 M pages */
    {cmd_whatif, {"whatif", "--no-symbols", "--json", "--device-memory", "1GiB", "--policy",
                  "gmt-pool", "--policy", "cuda-async", T}},
    {cmd_whatif, {"whatif", "--no-symbols", "--device-memory", "8MiB", "--policy",
                  "pytorch:max_split_size_mb:20,roundup_power2_divisions:4,"
                  "garbage_collection_threshold:0.5", T}},
    {cmd_whatif, {"whatif", "--no-symbols", "--json", "--device-memory", "16MiB",
                  "--policy", "gmt-pool:ordered,vmm,chunk=4", "--requests", "all", T}},
    {cmd_check, {"check", "--no-symbols", "--max-peak", "1", T}},
    {cmd_check, {"check", "--no-symbols", "--allow-damaged", "--max-growth", "1/step", T}},
    {cmd_check, {"check", "--no-symbols", "--json", "--allow-damaged", "--max-peak", "1", T}},
    {cmd_check, {"check", "--no-symbols", "--json", "--baseline", T, T}},
    {cmd_diff, {"diff", "--no-symbols", T, T}},
    {cmd_diff, {"diff", "--no-symbols", "--json", T, T}},
    {cmd_html, {"html", "--no-symbols", T}},
    {cmd_export, {"export", "--format", "memory-viz", "--no-symbols", T}},
    {cmd_export, {"export", "--format", "perfetto", "--no-symbols", T}},
    {cmd_export, {"export", "--format", "speedscope", "--no-symbols", T}},
    {cmd_export, {"export", "--format", "pprof", "--no-symbols", T}},
};
#define NRUNS (sizeof runs / sizeof *runs)

/* GMT_FUZZ_ALL=1 runs every command on every input; otherwise each input
 * runs RUNS_PER_INPUT of them, chosen by its size and last byte (the trace
 * format does not read a trailing byte of a cut trace specially), so the
 * fuzzer keeps > 200 inputs a second. */
#define RUNS_PER_INPUT 6

static int call(const struct run *r, const char *path)
{
    char *argv[MAXARGS + 1];
    int argc = 0;
    for (; argc < MAXARGS && r->args[argc]; argc++)
        argv[argc] = r->args[argc][0] == '\1' ? (char *)path : (char *)r->args[argc];
    argv[argc] = NULL;
    optind = 0; /* glibc: a full reset of getopt's state */
    opterr = 1;
    return r->fn(argc, argv);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static int all = -1;
    if (all < 0) {
        int fd = open("/dev/null", O_WRONLY);
        if (fd >= 0) {
            fflush(stdout);
            dup2(fd, STDOUT_FILENO);
            close(fd);
        }
        const char *e = getenv("GMT_FUZZ_ALL");
        all = e && *e == '1';
    }
    int fd = memfd_create("trace.gmt", 0);
    if (fd < 0)
        return 0;
    if (size && write(fd, data, size) != (ssize_t)size) {
        close(fd);
        return 0;
    }
    char path[64];
    snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
    if (all) {
        for (size_t i = 0; i < NRUNS; i++)
            call(&runs[i], path);
    } else {
        size_t first = (size + (size ? data[size - 1] : 0u) * 7u) % NRUNS;
        for (size_t i = 0; i < RUNS_PER_INPUT; i++)
            call(&runs[(first + i * 7) % NRUNS], path);
    }
    fflush(stdout);
    clearerr(stdout);
    close(fd);
    return 0;
}
