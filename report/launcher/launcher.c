/* launcher.c - `gpumemtrace [options] [--] command [args...]`.
 *
 * The friendly form of `LD_PRELOAD=libgpumemtrace.so command`. The launcher
 * talks to the library only through the environment: it finds the library
 * (GPUMEMTRACE_LIB, else beside itself, else ../lib), prepends it to
 * LD_PRELOAD, turns its flags into GPUMEMTRACE_* variables (the names,
 * ranges and help come from the GMT_OPTIONS table in preload/gmt_options.h),
 * gives the run a fresh session id, and - with the pool on - routes the
 * frameworks' own caching allocators to the pool so that every tensor is a
 * traced allocation. Then it runs the command as a child and waits.
 *
 * Signals. The child stays in the launcher's process group, so it remains
 * in the terminal's foreground job: it can read the terminal, and Ctrl-C,
 * Ctrl-\ and Ctrl-Z reach it straight from the terminal driver. Those
 * arrive at the launcher too, marked as sent by the kernel (SI_KERNEL),
 * and are not forwarded: the child must not get Ctrl-C twice (a second
 * KeyboardInterrupt would cut Python's cleanup short) - unless the child
 * moved to a process group of its own, where the terminal can't reach it.
 * A signal that a process sent (kill, a batch system, a supervisor) is
 * forwarded to the child. The launcher itself never dies of a forwarded
 * signal while the child runs.
 *
 * At the end it has launch_traces.c find the traces of this run and print
 * one line per process, and leaves with the child's status: its exit code,
 * or the same signal raised on itself.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "gmt_options.h" /* GMT_OPTIONS and the rules for their values */
#include "launcher.h"
#include "rank.h"
#include "gmttrace.h"

#define LIB_NAME "libgpumemtrace.so"
#define EXIT_USAGE 2
#define EXIT_NOEXEC 126
#define EXIT_NOTFOUND 127

/* ---- the library's options, from its one table -------------------------- */

struct optdef {
    const char *name;  /* GPUMEMTRACE_<name> */
    char type;         /* 's'tr, 'i'nt, 'b'ool, 'h'ex */
    long lo, hi;
    const char *def;   /* default, as text */
    const char *help;
};

