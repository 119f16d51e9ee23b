/* html.h - what the files of `gpumemreport html` share (cmd_html.c).
 *
 * The report is one self-contained page: the page's own source
 * (report/html/report.html, report.css, report.js), turned into C strings
 * at build time (the Makefile writes $(O)/report/html_page.c), with each
 * trace's data as JSON in a <script type="application/json"> element that
 * the page's script reads. html_trace.c writes a trace's JSON object;
 * html_pass.c follows the replay that loads a trace for its timeline by
 * site and its pool pictures; html_oom.c its out-of-memory events, explained;
 * html_json.c writes JSON that is safe inside a <script> element.
 */
#ifndef GMT_HTML_H
#define GMT_HTML_H

#include <stdio.h>

#include "common.h"
#include "poolview.h"

/* ---- $(O)/report/html_page.c (generated) ----------------------------- */
extern const char gmt_html_page[]; /* report.html: the markers below */
extern const char gmt_html_css[];  /* report.css */
extern const char gmt_html_js[];   /* report.js */

/* ---- html_json.c ------------------------------------------------------- */
/* A JSON string that can sit inside <script>: '<', '>', '&', U+2028 and
 * U+2029 as \u escapes (no "</script>" or "<!--" can form), control
 * characters escaped, invalid UTF-8 as U+FFFD. NULL writes "". */
void html_str(FILE *f, const char *s);
/* "key": string, preceded by a comma when `comma`. */
void html_kv_str(FILE *f, bool comma, const char *key, const char *s);

/* ---- html_pass.c: the timeline by site, the pool pictures -------------- */
#define HTML_BUCKETS 2000   /* timeline columns kept per trace */
#define HTML_MAX_MARKS 2000 /* marks and phases drawn; all are counted */
#define HTML_MAX_SNAPS 33   /* pool pictures: the peak and 32 OOMs */
#define HTML_SEGS 1000      /* segments listed per pool picture */
#define HTML_PIECES 8000    /* pieces of their maps, at the peak (a quarter at an OOM) */

struct html_mark {
    uint64_t at, end;       /* ns from the start; end: phases only */
    const char *name;       /* the trace's string (defs) */
    int type;               /* GMT_MARK, GMT_MARK_PUSH (a phase) */
    int depth;
};

struct html_snap {
    const struct oom *oom;  /* NULL: the peak */
    uint64_t seq, at;
    int64_t device;
    bool taken;
    struct pv_state st;
    /* the maps of st.segs[0..min(nsegs, HTML_SEGS)): npieces[i] pieces
     * each, one after another in pieces[] */
    struct pv_piece *pieces;
    uint32_t *npieces;
};

/* The timeline by site: per bucket, the largest requested bytes in it and
 * the bytes of each band (the top sites at the peak, then "other") at that
 * moment - so the peak's column is the picture at the peak, exactly - and
 * the largest allocated, reserved and driver-reported bytes in it. */
struct html_timeline {
    int nbands;             /* sites, plus one for other */
    size_t n;               /* buckets in use */
    uint64_t bucket_ns;
    int64_t *requested, *allocated, *reserved, *device_used; /* [n]; used < 0: none */
    int64_t *band;          /* [n * nbands] */
    struct html_mark *marks;
    size_t nmarks;
    uint64_t marks_total;
    struct html_snap snaps[HTML_MAX_SNAPS];
    size_t nsnaps;
    uint64_t pool_odd;
};

/* The pass follows the replay that loads the trace: html_pass_observer(p)
 * goes in its replay_opts.observe (p NULL: an observer with no hook).
 * html_pass_finish then fills *tl: the bands are the sites whose stack ids
 * are in ids[] (sorted) with band[] beside them, nsites bands; every other
 * site is band nsites ("other"). It replays the trace once more when
 * following it could not give the whole picture (html_pass.c says when).
 * 0, or -1 with err set. */
struct html_pass;
struct html_pass *html_pass_new(void);
struct replay_observer html_pass_observer(struct html_pass *p);
int html_pass_finish(struct html_pass *p, const struct loaded *l, const uint32_t *ids,
                     const int *band, size_t nids, int nsites, struct html_timeline *tl,
                     char *err, size_t errlen);
void html_pass_free(struct html_pass *p);
void html_timeline_free(struct html_timeline *tl);

/* ---- html_oom.c ------------------------------------------------------- */
/* ,"oom_events":[...]: summary's out-of-memory events (the first
 * OOMX_FULL explained, one more pass over the trace each), with at most
 * `rows` live sites each and the rest's bytes summed. */
void html_oom(FILE *f, struct loaded *l, const struct gmt_common *c, size_t rows);

/* ---- html_trace.c ------------------------------------------------------ */
/* Write trace l's JSON object; p followed its replay (html_pass_new).
 * 0, or -1 after one error line. */
int html_trace(FILE *f, struct loaded *l, const struct gmt_common *c, struct html_pass *p);

#endif /* GMT_HTML_H */
