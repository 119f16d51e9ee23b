/* report.h - what the gpumemreport commands share.
 *
 * Each command lives in its own cmd_<name>.c and exports exactly one entry
 * point, listed in the command table in main.c. Exit codes are the same
 * for all: 0 fine, 1 a check failed, 2 an error (bad input, bad usage,
 * output that could not be written).
 */
#ifndef GMT_REPORT_H
#define GMT_REPORT_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "defs.h"
#include "reader.h"

enum { EXIT_OK = 0, EXIT_CHECK_FAILED = 1, EXIT_ERROR = 2 };

/* ---- cmd_*.c: one entry point each ---------------------------------- */
int cmd_summary(int argc, char **argv);
int cmd_peak(int argc, char **argv);
int cmd_frag(int argc, char **argv);
int cmd_timeline(int argc, char **argv);
int cmd_leaks(int argc, char **argv);
int cmd_growth(int argc, char **argv);
int cmd_phases(int argc, char **argv);
int cmd_transfers(int argc, char **argv);
int cmd_flamegraph(int argc, char **argv);
int cmd_html(int argc, char **argv);
int cmd_export(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_dump(int argc, char **argv);
int cmd_diff(int argc, char **argv);
int cmd_check(int argc, char **argv);
int cmd_ranks(int argc, char **argv);

/* ---- output.c: messages ---------------------------------------------------------- */
extern const char *gmt_prog;
extern const char gmt_version[]; /* "0.1.0 (abc1234)": VERSION, git revision */
/* Print "gpumemreport: <msg>" on stderr. */
void gmt_errorf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void gmt_warnf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Flush stdout and turn a write failure into EXIT_ERROR. */
int gmt_finish_output(int rc);
/* An output file (-o): a regular or new file is written beside itself
 * and renamed into place by gmt_out_close(o, true), or removed with
 * false - never half-written; anything else (/dev/null, a FIFO) is
 * written as it is and never removed or replaced. 0, or -1 with an error
 * line "gpumemreport: CMD: cannot write PATH: ..." printed. */
struct gmt_out {
    FILE *f;
    const char *path, *cmd;
    char *tmp; /* the file beside path; NULL: path itself */
};
int gmt_out_open(struct gmt_out *o, const char *cmd, const char *path);
int gmt_out_close(struct gmt_out *o, bool ok);
/* Bad usage of command cmd: "gpumemreport CMD: <msg>; try 'gpumemreport
 * CMD --help'", one line on stderr; returns EXIT_ERROR. */
int gmt_usage_error(const char *cmd, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* A bad option value, from inside a command's option handler (called by
 * gmt_args_parse): gmt_usage_error for the command being parsed. */
int gmt_value_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- names.c: readable names for the trace's codes ------------------- */
const char *gmt_kind_name(unsigned kind);  /* "alloc", "free", ... */
const char *gmt_api_name(unsigned api);    /* "cudaMalloc", ... (no _ptds) */
const char *gmt_dir_name(unsigned dir);    /* "H2D", ... */
const char *gmt_hostmem_name(unsigned dir);/* "pinned", "pageable", "" */
const char *gmt_cuda_error_name(uint32_t code);
/* Event class for counting: the kind's name, or "oom" for an allocation
 * that failed for lack of memory, "alloc_failed" for other failures. */
const char *gmt_event_class(const struct gmt_rec *rec);

/* ---- output.c: numbers for people ------------------------------------ */
/* "1.50 MiB" (or exact bytes when exact); buf of at least 32 bytes. */
const char *gmt_fmt_bytes(char *buf, uint64_t bytes, bool exact);
void gmt_json_str(FILE *f, const char *s); /* a JSON string literal */
/* The same; html: also safe inside a page's <script> (html_json.c) */
void gmt_json_str_to(FILE *f, const char *s, bool html);
/* Control bytes and invalid UTF-8 in s made '?', in place (for a terminal);
 * returns s. */
char *gmt_printable(char *s);
/* One cell of a Markdown table, escaped: its code spans and a bold cell
 * kept, everything else text (no '|' ends it, no HTML starts in it). */
void gmt_md_cell(FILE *f, const char *s);
/* Length of the valid UTF-8 sequence starting at p (NUL-terminated), or 0. */
int gmt_utf8_len(const unsigned char *p);

#endif /* GMT_REPORT_H */