#define OPT_DEF_str(d) d
#define OPT_DEF_int(d) #d
#define OPT_DEF_bool(d) #d
#define OPT_DEF_hex(d) "generated"
static const struct optdef optdefs[] = {
#define X(NAME, field, type, def, lo, hi, help)                               \
    {#NAME, #type[0], (long)(lo), (long)(hi), OPT_DEF_##type(def), help},
    GMT_OPTIONS(X)
#undef X
};
#define NOPTDEFS (sizeof optdefs / sizeof *optdefs)

/* "stack-depth", "STACK_DEPTH" and "GPUMEMTRACE_STACK_DEPTH" all name
 * STACK_DEPTH. NULL: no such option. */
static const struct optdef *optdef_find(const char *name, size_t len)
{
    if (len > 12 && strncasecmp(name, "GPUMEMTRACE_", 12) == 0)
        name += 12, len -= 12;
    for (size_t i = 0; i < NOPTDEFS; i++) {
        const char *o = optdefs[i].name;
        size_t k = 0;
        for (; k < len && o[k]; k++) {
            char c = name[k] == '-' ? '_' : name[k];
            if (c >= 'a' && c <= 'z')
                c = (char)(c - 'a' + 'A');
            if (c != o[k])
                break;
        }
        if (k == len && o[k] == '\0')
            return &optdefs[i];
    }
    return NULL;
}

/* The library's own rules (gmt_options.h), so that a bad value is a
 * usage error here rather than a warning in every traced process.
 * Returns NULL if v is fine, else what is wrong with it. */
static const char *optdef_check(const struct optdef *o, const char *v, char *why,
                                size_t cap)
{
    long n;
    bool b;
    uint64_t h;
    switch (o->type) {
    case 'i':
        if (gmt_optval_int(v, o->lo, o->hi, &n))
            return NULL;
        snprintf(why, cap, "a number from %ld to %ld", o->lo, o->hi);
        return why;
    case 'b':
        if (gmt_optval_bool(v, &b))
            return NULL;
        snprintf(why, cap, "1/0, yes/no, true/false or on/off");
        return why;
    case 'h':
        if (gmt_optval_hex(v, &h))
            return NULL;
        snprintf(why, cap, "a non-zero hexadecimal number");
        return why;
    default:
        if (gmt_optval_str(v))
            return NULL;
        snprintf(why, cap, "not empty");
        return why;
    }
}

/* A boolean GPUMEMTRACE_ variable as the library will read it (a bad
 * value: the library warns and keeps its default). */
static bool env_bool(const char *var, bool def)
{
    const char *v = getenv(var);
    bool b;
    return v != NULL && gmt_optval_bool(v, &b) ? b : def;
}

/* ---- messages ------------------------------------------------------------ */

bool g_quiet;

static void vmsg(const char *fmt, va_list ap)
{
    fputs("gpumemtrace: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
}

/* What the launcher has to say; -q silences it. */
void say(const char *fmt, ...)
{
    if (g_quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    vmsg(fmt, ap);
    va_end(ap);
}

/* An error: always printed. */
static void error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vmsg(fmt, ap);
    va_end(ap);
}

static void usage_error(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("gpumemtrace: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs(" (gpumemtrace --help for usage)\n", stderr);
    va_end(ap);
    exit(EXIT_USAGE);
}

/* ---- help ------------------------------------------------------------------- */

/* Print text from column `col`, wrapped before column 79, continuation
 * lines indented to `indent`. */
static void wrap(FILE *f, const char *text, int col, int indent)
{
    const char *s = text;
    while (*s) {
        size_t w = strcspn(s, " ");
        if (col > indent && col + 1 + (int)w > 79) {
            fprintf(f, "\n%*s", indent, "");
            col = indent;
        } else if (col > indent) {
            fputc(' ', f);
            col++;
        }
        fwrite(s, 1, w, f);
        col += (int)w;
        s += w;
        while (*s == ' ')
            s++;
    }
    fputc('\n', f);
}

static void usage(FILE *f)
{
    static const char *const flags[][2] = {
        {"-o, --output PATTERN", "trace file pattern (GPUMEMTRACE_OUTPUT); "
         "default gpumemtrace.%R%p.gmt in the current directory: "
         "gpumemtrace.PID.gmt, gpumemtrace.rRANK.PID.gmt in a process whose "
         "launcher (torchrun, srun, mpirun) set a rank variable. Relative "
         "patterns are made absolute, so a command that changes directory "
         "still writes here"},
        {"    --stack-depth N", "native frames per call stack; 0: none"},
        {"    --no-python", "no Python frames (GPUMEMTRACE_PYTHON=0)"},
        {"    --no-driver", "runtime hooks only: don't observe the CUDA "
         "driver (GPUMEMTRACE_DRIVER=0), so programs with a static cudart, "
         "CuPy and JAX record nothing"},
        {"    --no-pool", "no caching pool: cudaMalloc/cudaFree pass through "
         "to the runtime"},
        {"    --sample-ms N", "milliseconds between memory samples; 0: none"},
        {"    --embed-symbols", "write function names into the traces at exit"},
        {"    --retention WHEN", "a Python program records which of its "
         "objects keep its CUDA tensors alive, at: exit, signal (on SIGUSR2), "
         "step:N, mark:NAME, growth, comma-separated (GPUMEMTRACE_RETENTION; "
         "also --retention-at); gpumemreport retention shows them"},
        {"-v, --verbose", "print the variables set; each process prints its "
         "trace's name at exit"},
        {"    --set NAME=VALUE", "set GPUMEMTRACE_NAME (any option below)"},
        {"    --no-framework-cache", "turn PyTorch's and JAX's own caching "
         "off, so that every tensor is a CUDA allocation of its own, cached by "
         "the pool instead: for frameworks without block events (JAX, custom "
         "allocators). It changes the program: CUDA graph capture and "
         "torch.compile(mode=\"reduce-overhead\") fail, cuBLAS workspaces "
         "are allocated differently, out of memory raises "
         "torch.AcceleratorError instead of torch.OutOfMemoryError"},
        {"    --keep-framework-allocator", "the default: framework "
         "allocators are left as they are (kept for older scripts)"},
        {"    --no-nvtx", "don't set NVTX_INJECTION64_PATH"},
        {"    --report", "at exit, print gpumemreport summary of each trace "
         "(on stderr)"},
        {"-q, --quiet", "print nothing but errors"},
        {"-h, --help", "this help"},
        {"    --version", "print the version and exit"},
    };
    fprintf(f, "usage: gpumemtrace [options] [--] command [args...]\n\n");
    wrap(f, "Runs command with libgpumemtrace.so preloaded: it and every "
            "process it starts record their CUDA memory calls into trace "
            "files. At exit, says where the traces are and what each "
            "process peaked at, and exits with the command's status.", 0, 0);
    fprintf(f, "\noptions:\n");
    for (size_t i = 0; i < sizeof flags / sizeof *flags; i++) {
        int col = fprintf(f, "  %-26s", flags[i][0]);
        if (col > 28) {
            fprintf(f, "\n%*s", 30, "");
            col = 30;
        } else {
            fputs("  ", f);
            col += 2;
        }
        wrap(f, flags[i][1], col, 30);
    }
    fputc('\n', f);
    wrap(f, "PyTorch's caching allocator is left on: every tensor is "
            "recorded from its own block events (a small C++ bridge, built "
            "once against the program's PyTorch with the system's C++ "
            "compiler and cached; GPUMEMTRACE_FRAMEWORK=0 turns it off), "
            "and the program runs as it does untraced. Other frameworks' "
            "caches show as their segments. --no-framework-cache sets "
            "PYTORCH_NO_CUDA_MEMORY_CACHING=1 and "
            "XLA_PYTHON_CLIENT_ALLOCATOR=platform unless already set: JAX "
            "then allocates buffer by buffer through the driver's virtual "
            "memory API, which the driver-level observer records (slower "
            "than JAX's own allocator). CuPy's pool can only be turned off "
            "from code (cupy.cuda.set_allocator(None)); its segments are "
            "recorded either way. NVTX_INJECTION64_PATH is set to the "
            "library unless already set.", 0, 0);
    fprintf(f, "\nlibrary options (environment variables; --set NAME=VALUE):\n");
    for (size_t i = 0; i < NOPTDEFS; i++) {
        const struct optdef *o = &optdefs[i];
        fprintf(f, "  GPUMEMTRACE_%s", o->name);
        char text[512];
        snprintf(text, sizeof text, "%s (default: %s)", o->help,
                 *o->def ? o->def : "unset");
        fprintf(f, "\n%*s", 6, "");
        wrap(f, text, 6, 6);
    }
    fprintf(f, "  GPUMEMTRACE_LIB\n");
    fprintf(f, "%*s", 6, "");
    wrap(f, "the library to preload (default: " LIB_NAME " beside this "
            "program, else ../lib/" LIB_NAME " relative to it)", 6, 6);
    fputc('\n', f);
    wrap(f, "Exit status: the command's; a command killed by a signal is "
            "reported the same way (the launcher raises that signal on "
            "itself). 127: command not found, 126: not executable, 2: bad "
            "usage or a launcher error.", 0, 0);
}

/* ---- the environment ------------------------------------------------------ */

bool launcher_dir(char *out, size_t cap)
{
    ssize_t n = readlink("/proc/self/exe", out, cap - 1);
    if (n <= 0)
        return false;
    out[n] = '\0';
    char *slash = strrchr(out, '/');
    if (slash)
        *slash = '\0';
    return true;
}

/* The library, as an absolute path. */
static bool find_library(char *out, size_t cap)
{
    const char *env = getenv("GPUMEMTRACE_LIB");
    if (env && *env) {
        struct stat st;
        if (realpath(env, out) == NULL || strlen(out) >= cap || access(out, R_OK) != 0) {
            error("GPUMEMTRACE_LIB=%s: %s", env, strerror(errno));
            return false;
        }
        if (stat(out, &st) != 0 || !S_ISREG(st.st_mode)) {
            error("GPUMEMTRACE_LIB=%s: not a file", env);
            return false;
        }
        return true;
    }
    char self[PATH_MAX];
    if (!launcher_dir(self, sizeof self)) {
        error("cannot find " LIB_NAME ": /proc/self/exe: %s; set GPUMEMTRACE_LIB",
              strerror(errno));
        return false;
    }
    char a[PATH_MAX + 32], b[PATH_MAX + 32];
    snprintf(a, sizeof a, "%s/" LIB_NAME, self);
    snprintf(b, sizeof b, "%s/../lib/" LIB_NAME, self);
    const char *paths[] = {a, b};
    for (int i = 0; i < 2; i++)
        if (access(paths[i], R_OK) == 0 && realpath(paths[i], out) && strlen(out) < cap)
            return true;
    error("cannot find " LIB_NAME " (looked for %s and %s); set GPUMEMTRACE_LIB", a, b);
    return false;
}

/* LD_PRELOAD with lib first: `old` keeps its order, minus any
 * libgpumemtrace.so (this one or another copy: two tracers would fight).
 * The loader splits on ':' and ' '; the result uses ':'. *replaced: a
 * different copy that was dropped (or NULL; points into a static copy). */
static char *preload_join(const char *lib, const char *old, const char **replaced)
{
    static char dropped[PATH_MAX];
    size_t cap = strlen(lib) + (old ? strlen(old) : 0) + 2;
    char *out = malloc(cap);
    if (out == NULL)
        return NULL;
    *replaced = NULL;
    size_t n = (size_t)snprintf(out, cap, "%s", lib);
    for (const char *s = old; s && *s;) {
        size_t len = strcspn(s, ": ");
        if (len) {
            const char *base = memrchr(s, '/', len);
            base = base ? base + 1 : s;
            size_t blen = len - (size_t)(base - s);
            bool ours = blen == strlen(LIB_NAME) && !memcmp(base, LIB_NAME, blen);
            if (ours && !(len == strlen(lib) && !memcmp(s, lib, len)) &&
                len < sizeof dropped) {
                memcpy(dropped, s, len);
                dropped[len] = '\0';
                *replaced = dropped;
            }
            if (!ours) {
                out[n++] = ':';
                memcpy(out + n, s, len);
                n += len;
            }
        }
        s += len;
        s += *s != '\0';
    }
    out[n] = '\0';
    return out;
}

/* The default output pattern: rank-aware in each process whose launcher
 * of distributed jobs set a rank (rank.h; %R), so ranks sort together -
 * decided by the traced process, not here: torchrun sets RANK only in
 * the workers it starts. */
static const char *default_pattern(void)
{
    return "gpumemtrace.%R%p.gmt";
}

/* cwd/pattern, with the '%' of cwd escaped. False if it doesn't fit. */
static bool absolute_pattern(const char *pattern, const char *cwd, char *out,
                             size_t cap)
{
    size_t n = 0;
    if (pattern[0] != '/' && cwd && *cwd) {
        for (const char *s = cwd; *s; s++) {
            if (n + 3 > cap)
                return false;
            if (*s == '%')
                out[n++] = '%';
            out[n++] = *s;
        }
        if (n == 0 || out[n - 1] != '/')
            out[n++] = '/';
    }
    size_t len = strlen(pattern);
    if (n + len + 1 > cap)
        return false;
    memcpy(out + n, pattern, len + 1);
    return true;
}

/* mkdir -p: the library creates files, not directories. */
static bool make_dirs(const char *dir)
{
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path)
        return false;
    for (char *p = path + 1;; p++) {
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        if (mkdir(path, 0777) != 0 && errno != EEXIST)
            return false;
        if (c == '\0')
            return true;
        *p = c;
    }
}

/* Framework allocators routed to the pool: (framework, variable, value). */
static const char *const routes[][3] = {
    {"pytorch", "PYTORCH_NO_CUDA_MEMORY_CACHING", "1"},
    {"jax", "XLA_PYTHON_CLIENT_ALLOCATOR", "platform"},
};

/* Names of the variables the launcher set, for -v. */
static const char *g_set[64];
static size_t g_nset;

static void set_env(const char *name, const char *value)
{
    if (setenv(name, value, 1) != 0) {
        error("cannot set %s: %s", name, strerror(errno));
        exit(EXIT_USAGE);
    }
    size_t i = 0;
    while (i < g_nset && strcmp(g_set[i], name) != 0)
        i++;
    char *copy;
    if (i == g_nset && g_nset < sizeof g_set / sizeof *g_set &&
        (copy = strdup(name)) != NULL)
        g_set[g_nset++] = copy;
}

/* ---- the child ------------------------------------------------------------ */

static const int fwd_signals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
#define NFWD (sizeof fwd_signals / sizeof *fwd_signals)
static struct sigaction g_old_act[NFWD], g_old_pipe;
static sigset_t g_old_mask;
static volatile sig_atomic_t g_child;

static void forward(int sig, siginfo_t *si, void *uc)
{
    (void)uc;
    int saved = errno;
    pid_t child = (pid_t)g_child;
    /* SI_KERNEL: the terminal (Ctrl-C, Ctrl-\, hangup) signalled the whole
     * foreground process group - the child too, unless it left the group */
    if (child > 0 && (si->si_code != SI_KERNEL || getpgid(child) != getpgrp()))
        kill(child, sig);
    errno = saved;
}

/* Catch the signals to forward (those the launcher was started with
 * ignored stay ignored, for the child too, as a shell does), and ignore
 * SIGPIPE so a closed stderr can't kill the launcher before it reports the
 * child's status. They stay blocked until spawn() knows the child: one
 * that arrives meanwhile is forwarded then, not lost. */
static void signals_catch(void)
{
    sigset_t block;
    sigemptyset(&block);
    for (size_t i = 0; i < NFWD; i++)
        sigaddset(&block, fwd_signals[i]);
    sigprocmask(SIG_BLOCK, &block, &g_old_mask);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = forward;
    sa.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < NFWD; i++)
        sigaddset(&sa.sa_mask, fwd_signals[i]);
    for (size_t i = 0; i < NFWD; i++) {
        sigaction(fwd_signals[i], NULL, &g_old_act[i]);
        if (g_old_act[i].sa_handler != SIG_IGN)
            sigaction(fwd_signals[i], &sa, NULL);
    }
    struct sigaction ign;
    memset(&ign, 0, sizeof ign);
    ign.sa_handler = SIG_IGN;
    sigaction(SIGPIPE, &ign, &g_old_pipe);
}

static void signals_restore(void)
{
    for (size_t i = 0; i < NFWD; i++)
        sigaction(fwd_signals[i], &g_old_act[i], NULL);
}

/* Fork and exec argv (after signals_catch). Returns the child's pid, or
 * -1 (errno) if it could not fork; *exec_err: the exec's errno if it
 * failed (the child has then exited), else 0. A close-on-exec pipe tells
 * the two apart. The child gets the signal state the launcher started
 * with. */
static pid_t spawn(char **argv, int *exec_err)
{
    int pfd[2];
    *exec_err = 0;
    if (pipe2(pfd, O_CLOEXEC) != 0) {
        int e = errno;
        sigprocmask(SIG_SETMASK, &g_old_mask, NULL);
        errno = e;
        return -1;
    }
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        signals_restore();
        sigaction(SIGPIPE, &g_old_pipe, NULL);
        sigprocmask(SIG_SETMASK, &g_old_mask, NULL);
        close(pfd[0]);
        execvp(argv[0], argv);
        int e = errno;
        ssize_t w = write(pfd[1], &e, sizeof e);
        (void)w;
        _exit(EXIT_NOTFOUND);
    }
    int fork_errno = errno;
    if (pid > 0)
        g_child = pid;
    sigprocmask(SIG_SETMASK, &g_old_mask, NULL); /* held ones go to the child now */
    close(pfd[1]);
    if (pid < 0) {
        close(pfd[0]);
        errno = fork_errno;
        return -1;
    }
    ssize_t n;
    int e = 0;
    while ((n = read(pfd[0], &e, sizeof e)) < 0 && errno == EINTR)
        ;
    close(pfd[0]);
    if (n == (ssize_t)sizeof e)
        *exec_err = e;
    return pid;
}

