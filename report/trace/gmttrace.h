/* gmttrace.h - libgmttrace, the trace-reading library: what its users
 * include. It reads a trace (reader.h, defs.h, stacks.h), replays it
 * (replay.h, with backward.h, kinds.h, poolview.h), names its frames
 * (symbols.h, opnames.h, pyclass.h), and prints what it finds the one way
 * every program of the project prints (below: messages, output files,
 * names for the trace's codes, numbers for people).
 *
 * The report commands, the launcher, the unit tests, the fuzzers and the
 * benches link it. Nothing here knows a command: no header of the
 * commands (report/, its wings) is included from this folder.
 */
#ifndef GMT_TRACE_H
#define GMT_TRACE_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "defs.h"
#include "reader.h"
#include "replay.h"
#include "symbols.h"

/* Exit codes of every program that reports: 0 fine, 1 a check failed, 2
 * an error (bad input, bad usage, output that could not be written). */
enum { EXIT_OK = 0, EXIT_CHECK_FAILED = 1, EXIT_ERROR = 2 };

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

#endif /* GMT_TRACE_H */
