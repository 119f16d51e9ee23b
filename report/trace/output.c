/* output.c - messages, numbers and strings for people and for JSON.
 *
 * A report that could not be written is a failure (exit 2): CI must not
 * mistake a truncated report for a good one.
 */
#include <errno.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "gmttrace.h"

const char *gmt_prog = "gpumemreport";

void gmt_errorf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: ", gmt_prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void gmt_warnf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s: warning: ", gmt_prog);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int gmt_usage_error(const char *cmd, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "%s %s: ", gmt_prog, cmd);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "; try '%s %s --help'\n", gmt_prog, cmd);
    va_end(ap);
    return EXIT_ERROR;
}

/* The mode a new file gets (0666 less the umask): mkstemp's 0600 is for
 * temporary files, the output is the user's. */
static mode_t file_mode(void)
{
    mode_t m = umask(022);
    umask(m);
    return 0666 & ~m;
}

int gmt_out_open(struct gmt_out *o, const char *cmd, const char *path)
{
    *o = (struct gmt_out){.path = path, .cmd = cmd};
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        /* a device (/dev/null), a FIFO: written as it is, never replaced */
        if ((o->f = fopen(path, "wb")) == NULL) {
            gmt_errorf("%s: cannot write %s: %s", cmd, path, strerror(errno));
            return -1;
        }
        return 0;
    }
    size_t len = strlen(path) + 8;
    int fd = -1;
    if ((o->tmp = malloc(len)) != NULL) {
        snprintf(o->tmp, len, "%s.XXXXXX", path);
        fd = mkstemp(o->tmp);
    }
    if (fd < 0 || (o->f = fdopen(fd, "wb")) == NULL) {
        gmt_errorf("%s: cannot write %s: %s", cmd, path, strerror(o->tmp ? errno : ENOMEM));
        if (fd >= 0) {
            close(fd);
            unlink(o->tmp);
        }
        free(o->tmp);
        o->tmp = NULL;
        return -1;
    }
    return 0;
}

int gmt_out_close(struct gmt_out *o, bool ok)
{
    bool bad = ferror(o->f) != 0;
    int err = errno;
    if (fclose(o->f) != 0 && !bad) {
        bad = true;
        err = errno;
    }
    if (ok && bad)
        gmt_errorf("%s: cannot write %s: %s", o->cmd, o->path, strerror(err));
    ok = ok && !bad;
    if (o->tmp) {
        if (ok && (chmod(o->tmp, file_mode()) != 0 || rename(o->tmp, o->path) != 0)) {
            gmt_errorf("%s: cannot write %s: %s", o->cmd, o->path, strerror(errno));
            ok = false;
        }
        if (!ok)
            unlink(o->tmp);
        free(o->tmp);
    }
    *o = (struct gmt_out){0};
    return ok ? 0 : -1;
}

int gmt_finish_output(int rc)
{
    if (fflush(stdout) != 0 || ferror(stdout)) {
        gmt_errorf("cannot write the output: %s", strerror(errno));
        return EXIT_ERROR;
    }
    return rc;
}


const char *gmt_fmt_bytes(char *buf, uint64_t bytes, bool exact)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    if (exact || bytes < 1024) {
        snprintf(buf, 32, "%llu%s", (unsigned long long)bytes,
                 exact ? "" : " B");
        return buf;
    }
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    snprintf(buf, 32, "%.2f %s", v, unit[u]);
    return buf;
}

/* Length of the valid UTF-8 sequence at p, or 0: no overlong forms, no
 * surrogates, nothing above U+10FFFF (RFC 3629). */
