/* fw_spawn.c - running the bridge's compiler beside the program.
 *
 * The build runs inside PyTorch's first cudaMalloc, on the program's
 * thread, which waits for it. What the program must not notice:
 *
 * Its children. fork or posix_spawn would send it a SIGCHLD at the
 * compiler's end, and a program that reaps any child (a SIGCHLD handler
 * calling wait(), an event loop's child watcher) would see, or take, a
 * process it never started. An exec gives even a clone()d child SIGCHLD
 * as its exit signal, so the compiler is started by a waiter: a child of
 * ours with no exit signal that never execs. The compiler's end signals
 * the waiter; the waiter's end signals nothing and only waitpid(__WALL)
 * sees it.
 *
 * Its signals. They are blocked only while the waiter is cloned (so none
 * of the program's handlers runs in the copy). While the build, or the
 * wait for another process's, runs, the signals that ask a program to
 * stop (SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM,
 * SIGXCPU) are noted by a handler of ours instead; the waiting thread
 * sees the note within 10 ms, abandons the build (the waiter kills the
 * compiler's process group and empties its directory), puts the
 * program's handlers back and raises the signal again, so the program
 * does with it what it does untraced, a few milliseconds late. Signals
 * it ignores are left alone, and the others (a profiler's SIGPROF,
 * SIGCHLD) reach the program's handlers as always and do not stop the
 * build.
 *
 * Its end. The waiter watches its parent (PR_SET_PDEATHSIG, and its
 * parent changing): a program killed during its build leaves no compiler
 * running and no build directory in the cache.
 *
 * The waiter is a copy of the process (clone without CLONE_VM: it runs
 * beside the waiting thread, whose memory, errno included, it must not
 * share). The copy costs the page tables, once per build. It closes every
 * descriptor it inherits at once (a reader of the program's pipes sees
 * their end when the program ends, not when the compiler does) and makes
 * only system calls. The compiler is cloned from it sharing its memory
 * (CLONE_VFORK: the waiter sleeps until the exec), in a process group of
 * its own, and is killed with its children after FW_COMPILE_TIMEOUT_S.
 */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fw_build.h"

/* ---- the program's stopping signals --------------------------------------- */

static const int k_stop[] = {SIGHUP,  SIGINT,  SIGQUIT, SIGTERM,
                             SIGUSR1, SIGUSR2, SIGALRM, SIGXCPU};
#define NSTOP (sizeof k_stop / sizeof k_stop[0])

static struct sigaction g_saved[NSTOP]; /* the program's */
static unsigned g_installed;            /* bit i: ours on k_stop[i] */
static unsigned g_caught;               /* bit i: k_stop[i] came */

static void on_stop(int sig)
{
    for (unsigned i = 0; i < NSTOP; i++)
        if (k_stop[i] == sig)
            __atomic_fetch_or(&g_caught, 1u << i, __ATOMIC_RELAXED);
}

static bool is_ours(const struct sigaction *sa)
{
    return !(sa->sa_flags & SA_SIGINFO) && sa->sa_handler == on_stop;
}

void fw_stop_begin(void)
{
    g_installed = 0;
    __atomic_store_n(&g_caught, 0, __ATOMIC_RELAXED);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop;
    sa.sa_flags = SA_RESTART; /* the program's other threads go on */
    sigemptyset(&sa.sa_mask);
    for (unsigned i = 0; i < NSTOP; i++) {
        struct sigaction old;
        if (sigaction(k_stop[i], NULL, &old) != 0 ||
            (!(old.sa_flags & SA_SIGINFO) && old.sa_handler == SIG_IGN))
            continue;
        if (sigaction(k_stop[i], &sa, &g_saved[i]) == 0)
            g_installed |= 1u << i;
    }
}

bool fw_stop_requested(void)
{
    return __atomic_load_n(&g_caught, __ATOMIC_RELAXED) != 0;
}

unsigned fw_stop_end(void)
{
    for (unsigned i = 0; i < NSTOP; i++) {
        struct sigaction cur;
        /* one the program set meanwhile stays */
        if ((g_installed & 1u << i) && sigaction(k_stop[i], NULL, &cur) == 0 &&
            is_ours(&cur))
            sigaction(k_stop[i], &g_saved[i], NULL);
    }
    g_installed = 0;
    return __atomic_exchange_n(&g_caught, 0, __ATOMIC_RELAXED);
}

void fw_stop_reraise(unsigned caught)
{
    for (unsigned i = 0; i < NSTOP; i++)
        if (caught & 1u << i)
            kill(getpid(), k_stop[i]);
}

/* ---- the waiter and the compiler ------------------------------------------ */

/* What the two children need (copied into the waiter; the compiler
 * shares the waiter's copy). */
struct child {
    const char *exe, *log, *build;
    char *const *argv, *const *envp;
    sigset_t mask; /* the program's, restored before exec */
    pid_t parent;
    char *stack;   /* the compiler's (its top) */
};

static void close_from(int lo)
{
#ifdef SYS_close_range
    if (syscall(SYS_close_range, (unsigned)lo, ~0u, 0u) == 0)
        return;
#endif
    struct rlimit rl;
    int max = getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 65536
                  ? (int)rl.rlim_cur : 65536;
    for (int fd = lo; fd < max; fd++)
        close(fd);
}

