/* cmd_html.c - `gpumemreport html`: the run as one self-contained page.
 *
 * One HTML file that opens from disk with no network: the timeline
 * stacked by site (the top sites at the peak as bands, the rest as
 * "other"), with allocated, reserved and driver-reported memory, marks,
 * phases and out-of-memory events; what summary says of each of the
 * first out-of-memory events (html_oom.c); a flame graph of the bytes at
 * the peak or in total; the pool's segments at the peak and at each
 * out-of-memory event; the summary, peak, leaks, growth and transfers
 * tables. Several traces (ranks, processes) are sections of the same
 * page on one time axis.
 *
 * The page is report/html/report.html, .css and .js, compiled in as
 * strings (the Makefile generates $(O)/report/html_page.c). The template
 * holds three markers, each alone on its line: the CSS goes in place of
 * GMT_CSS, the traces' JSON in place of GMT_DATA, the script in place of
 * GMT_JS. The JSON sits in a <script type="application/json"> element,
 * escaped so that nothing in a trace can end it (html_json.c).
 *
 * Output: -o FILE is written beside itself and renamed into place when
 * complete, so a failed run leaves no half page; without -o the page goes
 * to stdout, which must not be a terminal. A trace that cannot be read is
 * one error line and exit 2, and no page.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "html.h"
#include "retention.h"

enum { OPT_OUTPUT = 'o' };

static void usage(FILE *f)
{
    fprintf(f, "usage: %s html [-o FILE.html] [options] TRACE|DIR...\n\n"
               "One self-contained HTML page (no network needed) to see the run:\n"
               "the timeline stacked by the top sites at the peak (hover for the\n"
               "site's stack, drag to zoom), a flame graph of the bytes at the\n"
               "peak or in total, the pool's segments at the peak and at each\n"
               "out-of-memory event, what summary says of the out-of-memory\n"
               "events (the request, its site, the device's memory, what was\n"
               "live, whatif's verdicts), and the summary, peak, leaks, growth\n"
               "and transfers tables. Several traces: one section each, on one\n"
               "time axis. Without -o the page goes to stdout (not to a terminal).\n\n"
               "  -o, --output FILE  write the page to FILE\n"
               "  --top N            sites drawn as bands and rows per table\n"
               "                     (default 10, at most 30 bands; 0: the most)\n"
               "  --group G          group sites by function, line (default) or stack\n"
               "  --depth N          frames per site (stack grouping)\n"
               "  --no-symbols       don't read binaries: frames as module+offset\n",
            gmt_prog);
}

/* The template's part from p up to the next marker line (or the end);
 * *marker: which marker ends it (NULL at the end), *next: after it. */
static size_t upto_marker(const char *p, const char **marker, const char **next)
{
    static const char *const markers[] = {"GMT_CSS", "GMT_DATA", "GMT_JS"};
    for (const char *line = p; *line;) {
        const char *eol = strchr(line, '\n');
        size_t len = eol ? (size_t)(eol - line) : strlen(line);
        const char *s = line;
        while (s < line + len && (*s == ' ' || *s == '\t'))
            s++;
        for (size_t i = 0; i < 3; i++) {
            size_t ml = strlen(markers[i]);
            if ((size_t)(line + len - s) == ml && strncmp(s, markers[i], ml) == 0) {
                *marker = markers[i];
                *next = eol ? eol + 1 : line + len;
                return (size_t)(line - p);
            }
        }
        line = eol ? eol + 1 : line + len;
    }
    *marker = NULL;
    *next = p + strlen(p);
    return strlen(p);
}

/* -o FILE; the page is HTML: --json and --markdown are refused. */
static int option(int opt, const char *arg, void *ctx)
{
    switch (opt) {
    case OPT_OUTPUT:
        *(const char **)ctx = arg;
        return 1;
    case OPT_JSON:
    case OPT_MARKDOWN:
        gmt_usage_error("html", "the page is HTML: no --json or --markdown");
        return -1;
    default:
        return 0;
    }
}

/* Write the page: the template with its markers filled. */
static int page(FILE *f, char **paths, size_t np, const struct gmt_common *c)
{
    const char *p = gmt_html_page, *marker, *next;
    int rc = EXIT_OK;
    for (;;) {
        size_t len = upto_marker(p, &marker, &next);
        fwrite(p, 1, len, f);
        if (marker == NULL)
            break;
        if (strcmp(marker, "GMT_CSS") == 0) {
            fputs(gmt_html_css, f);
        } else if (strcmp(marker, "GMT_JS") == 0) {
            fputs(gmt_html_js, f);
        } else {
            fprintf(f, "{\"schema\":\"gpumemtrace.html/1\",\"traces\":[");
            for (size_t i = 0; i < np && rc == EXIT_OK; i++) {
                /* the timeline by site follows the replay that loads it */
                struct html_pass *hp = html_pass_new();
                struct loaded *l = gmt_load(paths[i], c, &(struct replay_opts){
                                                             .observe = {html_pass_observer(hp),
                                                                         GMT_RETENTION_OBSERVER},
                                                             .growth = true,
                                                             .mark_sites = true});
                if (l == NULL) {
                    html_pass_free(hp);
                    rc = EXIT_ERROR;
                    break;
                }
                if (i)
                    fputc(',', f);
                if (html_trace(f, l, c, hp) != 0)
                    rc = EXIT_ERROR;
                html_pass_free(hp);
                gmt_unload(l);
            }
            fprintf(f, "]}\n");
        }
        p = next;
    }
    return rc;
}

int cmd_html(int argc, char **argv)
{
    static const struct option opts[] = {{"output", required_argument, NULL, OPT_OUTPUT},
                                         {NULL, 0, NULL, 0}};
    static const struct gmt_args args = {
        .options = opts, .shortopts = "o:", .option = option, .usage = usage};
    struct gmt_common c;
    gmt_common_init(&c);
    const char *out = NULL;
    int parsed = gmt_args_parse(argc, argv, &args, &c, &out);
    if (parsed != GMT_PARSED)
        return parsed;
    if (optind >= argc)
        return gmt_usage_error(argv[0], "no trace given");
    if (out == NULL && isatty(STDOUT_FILENO)) {
        gmt_errorf("html: stdout is a terminal; write the page to a file with -o FILE.html");
        return EXIT_ERROR;
    }
    if (out && *out == '\0') {
        gmt_errorf("html: -o needs a file name");
        return EXIT_ERROR;
    }
    char **paths;
    size_t np;
    if (gmt_trace_list(argc - optind, argv + optind, &paths, &np) != 0)
        return EXIT_ERROR;
    struct gmt_out dst = {.f = stdout};
    if (out && gmt_out_open(&dst, "html", out) != 0) {
        gmt_trace_list_free(paths, np);
        return EXIT_ERROR;
    }
    int rc = page(dst.f, paths, np, &c);
    gmt_trace_list_free(paths, np);
    if (out == NULL)
        return gmt_finish_output(rc);
    return gmt_out_close(&dst, rc == EXIT_OK) == 0 ? EXIT_OK : EXIT_ERROR;
}
