/* fw_build.c - building the PyTorch bridge against the program's PyTorch.
 *
 * PyTorch's allocator hook is C++ (a std::function over its TraceEntry),
 * so the bridge must be compiled against the very PyTorch the program
 * runs: its headers give the layout, its libc10_cuda.so the symbols. The
 * library carries the bridge's source (fw_torch.cpp and fw_bridge.h,
 * embedded at build time) and, the first time a given PyTorch is seen,
 * compiles it with the system's C++ compiler (GPUMEMTRACE_CXX, default
 * c++) against that PyTorch's include/ directory and the CUDA headers,
 * then keeps the result in a cache directory keyed by everything the
 * result depends on (the sources, the library path and its size and
 * modification time, the compiler and its flags). Later runs, other ranks
 * and forked workers load the cached file: only the first run waits,
 * a few seconds. A machine without PyTorch never gets here, and one
 * without a compiler or PyTorch's headers gets one line saying why and
 * the trace PyTorch's segments give.
 *
 * Safety. We load code from the cache, so it must be the user's own
 * directory (mode 0700, no symbolic link) under directories no one else
 * can write, and a bridge file the user's, writable by no one else.
 * Concurrent processes build once: a lock file per key serializes them
 * (waited for at most a compile's time), each build works in a directory
 * of its own and the result is renamed into place whole; a cached file
 * that will not load is built again. The compiler runs without our
 * LD_PRELOAD and tracing variables, as a child the program cannot see
 * (no SIGCHLD: see run()), with its output in a log file beside the
 * result, and is killed, with its own children, after two minutes.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"

/* Paths are built with snprintf into PATH_MAX buffers; one cut short
 * names no file, which the checks that follow then report. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

extern char **environ;
/* $(O)/preload/fw_src.c, generated from fw_torch.cpp and fw_bridge.h */
extern const char gmt_fw_torch_cpp[], gmt_fw_bridge_h[];

#define COMPILE_TIMEOUT_S 120

static bool readable(const char *path)
{
    return access(path, R_OK) == 0;
}

static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint64_t fnv_str(uint64_t h, const char *s)
{
    return fnv(h, s, strlen(s) + 1);
}

/* The CUDA headers PyTorch's headers include: the toolkit's, or those of
 * NVIDIA's Python wheels beside torch. */
static bool cuda_include(const char *torch_lib, char *out, size_t n)
{
    const char *envs[] = {"CUDA_HOME", "CUDA_PATH"};
    for (int i = 0; i < 2; i++) {
        const char *h = getenv(envs[i]);
        if (h && *h) {
            snprintf(out, n, "%s/include", h);
            char probe[PATH_MAX];
            snprintf(probe, sizeof probe, "%s/cuda_runtime_api.h", out);
            if (readable(probe))
                return true;
        }
    }
    const char *rel[] = {"/../../nvidia/cuda_runtime/include",
                         "/../../nvidia/cu13/include",
                         "/../../nvidia/cu12/include"};
    for (int i = 0; i < 3; i++) {
        snprintf(out, n, "%s%s", torch_lib, rel[i]);
        char probe[PATH_MAX];
        snprintf(probe, sizeof probe, "%s/cuda_runtime_api.h", out);
        if (readable(probe))
            return true;
    }
    snprintf(out, n, "/usr/local/cuda/include");
    return readable("/usr/local/cuda/include/cuda_runtime_api.h");
}

/* The C++ ABI libc10 was built with: std::string in its mangled names
 * says which. Unknown (a stand-in without libc10): the new one, as every
 * PyTorch wheel since 2.7. */
static int cxx11_abi(const char *torch_lib)
{
    char path[PATH_MAX];
    snprintf(path, sizeof path, "%s/libc10.so", torch_lib);
    void *h = dlopen(path, RTLD_LAZY | RTLD_NOLOAD);
    if (h == NULL)
        return 1;
    int abi = 1;
    if (gmt_real_dlsym(h, "_ZN3c105ErrorC1ENS_14SourceLocationESs") != NULL)
        abi = 0;
    dlclose(h);
    return abi;
}

/* Can a directory on the way to the cache be trusted: owned by root or
 * the user, and not writable by others unless sticky (/tmp)? */
