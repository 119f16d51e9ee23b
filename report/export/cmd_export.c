/* cmd_export.c - `gpumemreport export`: a trace in another tool's format.
 *
 *   memory-viz  PyTorch's memory snapshot (a pickle), for
 *               pytorch.org/memory_viz and torch.cuda._memory_viz
 *   perfetto    Chrome Trace Event Format JSON, for ui.perfetto.dev and
 *               chrome://tracing: memory counters, OOMs, markers, ranges
 *   speedscope  speedscope's own JSON, weighted in bytes
 *   pprof       a gzipped profile.proto, for `go tool pprof` and pprof's UI
 *
 * One trace in, one file out: -o FILE, or stdout when that is not a
 * terminal (these are files for programs, not text for people). The
 * trace is loaded as for the other commands (replay and symbolizer) and
 * handed to the format's writer (export.h). A file left half-written by
 * a failure is removed.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "export.h"

struct format {
    const char *name;
    int (*write)(struct loaded *l, FILE *out, char *err, size_t errlen);
    const char *what;
};

static const struct format formats[] = {
    {"memory-viz", export_memviz, "PyTorch memory snapshot pickle (pytorch.org/memory_viz)"},
    {"perfetto", export_perfetto, "Chrome Trace Event JSON (ui.perfetto.dev, chrome://tracing)"},
    {"speedscope", export_speedscope, "speedscope JSON in bytes: live at the peak, and in total"},
    {"pprof", export_pprof, "gzipped profile.proto (go tool pprof): in use at the peak, allocated"},
};
#define NFORMATS (sizeof formats / sizeof *formats)

enum { OPT_FORMAT = OPT_CMD_BASE, OPT_OUTPUT = 'o' };

static void usage(FILE *f)
{
    fprintf(f, "usage: %s export --format FORMAT [-o FILE] [--no-symbols] TRACE\n\n"
               "The trace in another tool's format. Formats:\n",
            gmt_prog);
    for (size_t i = 0; i < NFORMATS; i++)
        fprintf(f, "  %-12s %s\n", formats[i].name, formats[i].what);
    fprintf(f, "\n  -o, --output FILE  write there (default: stdout, unless it is a terminal)\n"
               "  --no-symbols       don't read binaries: frames as module+offset\n");
}

struct export_opts {
    const struct format *fmt;
    const char *output;
};

static int option(int opt, const char *arg, void *ctx)
{
    struct export_opts *e = ctx;
    switch (opt) {
    case OPT_FORMAT:
        e->fmt = NULL;
        for (size_t i = 0; i < NFORMATS; i++)
            if (!strcmp(arg, formats[i].name))
                e->fmt = &formats[i];
        if (e->fmt == NULL) {
            gmt_usage_error("export", "no format '%s' (memory-viz, perfetto, speedscope, "
                                      "pprof)", arg);
            return -1;
        }
        return 1;
    case OPT_OUTPUT:
        e->output = arg;
        return 1;
    default:
        return 0;
    }
}

int cmd_export(int argc, char **argv)
{
    static const struct option opts[] = {
        {"format", required_argument, NULL, OPT_FORMAT},
        {"output", required_argument, NULL, OPT_OUTPUT},
        {"no-symbols", no_argument, NULL, OPT_NO_SYMBOLS},
        {NULL, 0, NULL, 0},
    };
    static const struct gmt_args args = {
        .options = opts, .shortopts = "o:", .option = option, .usage = usage, .only_own = true};
    struct export_opts e = {NULL, NULL};
    struct gmt_common c;
    gmt_common_init(&c);
    int parsed = gmt_args_parse(argc, argv, &args, &c, &e);
    if (parsed != GMT_PARSED)
        return parsed;
    const struct format *fmt = e.fmt;
    const char *output = e.output;
    if (argc - optind != 1)
        return gmt_usage_error(argv[0], argc == optind ? "no trace given"
                                                       : "one trace, please (%d given)",
                               argc - optind);
    if (fmt == NULL)
        return gmt_usage_error(argv[0], "--format is required (memory-viz, perfetto, "
                                        "speedscope, pprof)");
    if (output == NULL && isatty(STDOUT_FILENO)) {
        gmt_errorf("export: not writing %s to a terminal; use -o FILE or a pipe", fmt->name);
        return EXIT_ERROR;
    }
    const char *path = argv[optind];
    struct replay_opts ro = {0};
    struct loaded *l = gmt_load(path, &c, &ro);
    if (l == NULL)
        return EXIT_ERROR;
    struct gmt_out dst = {.f = stdout};
    if (output && gmt_out_open(&dst, "export", output) != 0) {
        gmt_unload(l);
        return EXIT_ERROR;
    }
    char err[512] = "";
    int rc = fmt->write(l, dst.f, err, sizeof err);
    if (rc != 0)
        gmt_errorf("%s: %s", path, err[0] ? err : "export failed");
    gmt_unload(l);
    if (output)
        return gmt_out_close(&dst, rc == 0) == 0 ? EXIT_OK : EXIT_ERROR;
    return gmt_finish_output(rc ? EXIT_ERROR : EXIT_OK);
}
