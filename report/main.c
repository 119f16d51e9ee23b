/* main.c - gpumemreport: command table and dispatch.
 *
 * `gpumemreport <command> [options] TRACE...`; `gpumemreport help` lists
 * the commands from the table below, `gpumemreport <command> --help`
 * prints that command's usage. With no command name, the first argument
 * is taken as a trace and the default command runs on it.
 */
#include <string.h>

#include "gmt_format.h"

#include "report.h"

struct command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
};

int cmd_whatif(int argc, char **argv); /* cmd_whatif.c */

static const struct command commands[] = {
    {"summary", cmd_summary, "peaks, memory beyond the trace, leaks, OOMs, top sites (default)"},
    {"peak", cmd_peak, "sites live at the peak: bytes, share, allocations"},
    {"frag", cmd_frag, "pool fragmentation at the peak and at out-of-memory, over time"},
    {"timeline", cmd_timeline, "requested and reserved memory over time: chart or CSV"},
    {"leaks", cmd_leaks, "allocations still live at exit, by site"},
    {"growth", cmd_growth, "sites whose live memory rises steadily, with the rate"},
    {"retention", cmd_retention, "which Python objects kept the tensors alive, bytes retained by each"},
    {"phases", cmd_phases, "the run sliced by markers: time, peak, memory kept per phase"},
    {"transfers", cmd_transfers, "copies and sets by direction, pinned/pageable, site"},
    {"flamegraph", cmd_flamegraph, "folded stacks (bytes at the peak or in total)"},
    {"html", cmd_html, "one self-contained HTML page: timeline by site, flame graph, pool, tables"},
    {"export", cmd_export, "memory-viz, perfetto, speedscope or pprof files for their viewers"},
    {"info", cmd_info, "header, process, devices, threads and event counts"},
    {"dump", cmd_dump, "every record in order, readable (stacks as module+offset)"},
    {"diff", cmd_diff, "per-site change between two runs (A before, B after)"},
    {"check", cmd_check, "CI gate: limits or a baseline; exit 1 on a regression"},
    {"whatif", cmd_whatif, "peak reserved under other allocator settings (PyTorch's, ideal)"},
    {"ranks", cmd_ranks, "a multi-rank job: per-rank peaks, imbalance, first OOM, NCCL"},
};
#define NCOMMANDS (sizeof commands / sizeof *commands)
#define DEFAULT_COMMAND "summary"

static void usage(FILE *f)
{
    fprintf(f, "usage: %s <command> [options] TRACE...\n\n"
               "Reads gpumemtrace traces (.gmt files) and reports on them.\n\n"
               "commands:\n", gmt_prog);
    for (size_t i = 0; i < NCOMMANDS; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n'%s <command> --help' describes one command; --version says which\n"
               "gpumemreport this is.\n"
               "Exit status: 0 fine, 1 a check failed, 2 error.\n", gmt_prog);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        gmt_errorf("no command; try '%s help'", gmt_prog);
        return EXIT_ERROR;
    }
    const char *name = argv[1];
    if (!strcmp(name, "--version") || !strcmp(name, "version")) {
        printf("%s %s (trace format %d.%d)\n", gmt_prog, gmt_version, GMT_VERSION_MAJOR,
               GMT_VERSION_MINOR);
        return gmt_finish_output(EXIT_OK);
    }
    if (!strcmp(name, "help") || !strcmp(name, "--help") || !strcmp(name, "-h")) {
        if (argc > 2) {
            for (size_t i = 0; i < NCOMMANDS; i++) {
                if (!strcmp(argv[2], commands[i].name)) {
                    char *args[] = {argv[2], "--help", NULL};
                    return commands[i].run(2, args);
                }
            }
            gmt_errorf("no command '%s'; try '%s help'", argv[2], gmt_prog);
            return EXIT_ERROR;
        }
        usage(stdout);
        return gmt_finish_output(EXIT_OK);
    }
    for (size_t i = 0; i < NCOMMANDS; i++)
        if (!strcmp(name, commands[i].name))
            return commands[i].run(argc - 1, argv + 1);
    if (name[0] != '-' && strchr(name, '.')) { /* looks like a trace */
        for (size_t i = 0; i < NCOMMANDS; i++) {
            if (!strcmp(commands[i].name, DEFAULT_COMMAND)) {
                argv[0] = (char *)DEFAULT_COMMAND;
                return commands[i].run(argc, argv);
            }
        }
    }
    gmt_errorf("no command '%s'; try '%s help'", name, gmt_prog);
    return EXIT_ERROR;
}
