/* launch_traces.c - the launcher's account of a run, once it has ended.
 *
 * The traces of this run are every file in the output pattern's directory
 * whose name fits the pattern and whose header carries this run's session
 * id, so forked and exec'd children are included. Each gets one line -
 * where it is, the process that wrote it, its peak, what it leaked, its
 * out-of-memory errors - replayed with the report code, in the launcher's
 * process; --report prints the full `gpumemreport summary` of them all
 * first, on stderr. launcher.c runs the command and calls summarize() at
 * its end.
 */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <errno.h>

#include "launcher.h"
#include "rank.h"
#include "gmttrace.h"

#define CMD_SHOWN 60 /* characters of a command line in the summary */

/* ---- finding this run's traces ------------------------------------------- */

/* Does a file name fit the name part of the output pattern? %p and %r
 * match digits, %R nothing or "r<digits>.", %h any name (the session id
 * decides; a child may run with another rank than the launcher sees), and
 * the library's ".N" suffix for a taken name is allowed at the end. */
bool name_matches(const char *pat, const char *s)
{
    if (*pat == '\0') {
        if (*s == '\0')
            return true;
        if (s[0] != '.' || s[1] < '0' || s[1] > '9')
            return false;
        for (s++; *s; s++)
            if (*s < '0' || *s > '9')
                return false;
        return true;
    }
    if (pat[0] == '%' && (pat[1] == 'p' || pat[1] == 'r' || pat[1] == 'h')) {
        bool digits = pat[1] != 'h';
        for (size_t k = 0; s[k] && s[k] != '/'; k++) {
            if (digits && (s[k] < '0' || s[k] > '9'))
                break;
            if (name_matches(pat + 2, s + k + 1))
                return true;
        }
        return false;
    }
    if (pat[0] == '%' && pat[1] == 'R') {
        if (name_matches(pat + 2, s))
            return true;
        if (s[0] != 'r' || s[1] < '0' || s[1] > '9')
            return false;
        size_t k = 1;
        while (s[k] >= '0' && s[k] <= '9')
            k++;
        return s[k] == '.' && name_matches(pat + 2, s + k + 1);
    }
    if (pat[0] == '%' && pat[1] == '%')
        return *s == '%' && name_matches(pat + 2, s + 1);
    return *s == *pat && name_matches(pat + 1, s + 1);
}

/* The directory part of the pattern, expanded as the library would in the
 * launcher's place. False if it depends on the pid (not listable). */
bool pattern_dir(const char *pattern, char *out, size_t cap)
{
    const char *slash = strrchr(pattern, '/');
    if (slash == NULL) {
        snprintf(out, cap, ".");
        return true;
    }
    size_t n = 0;
    char tmp[256];
    for (const char *s = pattern; s < slash; s++) {
        const char *add = s;
        size_t len = 1;
        if (s[0] == '%' && (s[1] == 'p' || s[1] == 'R'))
            return false;
        if (s[0] == '%' && s[1] == 'r') {
            gmt_rank(tmp, sizeof tmp);
            add = tmp, len = strlen(tmp), s++;
        } else if (s[0] == '%' && s[1] == 'h') {
            gmt_host_component(tmp, sizeof tmp); /* as the library expands it */
            add = tmp, len = strlen(tmp), s++;
        } else if (s[0] == '%' && s[1] == '%') {
            s++;
        }
        if (n + len + 1 > cap)
            return false;
        memcpy(out + n, add, len);
        n += len;
    }
    out[n] = '\0';
    if (n == 0)
        snprintf(out, cap, "/");
    return true;
}

struct found {
    char *path;
    struct gmt_file_header hdr;
};

static int cmp_found(const void *a, const void *b)
{
    const struct gmt_file_header *x = &((const struct found *)a)->hdr;
    const struct gmt_file_header *y = &((const struct found *)b)->hdr;
    if (x->start_realtime_ns != y->start_realtime_ns)
        return x->start_realtime_ns < y->start_realtime_ns ? -1 : 1;
    if (x->pid != y->pid)
        return x->pid < y->pid ? -1 : 1;
    return x->file_index < y->file_index ? -1 : x->file_index > y->file_index;
}

/* The header of a trace file (never following a link, never blocking on
 * a FIFO). */
static bool read_header(const char *path, struct gmt_file_header *h)
{
    int fd = open(path, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0)
        return false;
    struct stat st;
    bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) &&
              pread(fd, h, sizeof *h, 0) == (ssize_t)sizeof *h &&
              memcmp(h->magic, GMT_MAGIC, 8) == 0;
    close(fd);
    return ok;
}

