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
 * Safety. The cache is the user's own directory (mode 0700, refused if
 * another user could write it: we load code from it). Concurrent
 * processes build once: a lock file serializes them and the result is
 * renamed into place whole. The compiler runs without our LD_PRELOAD and
 * tracing variables, its output goes to a log file beside the result,
 * and a compiler that hangs is killed after two minutes.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
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

/* The user's cache directory, created 0700; false if unusable. */
static bool cache_dir(char *out, size_t n, char *why, size_t wn)
{
    const char *base = gmt_opt.cache;
    if (base && *base) {
        snprintf(out, n, "%s", base);
    } else if ((base = getenv("XDG_CACHE_HOME")) && *base == '/') {
        snprintf(out, n, "%s/gpumemtrace", base);
    } else if ((base = getenv("HOME")) && *base == '/') {
        snprintf(out, n, "%s/.cache/gpumemtrace", base);
    } else {
        snprintf(why, wn, "no cache directory (set GPUMEMTRACE_CACHE)");
        return false;
    }
    for (char *p = out + 1;; p++) { /* mkdir -p */
        if (*p != '/' && *p != '\0')
            continue;
        char c = *p;
        *p = '\0';
        int rc = mkdir(out, 0700);
        *p = c;
        if (rc != 0 && errno != EEXIST)
            break;
        if (c == '\0')
            break;
    }
    struct stat st;
    if (stat(out, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(why, wn, "cannot create the cache directory %s", out);
        return false;
    }
    if (st.st_uid != getuid() || (st.st_mode & 022)) {
        snprintf(why, wn, "the cache directory %s is not the user's own "
                 "(owner or mode): a bridge is not loaded from it", out);
        return false;
    }
    return true;
}

static bool write_file(const char *path, const char *text)
{
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW,
                  0600);
    if (fd < 0)
        return false;
    size_t n = strlen(text), off = 0;
    while (off < n) {
        ssize_t w = write(fd, text + off, n - off);
        if (w <= 0) {
            close(fd);
            unlink(tmp);
            return false;
        }
        off += (size_t)w;
    }
    close(fd);
    return rename(tmp, path) == 0;
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

/* Run argv with output to log; 0 if it exited 0. */
static int run(char *const argv[], const char *log, char *why, size_t wn)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 0, "/dev/null", O_RDONLY, 0);
    posix_spawn_file_actions_addopen(&fa, 1, log,
                                     O_WRONLY | O_CREAT | O_TRUNC, 0600);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    char **env = clean_environ();
    pid_t pid;
    int rc = env ? posix_spawnp(&pid, argv[0], &fa, NULL, argv, env) : ENOMEM;
    posix_spawn_file_actions_destroy(&fa);
    free(env);
    if (rc != 0) {
        snprintf(why, wn, "cannot run the C++ compiler %s: %s "
                 "(GPUMEMTRACE_CXX)", argv[0], strerror(rc));
        return -1;
    }
    struct timespec nap = {0, 20 * 1000 * 1000};
    for (int waited = 0;; waited++) {
        int status;
        pid_t w = waitpid(pid, &status, WNOHANG);
        if (w == pid) {
            if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
                return 0;
            snprintf(why, wn, "compiling the bridge failed (see %s)", log);
            return -1;
        }
        if (w < 0 && errno != EINTR) {
            /* reaped by the program's own SIGCHLD handler: the result
             * tells */
            return 1;
        }
        if (waited * 20 >= COMPILE_TIMEOUT_S * 1000) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            snprintf(why, wn, "the C++ compiler ran over %d s (see %s)",
                     COMPILE_TIMEOUT_S, log);
            return -1;
        }
        nanosleep(&nap, NULL);
    }
}

static gmt_fw_attach_fn load(const char *so, char *why, size_t wn)
{
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

    char dir[PATH_MAX - 128];
    if (!cache_dir(dir, sizeof dir, why, wn))
        return NULL;
    char so[PATH_MAX], lock[PATH_MAX], src[PATH_MAX], hdr[PATH_MAX],
        log[PATH_MAX], tmp[PATH_MAX];
    snprintf(so, sizeof so, "%s/torch-bridge-%016llx.so", dir,
             (unsigned long long)key);
    if (readable(so))
        return load(so, why, wn);

    snprintf(lock, sizeof lock, "%s/torch-bridge-%016llx.lock", dir,
             (unsigned long long)key);
    int lfd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (lfd < 0 || flock(lfd, LOCK_EX) != 0) {
        snprintf(why, wn, "cannot lock %s: %s", lock, strerror(errno));
        if (lfd >= 0)
            close(lfd);
        return NULL;
    }
    gmt_fw_attach_fn fn = NULL;
    if (readable(so)) { /* another process built it meanwhile */
        fn = load(so, why, wn);
        goto out;
    }
    snprintf(src, sizeof src, "%s/fw_torch.cpp", dir);
    snprintf(hdr, sizeof hdr, "%s/fw_bridge.h", dir);
    snprintf(log, sizeof log, "%s/torch-bridge-%016llx.log", dir,
             (unsigned long long)key);
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", so, (int)getpid());
    if (!write_file(src, gmt_fw_torch_cpp) || !write_file(hdr, gmt_fw_bridge_h)) {
        snprintf(why, wn, "cannot write the bridge's source into %s", dir);
        goto out;
    }
    gmt_info("building the PyTorch bridge for %s (once; cached in %s)", lib,
             dir);
    char inc_flag[PATH_MAX + 8], cuda_flag[PATH_MAX + 8], lib_flag[PATH_MAX + 8];
    snprintf(inc_flag, sizeof inc_flag, "-I%s", inc);
    snprintf(cuda_flag, sizeof cuda_flag, "-I%s", cuda);
    snprintf(lib_flag, sizeof lib_flag, "-L%s", lib);
    char *argv[] = {(char *)gmt_opt.cxx, "-std=c++17", "-O2", "-fPIC",
                    "-shared", "-fvisibility=hidden", "-w", abi_def,
                    inc_flag, cuda_flag, src, "-o", tmp, lib_flag, rpath,
                    "-lc10_cuda", have_c10 ? "-lc10" : NULL, NULL};
    int rc = run(argv, log, why, wn);
    if (rc < 0) {
        unlink(tmp);
        goto out;
    }
    if (!readable(tmp) || rename(tmp, so) != 0) {
        unlink(tmp);
        snprintf(why, wn, "compiling the bridge produced nothing (see %s)",
                 log);
        goto out;
    }
    fn = load(so, why, wn);
out:
    flock(lfd, LOCK_UN);
    close(lfd);
    return fn;
}
