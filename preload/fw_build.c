/* fw_build.c - building the PyTorch bridge against the program's PyTorch.
 *
 * PyTorch's allocator hook is C++ (a std::function over its TraceEntry),
 * so the bridge must be compiled against the very PyTorch the program
 * runs: its headers give the layout, its libc10_cuda.so the symbols. The
 * library carries the bridge's source (fw_torch.cpp and fw_bridge.h,
 * embedded at build time) and, the first time a given PyTorch is seen,
 * compiles it with the system's C++ compiler (GPUMEMTRACE_CXX, default
 * c++) against that PyTorch's include/ directory and the CUDA headers,
 * then keeps the result in a cache directory (fw_cache.c) keyed by
 * everything the result depends on: the sources, the library's path,
 * size and modification time, the compiler (as named, and the file it
 * resolves to), the PATH and LD_LIBRARY_PATH it runs with (they pick its
 * assembler, linker and libraries), the CUDA headers and the flags.
 * Later runs, other ranks and forked workers load the cached file: only
 * the first run waits, a few seconds. A machine without PyTorch never
 * gets here, and one without a compiler or PyTorch's headers gets one
 * line saying why and the trace PyTorch's segments give.
 *
 * What reaches the compiler is what the key holds: its environment is
 * cut down to PATH, LD_LIBRARY_PATH, HOME and the locale, so variables
 * that change what it includes or links (CPATH, CPLUS_INCLUDE_PATH,
 * LIBRARY_PATH, GCC_EXEC_PREFIX, COMPILER_PATH, LD_RUN_PATH, ...) cannot
 * put code into a bridge that later, clean runs load. Paths are passed as
 * arguments of their own: a comma in PyTorch's path must not split a
 * -Wl, option into linker flags.
 *
 * One process per key builds (the others wait on its lock, then use its
 * bridge, or its failure, which is remembered for a while), in a build
 * directory of its own; the result is sealed, flushed and renamed into
 * place whole. The compiler runs beside the program (fw_spawn.c) and the
 * build is abandoned when the program is signalled.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fw_build.h"
#include "internal.h"

/* Paths are built with snprintf into PATH_MAX buffers; one cut short
 * names no file, which the checks that follow then report. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wformat-truncation"
#endif

extern char **environ;
/* $(O)/preload/fw_src.c, generated from fw_torch.cpp and fw_bridge.h */
extern const char gmt_fw_torch_cpp[], gmt_fw_bridge_h[];

/* The stopping signals that came during the last build (fw_spawn.c),
 * raised again by gmt_fw_build_reraise. */
static unsigned g_caught;

/* One build: what it compiles against, with what, and where it goes. */
struct job {
    char lib[PATH_MAX], inc[PATH_MAX], cuda[PATH_MAX];
    char exe[PATH_MAX], exe_real[PATH_MAX]; /* as found; resolved */
    char abi_def[64];
    bool have_c10;
    char dir[PATH_MAX - 128];
    char so[PATH_MAX], lock[PATH_MAX], failed[PATH_MAX], log[PATH_MAX];
    bool damaged;           /* a cached bridge was there and refused */
    char rejected[256];     /* why */
};

static bool readable(const char *path)
{
    return access(path, R_OK) == 0;
}