/* This session's traces in dir, sorted by start time. */
static size_t find_traces(const char *dir, const char *name_pat, uint64_t session,
                          struct found **out)
{
    *out = NULL;
    DIR *d = opendir(dir);
    if (d == NULL)
        return 0;
    size_t n = 0, cap = 0;
    struct found *list = NULL;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!name_matches(name_pat, e->d_name))
            continue;
        char path[PATH_MAX];
        if (snprintf(path, sizeof path, "%s/%s", strcmp(dir, "/") ? dir : "",
                     e->d_name) >= (int)sizeof path)
            continue;
        struct gmt_file_header h;
        if (!read_header(path, &h) || h.session_id != session)
            continue;
        if (n == cap) {
            struct found *nl = realloc(list, (cap = cap ? 2 * cap : 8) * sizeof *nl);
            if (nl == NULL)
                break;
            list = nl;
        }
        if ((list[n].path = strdup(path)) == NULL)
            break;
        list[n++].hdr = h;
    }
    closedir(d);
    if (n)
        qsort(list, n, sizeof *list, cmp_found);
    *out = list;
    return n;
}

/* ---- the summary ------------------------------------------------------------ */

/* path relative to cwd when it lies below it ("./x.gmt"), else as is. */
static const char *shown_path(const char *path, const char *cwd, char *buf, size_t cap)
{
    size_t n = strlen(cwd);
    if (n > 1 && strncmp(path, cwd, n) == 0 && path[n] == '/') {
        snprintf(buf, cap, ".%s", path + n);
        return buf;
    }
    return path;
}

/* One line per trace: where it is, who wrote it, its peak, leaks, OOMs. */
static void trace_line(const char *shown, const char *path)
{
    struct replay *r = calloc(1, sizeof *r);
    char err[256];
    if (r == NULL || replay_trace(path, r, NULL, err, sizeof err) != 0) {
        say("%s  cannot be read: %s", shown, r ? err : "out of memory");
        if (r)
            replay_free(r);
        free(r);
        return;
    }
    uint64_t leaked = replay_leaked(r, NULL, NULL);
    const char *cmd = r->defs.process.present ? r->defs.process.cmdline : "?";
    size_t len = strlen(cmd);
    char peak[32], leak[32];
    say("%s  pid %u %.*s%s  peak %s requested  leaked %s  OOM %" PRIu64 "%s", shown,
        r->hdr.pid, len > CMD_SHOWN ? CMD_SHOWN - 3 : (int)len, cmd,
        len > CMD_SHOWN ? "..." : "", gmt_fmt_bytes(peak, r->peak_requested, false),
        gmt_fmt_bytes(leak, leaked, false), r->ooms_total,
        r->cut ? "  (cut short: killed, or still running)" : "");
    replay_free(r);
    free(r);
}

/* The full `gpumemreport summary` of the traces, on stderr: the
 * gpumemreport beside this program (both are installed into one bin/ and
 * built into one directory), else the one on PATH. */
static void full_report(struct found *t, size_t n)
{
    char **argv = calloc(n + 3, sizeof *argv);
    if (argv == NULL)
        return;
    char self[PATH_MAX], report[PATH_MAX + 16];
    bool beside = launcher_dir(self, sizeof self);
    if (beside)
        snprintf(report, sizeof report, "%s/gpumemreport", self);
    if (!beside || access(report, X_OK) != 0)
        snprintf(report, sizeof report, "gpumemreport");
    argv[0] = report;
    argv[1] = (char *)"summary";
    for (size_t i = 0; i < n; i++)
        argv[i + 2] = t[i].path;
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        if (dup2(STDERR_FILENO, STDOUT_FILENO) >= 0)
            execvp(argv[0], argv);
        fprintf(stderr, "gpumemtrace: cannot run %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    if (pid < 0)
        say("cannot run %s: %s", argv[0], strerror(errno));
    else
        while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
            ;
    free(argv);
}

void summarize(const char *pattern, const char *cwd, uint64_t session,
               bool report, bool disabled)
{
    char dir[PATH_MAX];
    const char *slash = strrchr(pattern, '/');
    const char *name_pat = slash ? slash + 1 : pattern;
    if (!pattern_dir(pattern, dir, sizeof dir)) {
        say("traces: %s (session %016" PRIx64 "; the directory depends on the "
            "pid, not listed)", pattern, session);
        return;
    }
    struct found *t;
    size_t n = find_traces(dir, name_pat, session, &t);
    if (n == 0) {
        if (disabled)
            say("no trace written: GPUMEMTRACE_DISABLE is set");
        else if (access(dir, W_OK | X_OK) != 0)
            say("no trace written: cannot write in %s (%s)", dir,
                strerror(errno));
        else
            say("no trace written: the command made no CUDA memory call "
                "that gpumemtrace sees (none at all; a process that used the "
                "driver says why at its exit)");
        free(t);
        return;
    }
    if (report && !g_quiet) {
        full_report(t, n);
        fputc('\n', stderr);
    }
    say("session %016" PRIx64 ": %zu trace%s in %s", session, n, n == 1 ? "" : "s",
        dir);
    for (size_t i = 0; i < n; i++) {
        char buf[PATH_MAX];
        trace_line(shown_path(t[i].path, cwd, buf, sizeof buf), t[i].path);
    }
    if (!report && n == 1)
        say("details: gpumemreport summary %s", shown_path(t[0].path, cwd, dir, sizeof dir));
    else if (!report)
        say("details: gpumemreport summary FILE... (the traces above)");
    for (size_t i = 0; i < n; i++)
        free(t[i].path);
    free(t);
}