static bool trusted_parent(const struct stat *st)
{
    if (st->st_uid != 0 && st->st_uid != geteuid())
        return false;
    return !(st->st_mode & 022) || (st->st_mode & S_ISVTX);
}

/* The user's cache directory, created 0700. We load code from it, so
 * every directory above it must be one nobody else can rename or replace
 * entries in, and it must be the user's own, reachable by no one else
 * (lstat: a symbolic link is refused, not followed). false if unusable. */
static bool cache_dir(char *out, size_t n, char *why, size_t wn)
{
    const char *base = gmt_opt.cache;
    if (base && *base == '/') {
        snprintf(out, n, "%s", base);
    } else if (base && *base) {
        snprintf(why, wn, "GPUMEMTRACE_CACHE must be an absolute path");
        return false;
    } else if ((base = getenv("XDG_CACHE_HOME")) && *base == '/') {
        snprintf(out, n, "%s/gpumemtrace", base);
    } else if ((base = getenv("HOME")) && *base == '/') {
        snprintf(out, n, "%s/.cache/gpumemtrace", base);
    } else {
        snprintf(why, wn, "no cache directory (set GPUMEMTRACE_CACHE)");
        return false;
    }
    size_t len = strlen(out);
    while (len > 1 && out[len - 1] == '/')
        out[--len] = '\0';
    struct stat st;
    for (char *p = out + 1;; p++) { /* mkdir -p, checking each level */
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        if (mkdir(out, 0700) != 0 && errno != EEXIST) {
            snprintf(why, wn, "cannot create %s: %s", out, strerror(errno));
            *p = c;
            return false;
        }
        bool leaf = c == '\0';
        if (lstat(out, &st) != 0 || !S_ISDIR(st.st_mode) ||
            (!leaf && !trusted_parent(&st)) ||
            (leaf && (st.st_uid != geteuid() || (st.st_mode & 077)))) {
            snprintf(why, wn, "%s %s is a link, or another user's, or open "
                     "to others: no bridge is loaded from it (mode 0700, "
                     "yours)", leaf ? "the cache directory" : "the directory",
                     out);
            *p = c;
            return false;
        }
        *p = c;
        if (leaf)
            return true;
    }
}

static bool write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW,
                  0600);
    if (fd < 0)
        return false;
    size_t n = strlen(text), off = 0;
    while (off < n) {
        ssize_t w = write(fd, text + off, n - off);
        if (w <= 0) {
            close(fd);
            return false;
        }
        off += (size_t)w;
    }
    return close(fd) == 0;
}

/* The environment without what would trace the compiler. */
static char **clean_environ(void)
{
    size_t n = 0;
    while (environ && environ[n])
        n++;
    char **env = calloc(n + 1, sizeof *env);
    if (env == NULL)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        const char *e = environ[i];
        if (strncmp(e, "LD_PRELOAD=", 11) == 0 ||
            strncmp(e, "GPUMEMTRACE_", 12) == 0 ||
            strncmp(e, "NVTX_INJECTION", 14) == 0 ||
            strncmp(e, "CUDA_INJECTION", 14) == 0)
            continue;
        env[k++] = (char *)e;
    }
    return env;
}

/* The compiler's file: GPUMEMTRACE_CXX as a path, else found on PATH. */
static bool find_program(const char *name, char *out, size_t n)
{
    if (strchr(name, '/')) {
        snprintf(out, n, "%s", name);
        return access(out, X_OK) == 0;
    }
    const char *path = getenv("PATH");
    for (const char *p = path ? path : "/usr/bin:/bin"; *p;) {
        size_t len = strcspn(p, ":");
        snprintf(out, n, "%.*s/%s", (int)len, len ? p : ".", name);
        if (access(out, X_OK) == 0)
            return true;
        p += len + (p[len] == ':');
    }
    return false;
}

/* What the two children need (they share our memory: see run()). */
struct child {
    const char *exe, *log;
    char *const *argv, *const *envp;
    sigset_t mask;    /* the caller's mask, restored before exec */
    char *stack;      /* the compiler's child's stack (top) */
};