static int wait_child(pid_t pid)
{
    int st = 0;
    while (waitpid(pid, &st, 0) < 0) {
        if (errno != EINTR) {
            error("waiting for the command: %s", strerror(errno));
            st = EXIT_USAGE << 8;
            break;
        }
    }
    g_child = 0;
    return st;
}

/* Leave as the child did: its exit code, or killed by the same signal. */
static int pass_status(int st)
{
    fflush(NULL);
    if (WIFEXITED(st))
        return WEXITSTATUS(st);
    if (!WIFSIGNALED(st))
        return EXIT_USAGE;
    int sig = WTERMSIG(st);
    /* the child dumped its core if it was going to: not the launcher */
    struct rlimit rl;
    if (getrlimit(RLIMIT_CORE, &rl) == 0) {
        rl.rlim_cur = 0;
        setrlimit(RLIMIT_CORE, &rl);
    }
    signal(sig, SIG_DFL);
    sigset_t s;
    sigemptyset(&s);
    sigaddset(&s, sig);
    sigprocmask(SIG_UNBLOCK, &s, NULL);
    raise(sig);
    return 128 + sig; /* the signal did not end us (it can't be caught or is ignored by default) */
}

/* ---- main ------------------------------------------------------------------- */

struct run {
    char **cmd;
    bool verbose, cache_off, no_nvtx, report, session_given, disabled;
    uint64_t session;
    char lib[PATH_MAX], cwd[PATH_MAX], pattern[PATH_MAX];
};