int gmt_utf8_len(const unsigned char *p)
{
    unsigned char c = p[0], lo = 0x80, hi = 0xbf;
    int n;
    if (c >= 0xc2 && c <= 0xdf)
        n = 2;
    else if (c >= 0xe0 && c <= 0xef)
        n = 3;
    else if (c >= 0xf0 && c <= 0xf4)
        n = 4;
    else
        return 0;
    if (c == 0xe0)
        lo = 0xa0;
    else if (c == 0xed)
        hi = 0x9f;
    else if (c == 0xf0)
        lo = 0x90;
    else if (c == 0xf4)
        hi = 0x8f;
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (int i = 2; i < n; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    return n;
}

/* Untrusted bytes printed as they are would reach the terminal: an escape
 * sequence in a host name or a symbol could move the cursor, retitle the
 * window or hide lines. The same rule as the definitions' strings
 * (defs.c): control bytes (C0, DEL, and C1 as UTF-8) and invalid UTF-8
 * become '?', in place, so lengths and widths stay. */
char *gmt_printable(char *s)
{
    for (unsigned char *p = (unsigned char *)s; p && *p;) {
        int n = *p < 0x80 ? 1 : gmt_utf8_len(p);
        if (*p < 0x20 || *p == 0x7f || n == 0 || (n == 2 && p[0] == 0xc2 && p[1] < 0xa0)) {
            *p++ = '?';
            if (n == 2)
                *p++ = '?';
        } else {
            p += n;
        }
    }
    return s;
}

/* A cell of a Markdown table is text: a site's name with a '|' would
 * split the row, and '<script>' in one would be HTML to the page that
 * shows a CI summary. Two pieces of Markdown that the commands put in
 * cells are kept: code spans (`name`: code is literal, only '|' needs its
 * backslash inside a table) and a cell that is bold as a whole
 * (**FAIL**). Everything else is escaped: '<', '>' and '&' as entities,
 * the characters Markdown gives meaning to with a backslash, a backtick
 * that opens no span as well. */
static void md_text(FILE *f, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (ch == '<')
            fputs("&lt;", f);
        else if (ch == '>')
            fputs("&gt;", f);
        else if (ch == '&')
            fputs("&amp;", f);
        else if (strchr("\\|`*_[]~", ch))
            fprintf(f, "\\%c", ch);
        else if ((unsigned char)ch < 0x20 || ch == 0x7f)
            fputc('?', f);
        else
            fputc(ch, f);
    }
}

static size_t run_of(const char *s, char ch)
{
    size_t k = 0;
    while (s[k] == ch)
        k++;
    return k;
}

void gmt_md_cell(FILE *f, const char *s)
{
    size_t n = strlen(s);
    if (n > 4 && !strncmp(s, "**", 2) && !strcmp(s + n - 2, "**") && s[2] != '*' &&
        s[n - 3] != '*') {
        fputs("**", f);
        md_text(f, s + 2, n - 4);
        fputs("**", f);
        return;
    }
    const char *text = s;
    for (const char *p = s; *p;) {
        if (*p != '`') {
            p++;
            continue;
        }
        /* a span runs to the next run of exactly as many backticks */
        size_t k = run_of(p, '`');
        const char *close = NULL;
        for (const char *q = p + k; *q;) {
            size_t m = run_of(q, '`');
            if (m == k) {
                close = q;
                break;
            }
            q += m ? m : 1;
        }
        if (close == NULL) { /* no span: the backticks are text */
            p += k;
            continue;
        }
        md_text(f, text, (size_t)(p - text));
        for (const char *q = p; q < close + k; q++) {
            if (*q == '|')
                fputc('\\', f);
            fputc((unsigned char)*q < 0x20 || *q == 0x7f ? '?' : *q, f);
        }
        p = text = close + k;
    }
    md_text(f, text, strlen(text));
}

/* Trace strings are untrusted bytes: control characters are escaped and
 * invalid UTF-8 becomes U+FFFD, so the JSON is always valid. For a page
 * (html), also '<', '>', '&' and U+2028/2029 (html_json.c says why). */
void gmt_json_str_to(FILE *f, const char *s, bool html)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p;) {
        if (*p == '"' || *p == '\\') {
            fprintf(f, "\\%c", *p++);
        } else if (*p < 0x20 || *p == 0x7f ||
                   (html && (*p == '<' || *p == '>' || *p == '&'))) {
            fprintf(f, "\\u%04x", *p++);
        } else if (*p < 0x80) {
            fputc(*p++, f);
        } else {
            int n = gmt_utf8_len(p);
            if (n == 0) {
                fputs("\\ufffd", f);
                p++;
            } else if (html && n == 3 && p[0] == 0xe2 && p[1] == 0x80 &&
                       (p[2] == 0xa8 || p[2] == 0xa9)) {
                fprintf(f, "\\u%04x", p[2] == 0xa8 ? 0x2028 : 0x2029);
                p += 3;
            } else {
                fwrite(p, 1, (size_t)n, f);
                p += n;
            }
        }
    }
    fputc('"', f);
}

void gmt_json_str(FILE *f, const char *s)
{
    gmt_json_str_to(f, s, false);
}