/* The program's signal handlers are not ours to run in a child that
 * shares its memory. */
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
    setpgid(0, 0); /* its own group: a timeout kills its children too */
    int in = open("/dev/null", O_RDONLY);
    int out = open(c->log, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW, 0600);
    if (in < 0 || out < 0 || dup2(in, 0) < 0 || dup2(out, 1) < 0 ||
        dup2(out, 2) < 0)
        _exit(127);
#ifdef SYS_close_range
    syscall(SYS_close_range, 3u, ~0u, 0u); /* none of the program's fds */
#endif
    sigprocmask(SIG_SETMASK, &c->mask, NULL);
    execve(c->exe, c->argv, c->envp);
    _exit(127);
}

/* The compiler's parent: starts it, waits for it (killing it after
 * COMPILE_TIMEOUT_S), and exits with 0 (it succeeded), 1 (it failed),
 * 124 (killed) or 127 (it could not start). It never execs, so its own
 * exit signals nothing to the program. */
static int waiter_main(void *arg)
{
    const struct child *c = arg;
    default_handlers();
    /* A program that ignores SIGCHLD would have the compiler reaped
     * before we could read how it ended (and the compiler its own
     * children): not in here. */
    signal(SIGCHLD, SIG_DFL);
    pid_t pid = clone(compiler_main, c->stack, CLONE_VM | CLONE_VFORK | SIGCHLD,
                      (void *)c);
    if (pid < 0)
        _exit(127);
    struct timespec t0, now, nap = {0, 20 * 1000 * 1000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int status;
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid)
            _exit(WIFEXITED(status) ? (WEXITSTATUS(status) == 0  ? 0
                                       : WEXITSTATUS(status) == 127 ? 127
                                                                    : 1)
                                    : 1);
        if (w < 0 && errno != EINTR)
            _exit(1);
        clock_gettime(CLOCK_MONOTONIC, &now);
        if (now.tv_sec - t0.tv_sec >= COMPILE_TIMEOUT_S) {
            kill(-pid, SIGKILL);
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            _exit(124);
        }
        nanosleep(&nap, NULL);
    }
}

/* Run argv with its output in log; 0 if it exited 0, -1 with why.
 *
 * Not fork or posix_spawn: their child's exit sends the program a
 * SIGCHLD, and a program that reaps any child (a SIGCHLD handler calling
 * wait(), an event loop's child watcher) would see, or take, a process
 * it never started. An exec gives even a clone()d child SIGCHLD as its
 * exit signal, so the compiler is started by a child of ours that never
 * execs and exits with no signal: the compiler's exit signals that
 * child, which only waitpid(__WALL) sees. Both share our memory
 * (CLONE_VM, no copy of a large process) and this thread waits for them
 * (CLONE_VFORK) - the build is waited for anyway. */
static int run(char *const argv[], const char *log, char *why, size_t wn)
{
    char exe[PATH_MAX];
    if (!find_program(argv[0], exe, sizeof exe)) {
        snprintf(why, wn, "no C++ compiler %s (GPUMEMTRACE_CXX)", argv[0]);
        return -1;
    }
    char **env = clean_environ();
    size_t stack_size = 64 * 1024;
    char *stacks = mmap(NULL, 2 * stack_size, PROT_READ | PROT_WRITE,
                        MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
    if (env == NULL || stacks == MAP_FAILED) {
        free(env);
        if (stacks != MAP_FAILED)
            munmap(stacks, 2 * stack_size);
        snprintf(why, wn, "no memory to run the C++ compiler");
        return -1;
    }
    struct child c = {exe, log, argv, env, {{0}}, stacks + 2 * stack_size};
    sigset_t all;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &c.mask);
    pid_t pid = clone(waiter_main, stacks + stack_size, CLONE_VM | CLONE_VFORK, &c);
    int err = errno, status = 0;
    if (pid > 0)
        while (waitpid(pid, &status, __WALL) < 0 && errno == EINTR)
            ;
    pthread_sigmask(SIG_SETMASK, &c.mask, NULL);
    munmap(stacks, 2 * stack_size);
    free(env);
    int code = pid < 0 ? -1 : WIFEXITED(status) ? WEXITSTATUS(status) : 1;
    if (code == 0)
        return 0;
    if (pid < 0)
        snprintf(why, wn, "cannot run the C++ compiler %s: %s", exe, strerror(err));
    else if (code == 124)
        snprintf(why, wn, "the C++ compiler ran over %d s (see %s)",
                 COMPILE_TIMEOUT_S, log);
    else if (code == 127)
        snprintf(why, wn, "cannot run the C++ compiler %s (see %s)", exe, log);
    else
        snprintf(why, wn, "compiling the bridge failed (see %s)", log);
    return -1;
}