enum {
    OPT_STACK_DEPTH = 1000,
    OPT_NO_POOL,
    OPT_NO_PYTHON,
    OPT_NO_DRIVER,
    OPT_SAMPLE_MS,
    OPT_EMBED_SYMBOLS,
    OPT_RETENTION,
    OPT_SET,
    OPT_KEEP_ALLOC,
    OPT_CACHE_OFF,
    OPT_NO_NVTX,
    OPT_REPORT,
    OPT_VERSION,
};

/* A GPUMEMTRACE_ variable to set, checked against the table. */
static const struct optdef *set_option(const char *name, const char *value,
                                       const char *flag)
{
    const struct optdef *o = optdef_find(name, strlen(name));
    if (o == NULL)
        usage_error("%s: no option %s", flag, name);
    if (strcmp(o->name, "FORCED_ALLOCATOR") == 0)
        usage_error("%s: GPUMEMTRACE_FORCED_ALLOCATOR is set by the launcher "
                    "(see --no-framework-cache)", flag);
    char why[96], var[64];
    if (optdef_check(o, value, why, sizeof why))
        usage_error("%s: %s=%s: the value must be %s", flag, o->name, value, why);
    snprintf(var, sizeof var, "GPUMEMTRACE_%s", o->name);
    set_env(var, value);
    return o;
}