static uint64_t fnv_str(uint64_t h, const char *s)
{
    return fw_fnv(h, s, strlen(s) + 1);
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


/* The environment the compiler gets: PATH and LD_LIBRARY_PATH (which
 * find and run it, its assembler and linker: in the key), HOME and the
 * locale (its messages), and TMPDIR, the build's directory (its
 * temporary files go when the build does). Nothing else: no variable
 * that changes what it includes or links, nor what would trace it. */
static char **compiler_env(const char *tmpdir)
{
    static const char *const keep[] = {"PATH=", "LD_LIBRARY_PATH=", "HOME=",
                                       "LANG=", "LC_"};
    size_t n = 0;
    while (environ && environ[n])
        n++;
    char **env = calloc(n + 2, sizeof *env);
    if (env == NULL)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < sizeof keep / sizeof keep[0]; j++)
            if (strncmp(environ[i], keep[j], strlen(keep[j])) == 0) {
                env[k++] = environ[i];
                break;
            }
    env[k] = (char *)tmpdir;
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


/* The compiler: as found (run as such: a wrapper may go by its name) and
 * resolved (what the key holds). */
static bool find_compiler(struct job *j, char *why, size_t wn)
{
    if (!find_program(gmt_opt.cxx, j->exe, sizeof j->exe)) {
        snprintf(why, wn, "no C++ compiler %s (GPUMEMTRACE_CXX)", gmt_opt.cxx);
        return false;
    }
    if (realpath(j->exe, j->exe_real) == NULL)
        snprintf(j->exe_real, sizeof j->exe_real, "%s", j->exe);
    return true;
}

static uint64_t job_key(const struct job *j, const char *path)
{
    struct stat st;
    if (stat(path, &st) != 0)
        memset(&st, 0, sizeof st);
    const char *vars[] = {"PATH", "LD_LIBRARY_PATH"};
    uint64_t key = 0xcbf29ce484222325ull;
    key = fnv_str(key, gmt_fw_torch_cpp);
    key = fnv_str(key, gmt_fw_bridge_h);
    key = fnv_str(key, path);
    key = fw_fnv(key, &st.st_size, sizeof st.st_size);
    key = fw_fnv(key, &st.st_mtim.tv_sec, sizeof st.st_mtim.tv_sec);
    key = fnv_str(key, gmt_opt.cxx);
    key = fnv_str(key, j->exe_real);
    for (int i = 0; i < 2; i++) {
        const char *v = getenv(vars[i]);
        key = fnv_str(key, v ? v : "(unset)");
    }
    key = fnv_str(key, j->cuda);
    key = fnv_str(key, j->abi_def);
    key = fnv_str(key, "-fno-omit-frame-pointer -Xlinker -rpath sealed");
    return key;
}

/* Everything a build needs, and where its bridge is cached. false with
 * why when it cannot be had here. */
static bool job_init(struct job *j, const char *path, char *why, size_t wn)
{
    char probe[PATH_MAX + 64];
    snprintf(j->lib, sizeof j->lib, "%s", path);
    char *slash = strrchr(j->lib, '/');
    if (slash == NULL) {
        snprintf(why, wn, "PyTorch's library has no directory: %s", path);
        return false;
    }
    *slash = '\0';
    snprintf(j->inc, sizeof j->inc, "%s/../include", j->lib);
    snprintf(probe, sizeof probe, "%s/c10/cuda/CUDACachingAllocator.h", j->inc);
    if (!readable(probe)) {
        snprintf(why, wn, "no PyTorch C++ headers in %s", j->inc);
        return false;
    }
    if (!cuda_include(j->lib, j->cuda, sizeof j->cuda)) {
        snprintf(why, wn, "no CUDA headers (cuda_runtime_api.h) for the "
                 "bridge; set CUDA_HOME");
        return false;
    }
    if (!find_compiler(j, why, wn))
        return false;
    snprintf(j->abi_def, sizeof j->abi_def, "-D_GLIBCXX_USE_CXX11_ABI=%d",
             cxx11_abi(j->lib));
    snprintf(probe, sizeof probe, "%s/libc10.so", j->lib);
    j->have_c10 = readable(probe);
    if (!fw_cache_dir(j->dir, sizeof j->dir, why, wn))
        return false;
    unsigned long long key = job_key(j, path);
    const char *ext[] = {"so", "lock", "failed", "log"};
    char *out[] = {j->so, j->lock, j->failed, j->log};
    for (int i = 0; i < 4; i++)
        snprintf(out[i], PATH_MAX, "%s/torch-bridge-%016llx.%s", j->dir, key,
                 ext[i]);
    return true;
}

/* Seal the built file, put it in place whole, and load it. */
static gmt_fw_attach_fn install(struct job *j, const char *built, char *why,
                                size_t wn)
{
    if (!fw_cache_seal(built, why, wn))
        return NULL;
    if (chmod(built, 0500) != 0 || rename(built, j->so) != 0) {
        snprintf(why, wn, "compiling the bridge produced nothing (see %s)",
                 j->log);
        return NULL;
    }
    int dfd = open(j->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd >= 0) { /* the rename on the disk too */
        fsync(dfd);
        close(dfd);
    }
    bool damaged;
    char err[256];
    gmt_fw_attach_fn fn = fw_cache_load(j->so, &damaged, err, sizeof err);
    if (fn == NULL)
        snprintf(why, wn, "the bridge built (%s) %s", j->so, err);
    return fn;
}

/* Compile the bridge into a build directory of its own and install it;
 * a failure is remembered (one abandoned for a signal is not). Under the
 * key's lock. */
static gmt_fw_attach_fn compile(struct job *j, char *why, size_t wn)
{
    char build[PATH_MAX], src[PATH_MAX], hdr[PATH_MAX], out[PATH_MAX],
        tmpdir[PATH_MAX + 8];
    snprintf(build, sizeof build, "%s/build-XXXXXX", j->dir);
    if (mkdtemp(build) == NULL) {
        snprintf(why, wn, "cannot create a build directory in %s: %s", j->dir,
                 strerror(errno));
        return NULL;
    }
    snprintf(src, sizeof src, "%s/fw_torch.cpp", build);
    snprintf(hdr, sizeof hdr, "%s/fw_bridge.h", build);
    snprintf(out, sizeof out, "%s/bridge.so", build);
    snprintf(tmpdir, sizeof tmpdir, "TMPDIR=%s", build);
    char **env = compiler_env(tmpdir);
    gmt_fw_attach_fn fn = NULL;
    int rc = FW_RUN_FAILED;
    if (env == NULL || !write_file(src, gmt_fw_torch_cpp) ||
        !write_file(hdr, gmt_fw_bridge_h)) {
        snprintf(why, wn, "cannot write the bridge's source into %s", build);
        goto out;
    }
    if (j->damaged)
        gmt_info("the cached PyTorch bridge %s was refused (%s): building it "
                 "again", j->so, j->rejected);
    else
        gmt_info("building the PyTorch bridge for %s (once; cached in %s)",
                 j->lib, j->dir);
    char inc_flag[PATH_MAX + 8], cuda_flag[PATH_MAX + 8], lib_flag[PATH_MAX + 8];
    snprintf(inc_flag, sizeof inc_flag, "-I%s", j->inc);
    snprintf(cuda_flag, sizeof cuda_flag, "-I%s", j->cuda);
    snprintf(lib_flag, sizeof lib_flag, "-L%s", j->lib);
    /* frame pointers: stack.c's unwind cache follows them through the
     * bridge's frames, which are ours. The rpath through -Xlinker, its
     * path an argument of its own: -Wl, would split it at commas. */
    char *argv[] = {(char *)gmt_opt.cxx, "-std=c++17", "-O2", "-fPIC",
                    "-fno-omit-frame-pointer", "-shared", "-fvisibility=hidden",
                    "-w", j->abi_def, inc_flag, cuda_flag, src, "-o", out,
                    lib_flag, "-Xlinker", "-rpath", "-Xlinker", j->lib,
                    "-lc10_cuda", j->have_c10 ? "-lc10" : NULL, NULL};
    rc = fw_spawn(j->exe, argv, env, j->log, build, why, wn);
    if (rc == FW_RUN_OK)
        fn = install(j, out, why, wn);
out:
    if (fn != NULL)
        unlink(j->failed);
    else if (rc != FW_RUN_ABANDONED)
        fw_cache_mark_failed(j->failed, why);
    fw_cache_rm_build(build);
    free(env);
    return fn;
}

/* The cached bridge, else one built now (once for every process of the
 * key: under its lock), unless its build failed a short while ago. The
 * program's stopping signals abandon the wait and the build. */
static gmt_fw_attach_fn job_get(struct job *j, char *why, size_t wn)
{
    gmt_fw_attach_fn fn = fw_cache_load(j->so, &j->damaged, j->rejected,
                                        sizeof j->rejected);
    if (fn != NULL || fw_cache_failed_recently(j->failed, why, wn))
        return fn;
    fw_stop_begin();
    int lfd = fw_cache_lock(j->lock, why, wn);
    if (lfd >= 0) {
        /* built, or failed, by another process while we waited */
        fn = fw_cache_load(j->so, &j->damaged, j->rejected, sizeof j->rejected);
        if (fn == NULL && !fw_cache_failed_recently(j->failed, why, wn))
            fn = compile(j, why, wn);
        close(lfd);
    }
    g_caught = fw_stop_end();
    return fn;
}

gmt_fw_attach_fn gmt_fw_build(const char *path, char *why, size_t wn)
{
    struct job *j = calloc(1, sizeof *j);
    if (j == NULL) {
        snprintf(why, wn, "no memory to build the bridge");
        return NULL;
    }
    gmt_fw_attach_fn fn = job_init(j, path, why, wn) ? job_get(j, why, wn)
                                                     : NULL;
    if (fn != NULL && j->damaged)
        snprintf(why, wn, "the cached PyTorch bridge %s was refused (%s) and "
                 "built again", j->so, j->rejected);
    else if (fn != NULL)
        why[0] = '\0';
    free(j);
    return fn;
}

void gmt_fw_build_reraise(void)
{
    unsigned caught = g_caught;
    g_caught = 0;
    fw_stop_reraise(caught);
}