/* The program's handlers (ours too) are not to run in the compiler
 * between its mask's restoring and its exec. */
static void default_handlers(void)
{
    for (int sig = 1; sig < NSIG; sig++) {
        struct sigaction sa;
        if (sigaction(sig, NULL, &sa) == 0 && sa.sa_handler != SIG_IGN &&
            sa.sa_handler != SIG_DFL) {
            sa.sa_handler = SIG_DFL;
            sa.sa_flags = 0;
            sigaction(sig, &sa, NULL);
        }
    }
}

static int compiler_main(void *arg)
{
    const struct child *c = arg;
    default_handlers();
    setpgid(0, 0); /* its own group: killed with its children */
    int in = open("/dev/null", O_RDONLY);
    int out = open(c->log, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0600);
    if (in < 0 || out < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 ||
        dup2(out, 2) < 0)
        _exit(127);
    close_from(3);
    sigprocmask(SIG_SETMASK, &c->mask, NULL);
    execve(c->exe, c->argv, c->envp);
    _exit(127);
}

static int exit_code(int status)
{
    if (!WIFEXITED(status))
        return 1;
    int code = WEXITSTATUS(status);
    return code == 0 || code == 127 ? code : 1;
}

/* Start the compiler and wait for it, with every signal blocked (they
 * are only waited for). Exits 0 (it succeeded), 1 (it failed), 124
 * (killed: too long), 125 (killed: the program asked with SIGTERM, or
 * died) or 127 (it could not start). */
static int waiter_main(void *arg)
{
    const struct child *c = arg;
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    close_from(0);
    /* A program that ignores SIGCHLD would have the compiler reaped
     * before we could read how it ended: not in here. */
    signal(SIGCHLD, SIG_DFL);
    pid_t pid = clone(compiler_main, c->stack, CLONE_VM | CLONE_VFORK | SIGCHLD,
                      (void *)c);
    if (pid < 0)
        _exit(127);
    sigset_t wake;
    sigemptyset(&wake);
    sigaddset(&wake, SIGTERM);
    sigaddset(&wake, SIGCHLD);
    struct timespec t0, now, nap = {0, 100 * 1000 * 1000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid)
            _exit(exit_code(status));
        bool told = sigtimedwait(&wake, NULL, &nap) == SIGTERM ||
                    getppid() != c->parent;
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (told || now.tv_sec - t0.tv_sec >= FW_COMPILE_TIMEOUT_S) {
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            if (told)
                fw_cache_rm_build(c->build);
            _exit(told ? 125 : 124);
        }
    }
}

/* Wait for the waiter, watching the program's stopping signals: on one,
 * tell the waiter to abandon, and kill it if it has not within a second.
 * True if abandoned. */
static bool wait_waiter(pid_t pid, int *status)
{
    struct timespec nap = {0, 10 * 1000 * 1000};
    int told = 0;
    for (;;) {
        pid_t w = waitpid(pid, status, WNOHANG | __WALL);
        if (w == pid)
            return told > 0;
        if (w < 0 && errno != EINTR) {
            *status = 1 << 8; /* gone (reaped by someone else?) */
            return told > 0;
        }
        if (told == 0 && fw_stop_requested())
            told = kill(pid, SIGTERM) == 0 ? 1 : 100;
        else if (told > 0 && ++told == 100)
            kill(pid, SIGKILL);
        nanosleep(&nap, NULL);
    }
}

int fw_spawn(const char *exe, char *const argv[], char *const envp[],
             const char *log, const char *build, char *why, size_t wn)
{
    size_t stack_size = 64 * 1024;
    char *stacks = mmap(NULL, 2 * stack_size, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (stacks == MAP_FAILED) {
        snprintf(why, wn, "no memory to run the C++ compiler");
        return FW_RUN_FAILED;
    }
    struct child c = {exe, log, build, argv, envp, {{0}}, getpid(),
                      stacks + 2 * stack_size};
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &c.mask);
    pid_t pid = clone(waiter_main, stacks + stack_size, 0, &c);
    int err = errno;
    pthread_sigmask(SIG_SETMASK, &c.mask, NULL);
    munmap(stacks, 2 * stack_size); /* the waiter has its own copy */
    if (pid < 0) {
        snprintf(why, wn, "cannot run the C++ compiler %s: %s", exe,
                 strerror(err));
        return FW_RUN_FAILED;
    }
    int status = 0;
    if (wait_waiter(pid, &status)) {
        fw_cache_rm_build(build);
        snprintf(why, wn, "the program was signalled while the bridge was "
                 "built: the build was abandoned");
        return FW_RUN_ABANDONED;
    }
    int code = WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    if (code == 0)
        return FW_RUN_OK;
    if (code == 124)
        snprintf(why, wn, "the C++ compiler ran over %d s (see %s)",
                 FW_COMPILE_TIMEOUT_S, log);
    else if (code == 127)
        snprintf(why, wn, "cannot run the C++ compiler %s (see %s)", exe, log);
    else
        snprintf(why, wn, "compiling the bridge failed (see %s)", log);
    return FW_RUN_FAILED;
}