/* Options, in order (a later one wins); the library's go straight into
 * the environment. Stops at the command: its options are its own. */
static void parse_args(struct run *r, int argc, char **argv)
{
    static const struct option longopts[] = {
        {"output", required_argument, NULL, 'o'},
        {"stack-depth", required_argument, NULL, OPT_STACK_DEPTH},
        {"no-pool", no_argument, NULL, OPT_NO_POOL},
        {"no-python", no_argument, NULL, OPT_NO_PYTHON},
        {"no-driver", no_argument, NULL, OPT_NO_DRIVER},
        {"sample-ms", required_argument, NULL, OPT_SAMPLE_MS},
        {"embed-symbols", no_argument, NULL, OPT_EMBED_SYMBOLS},
        {"retention", required_argument, NULL, OPT_RETENTION},
        {"retention-at", required_argument, NULL, OPT_RETENTION},
        {"verbose", no_argument, NULL, 'v'},
        {"set", required_argument, NULL, OPT_SET},
        {"keep-framework-allocator", no_argument, NULL, OPT_KEEP_ALLOC},
        {"no-framework-cache", no_argument, NULL, OPT_CACHE_OFF},
        {"no-nvtx", no_argument, NULL, OPT_NO_NVTX},
        {"report", no_argument, NULL, OPT_REPORT},
        {"version", no_argument, NULL, OPT_VERSION},
        {"quiet", no_argument, NULL, 'q'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, "+:o:vqh", longopts, NULL)) != -1) {
        switch (o) {
        case 'o':
            set_option("OUTPUT", optarg, "--output");
            break;
        case OPT_STACK_DEPTH:
            set_option("STACK_DEPTH", optarg, "--stack-depth");
            break;
        case OPT_NO_POOL:
            set_option("POOL", "0", "--no-pool");
            break;
        case OPT_NO_PYTHON:
            set_env("GPUMEMTRACE_PYTHON", "0");
            break;
        case OPT_NO_DRIVER:
            set_env("GPUMEMTRACE_DRIVER", "0");
            break;
        case OPT_SAMPLE_MS:
            set_option("SAMPLE_MS", optarg, "--sample-ms");
            break;
        case OPT_EMBED_SYMBOLS:
            set_option("EMBED_SYMBOLS", "1", "--embed-symbols");
            break;
        case OPT_RETENTION:
            set_option("RETENTION", optarg, "--retention");
            break;
        case 'v':
            r->verbose = true;
            set_option("VERBOSE", "1", "--verbose");
            break;
        case OPT_SET: {
            const char *eq = strchr(optarg, '=');
            char name[64];
            if (eq == NULL || eq == optarg || eq - optarg >= (ptrdiff_t)sizeof name)
                usage_error("--set needs NAME=VALUE, not '%s'", optarg);
            snprintf(name, sizeof name, "%.*s", (int)(eq - optarg), optarg);
            if (strcmp(set_option(name, eq + 1, "--set")->name, "SESSION") == 0)
                r->session_given = true;
            break;
        }
        case OPT_KEEP_ALLOC:
            r->cache_off = false;
            break;
        case OPT_CACHE_OFF:
            r->cache_off = true;
            break;
        case OPT_NO_NVTX:
            r->no_nvtx = true;
            break;
        case OPT_REPORT:
            r->report = true;
            break;
        case 'q':
            g_quiet = true;
            break;
        case 'h':
            usage(stdout);
            exit(gmt_finish_output(EXIT_SUCCESS));
        case OPT_VERSION:
            printf("gpumemtrace %s (trace format %d.%d)\n", gmt_version, GMT_VERSION_MAJOR,
                   GMT_VERSION_MINOR);
            exit(gmt_finish_output(EXIT_SUCCESS));
        case ':':
            usage_error("%s needs a value", argv[optind - 1]);
        default:
            if (optopt)
                usage_error("unknown option '-%c'", optopt);
            usage_error("unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        usage_error("no command given");
    r->cmd = argv + optind;
    r->verbose &= !g_quiet;
}

/* Everything the command's environment gets, the flags' variables aside. */
static void setup_env(struct run *r)
{
    /* the session: fresh, so that this run's traces can be told apart */
    if (r->session_given) {
        r->session = strtoull(getenv("GPUMEMTRACE_SESSION"), NULL, 16);
    } else {
        if (getrandom(&r->session, sizeof r->session, 0) != (ssize_t)sizeof r->session)
            r->session = 0;
        if (r->session == 0)
            r->session = ((uint64_t)getpid() << 40) ^ (uint64_t)time(NULL) ^
                         0x9e3779b97f4a7c15ull;
        char hex[32];
        snprintf(hex, sizeof hex, "%016" PRIx64, r->session);
        set_env("GPUMEMTRACE_SESSION", hex);
    }

    /* where the traces go: absolute, so that a command that changes
     * directory still writes where the launcher looks */
    if (getcwd(r->cwd, sizeof r->cwd) == NULL)
        r->cwd[0] = '\0';
    const char *pat = getenv("GPUMEMTRACE_OUTPUT");
    if (pat == NULL || *pat == '\0')
        pat = default_pattern();
    if (!absolute_pattern(pat, r->cwd, r->pattern, sizeof r->pattern))
        usage_error("output pattern too long: %s", pat);
    set_env("GPUMEMTRACE_OUTPUT", r->pattern);
    char dir[PATH_MAX];
    struct stat st;
    /* A directory that cannot be made stops the tracing, not the command:
     * as with LD_PRELOAD alone, the command runs (and its processes say
     * tracing is off). */
    if (pattern_dir(r->pattern, dir, sizeof dir) && stat(dir, &st) != 0 &&
        !make_dirs(dir))
        say("warning: cannot create the output directory %s: %s; the command "
            "runs untraced", dir, strerror(errno));

    /* framework allocators, routed to the pool */
    r->disabled = env_bool("GPUMEMTRACE_DISABLE", false);
    bool route = r->cache_off && !r->disabled;
    if (route && !env_bool("GPUMEMTRACE_POOL", true))
        say("warning: --no-framework-cache with the pool off: every tensor "
            "is a cudaMalloc and cudaFree of its own, each free waiting for "
            "the GPU (much slower)");
    char forced[64] = "";
    for (size_t i = 0; route && i < sizeof routes / sizeof *routes; i++) {
        const char *have = getenv(routes[i][1]);
        if (have == NULL) {
            set_env(routes[i][1], routes[i][2]);
            size_t n = strlen(forced);
            snprintf(forced + n, sizeof forced - n, "%s%s", n ? "," : "", routes[i][0]);
        } else if (strcmp(have, routes[i][2]) != 0) {
            say("warning: kept %s=%s from the environment (gpumemtrace would "
                "set %s)", routes[i][1], have, routes[i][2]);
        }
    }
    if (forced[0])
        set_env("GPUMEMTRACE_FORCED_ALLOCATOR", forced);
    else
        unsetenv("GPUMEMTRACE_FORCED_ALLOCATOR"); /* not inherited from a run around us */

    /* NVTX ranges become markers: the library is the NVTX injection */
    const char *nvtx = getenv("NVTX_INJECTION64_PATH");
    if (!r->no_nvtx && nvtx == NULL)
        set_env("NVTX_INJECTION64_PATH", r->lib);
    else if (!r->no_nvtx && strcmp(nvtx, r->lib) != 0)
        say("warning: kept NVTX_INJECTION64_PATH=%s from the environment "
            "(NVTX ranges will not be recorded)", nvtx);

    const char *replaced;
    char *preload = preload_join(r->lib, getenv("LD_PRELOAD"), &replaced);
    if (preload == NULL) {
        error("out of memory");
        exit(EXIT_USAGE);
    }
    if (replaced)
        say("warning: replaced %s in LD_PRELOAD with %s", replaced, r->lib);
    set_env("LD_PRELOAD", preload);
    free(preload);
}

int main(int argc, char **argv)
{
    static struct run r;
    gmt_prog = "gpumemtrace"; /* messages of the report code */
    parse_args(&r, argc, argv);
    if (!find_library(r.lib, sizeof r.lib))
        return EXIT_USAGE;
    setup_env(&r);
    for (size_t i = 0; r.verbose && i < g_nset; i++)
        say("%s=%s", g_set[i], getenv(g_set[i]));

    signals_catch();
    int exec_err;
    pid_t pid = spawn(r.cmd, &exec_err);
    if (pid < 0) {
        error("cannot start %s: %s", r.cmd[0], strerror(errno));
        return EXIT_USAGE;
    }
    int st = wait_child(pid);
    signals_restore(); /* from here a Ctrl-C ends the summary */
    if (exec_err) {
        const char *why = strerror(exec_err);
        if (exec_err == ENOENT && !strchr(r.cmd[0], '/'))
            why = "command not found"; /* searched PATH, as a shell says */
        error("%s: %s", r.cmd[0], why);
        return exec_err == ENOENT ? EXIT_NOTFOUND : EXIT_NOEXEC;
    }
    if (!g_quiet)
        summarize(r.pattern, r.cwd, r.session, r.report, r.disabled);
    return pass_status(st);
}