/* Load a bridge: a regular file of the user's, writable by nobody else. */
static gmt_fw_attach_fn load(const char *so, char *why, size_t wn)
{
    struct stat st;
    if (lstat(so, &st) != 0 || !S_ISREG(st.st_mode) ||
        st.st_uid != geteuid() || (st.st_mode & 022)) {
        snprintf(why, wn, "%s is not a file of the user's, or is writable "
                 "by others: not loaded", so);
        return NULL;
    }
    void *h = dlopen(so, RTLD_NOW | RTLD_LOCAL);
    if (h == NULL) {
        const char *e = dlerror();
        snprintf(why, wn, "cannot load %s: %s", so, e ? e : "?");
        return NULL;
    }
    gmt_fw_attach_fn fn;
    void *sym = gmt_real_dlsym(h, GMT_FW_ATTACH_SYM);
    memcpy(&fn, &sym, sizeof fn);
    if (fn == NULL)
        snprintf(why, wn, "%s has no %s", so, GMT_FW_ATTACH_SYM);
    else
        gmt_modules_add_bridge(sym);
    return fn;
}

/* Take the build lock of one key, waiting at most a compile's time for
 * another process that builds it (one stopped or stuck must not hang
 * this one: it runs inside PyTorch's first cudaMalloc). */
static int lock_key(const char *lock, char *why, size_t wn)
{
    int fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        snprintf(why, wn, "cannot open %s: %s", lock, strerror(errno));
        return -1;
    }
    struct timespec t0, now, nap = {0, 50 * 1000 * 1000};
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        clock_gettime(CLOCK_MONOTONIC, &now);
        if ((errno != EWOULDBLOCK && errno != EINTR) ||
            now.tv_sec - t0.tv_sec > COMPILE_TIMEOUT_S + 30) {
            snprintf(why, wn, "another process holds %s (building the "
                     "bridge?) for too long", lock);
            close(fd);
            return -1;
        }
        nanosleep(&nap, NULL);
    }
    return fd;
}

gmt_fw_attach_fn gmt_fw_build(const char *path, char *why, size_t wn)
{
    char lib[PATH_MAX], inc[PATH_MAX], cuda[PATH_MAX], probe[PATH_MAX + 64];
    snprintf(lib, sizeof lib, "%s", path);
    char *slash = strrchr(lib, '/');
    if (slash == NULL) {
        snprintf(why, wn, "PyTorch's library has no directory: %s", path);
        return NULL;
    }
    *slash = '\0';
    snprintf(inc, sizeof inc, "%s/../include", lib);
    snprintf(probe, sizeof probe, "%s/c10/cuda/CUDACachingAllocator.h", inc);
    if (!readable(probe)) {
        snprintf(why, wn, "no PyTorch C++ headers in %s", inc);
        return NULL;
    }
    if (!cuda_include(lib, cuda, sizeof cuda)) {
        snprintf(why, wn, "no CUDA headers (cuda_runtime_api.h) for the "
                 "bridge; set CUDA_HOME");
        return NULL;
    }
    int abi = cxx11_abi(lib);
    char abi_def[64], c10[PATH_MAX + 8], rpath[PATH_MAX + 16];
    snprintf(abi_def, sizeof abi_def, "-D_GLIBCXX_USE_CXX11_ABI=%d", abi);
    snprintf(rpath, sizeof rpath, "-Wl,-rpath,%s", lib);
    snprintf(c10, sizeof c10, "%s/libc10.so", lib);
    bool have_c10 = readable(c10);

    struct stat st;
    if (stat(path, &st) != 0)
        memset(&st, 0, sizeof st);
    uint64_t key = 0xcbf29ce484222325ull;
    key = fnv_str(key, gmt_fw_torch_cpp);
    key = fnv_str(key, gmt_fw_bridge_h);
    key = fnv_str(key, path);
    key = fnv(key, &st.st_size, sizeof st.st_size);
    key = fnv(key, &st.st_mtim.tv_sec, sizeof st.st_mtim.tv_sec);
    key = fnv_str(key, gmt_opt.cxx);
    key = fnv_str(key, cuda);
    key = fnv_str(key, abi_def);
    key = fnv_str(key, "-fno-omit-frame-pointer"); /* bridges built before */

    char dir[PATH_MAX - 128];
    if (!cache_dir(dir, sizeof dir, why, wn))
        return NULL;
    char so[PATH_MAX], lock[PATH_MAX], build[PATH_MAX], src[PATH_MAX],
        hdr[PATH_MAX], log[PATH_MAX], tmp[PATH_MAX];
    snprintf(so, sizeof so, "%s/torch-bridge-%016llx.so", dir,
             (unsigned long long)key);
    gmt_fw_attach_fn fn = NULL;
    if (access(so, F_OK) == 0 && (fn = load(so, why, wn)) != NULL)
        return fn;

    snprintf(lock, sizeof lock, "%s/torch-bridge-%016llx.lock", dir,
             (unsigned long long)key);
    int lfd = lock_key(lock, why, wn);
    if (lfd < 0)
        return NULL;
    if (access(so, F_OK) == 0) {
        /* built by another process meanwhile - or a file that would not
         * load (a partial copy, another host's libstdc++): build anew */
        if ((fn = load(so, why, wn)) != NULL)
            goto out;
        unlink(so);
    }
    /* Sources and output in a directory of this build's own: builds of
     * other keys (another gpumemtrace beside this one) never mix. */
    snprintf(build, sizeof build, "%s/build-XXXXXX", dir);
    if (mkdtemp(build) == NULL) {
        snprintf(why, wn, "cannot create a build directory in %s: %s", dir,
                 strerror(errno));
        goto out;
    }
    snprintf(src, sizeof src, "%s/fw_torch.cpp", build);
    snprintf(hdr, sizeof hdr, "%s/fw_bridge.h", build);
    snprintf(tmp, sizeof tmp, "%s/bridge.so", build);
    snprintf(log, sizeof log, "%s/torch-bridge-%016llx.log", dir,
             (unsigned long long)key);
    unlink(log);
    if (!write_file(src, gmt_fw_torch_cpp) || !write_file(hdr, gmt_fw_bridge_h)) {
        snprintf(why, wn, "cannot write the bridge's source into %s", build);
        goto clean;
    }
    gmt_info("building the PyTorch bridge for %s (once; cached in %s)", lib,
             dir);
    char inc_flag[PATH_MAX + 8], cuda_flag[PATH_MAX + 8], lib_flag[PATH_MAX + 8];
    snprintf(inc_flag, sizeof inc_flag, "-I%s", inc);
    snprintf(cuda_flag, sizeof cuda_flag, "-I%s", cuda);
    snprintf(lib_flag, sizeof lib_flag, "-L%s", lib);
    /* frame pointers: stack.c's unwind cache follows them through the
     * bridge's frames, which are ours */
    char *argv[] = {(char *)gmt_opt.cxx, "-std=c++17", "-O2", "-fPIC",
                    "-fno-omit-frame-pointer",
                    "-shared", "-fvisibility=hidden", "-w", abi_def,
                    inc_flag, cuda_flag, src, "-o", tmp, lib_flag, rpath,
                    "-lc10_cuda", have_c10 ? "-lc10" : NULL, NULL};
    if (run(argv, log, why, wn) != 0)
        goto clean;
    if (chmod(tmp, 0500) != 0 || rename(tmp, so) != 0) {
        snprintf(why, wn, "compiling the bridge produced nothing (see %s)",
                 log);
        goto clean;
    }
    fn = load(so, why, wn);
clean:
    unlink(tmp);
    unlink(src);
    unlink(hdr);
    rmdir(build);
out:
    flock(lfd, LOCK_UN);
    close(lfd);
    return fn;
}
