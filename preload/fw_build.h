/* fw_build.h - the PyTorch bridge's build, shared by its three files:
 * fw_build.c (what is compiled, with what, under which cache key, and
 * the steps), fw_cache.c (the cache directory and what is trusted from
 * it: checked bridges, remembered failures, the build lock) and
 * fw_spawn.c (the compiler run beside the program, which stays free to
 * take its signals). Nothing here is used outside these files and fw.c.
 */
#ifndef GMT_FW_BUILD_H
#define GMT_FW_BUILD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fw_bridge.h"

/* A failed build is not tried again for this long (a failure marker
 * beside the key's bridge says why, and where its log is). */
#define FW_FAIL_TTL_S 600

/* The compiler is killed after this long, and another process's build
 * is waited for at most about this long. */
#define FW_COMPILE_TIMEOUT_S 120

/* ---- fw_cache.c ---------------------------------------------------------- */

/* FNV-1a over n bytes, from h (0xcbf29ce484222325 to begin): the cache
 * key and the seal's hash. */
uint64_t fw_fnv(uint64_t h, const void *p, size_t n);

/* The user's bridge cache directory into out (n bytes), created 0700 and
 * checked: every directory above it, once resolved, one nobody else can
 * write to; it, the user's own and not a symbolic link. false with why. */
bool fw_cache_dir(char *out, size_t n, char *why, size_t wn);

/* Load the bridge at so, checked whole first (see fw_cache.c: a seal
 * written after the file reached the disk). NULL when it cannot be had;
 * then *damaged says whether a file was there and was refused (why says
 * what was wrong with it: it is to be built again), or none was. */
gmt_fw_attach_fn fw_cache_load(const char *so, bool *damaged, char *why,
                               size_t wn);

/* Append the seal that fw_cache_load checks to the freshly built file at
 * path and flush it to the disk. false with why. */
bool fw_cache_seal(const char *path, char *why, size_t wn);

/* Is there a failure marker at marker younger than FW_FAIL_TTL_S? Then
 * why says so, with the failure's own words. */
bool fw_cache_failed_recently(const char *marker, char *why, size_t wn);

/* Remember a failed build (its reason, which names its log). */
void fw_cache_mark_failed(const char *marker, const char *why);

/* Take the build lock at path, waiting at most a compile's time for
 * another process's build and giving up at once when the program is
 * signalled. The lock's descriptor (close to release), or -1 with why. */
int fw_cache_lock(const char *path, char *why, size_t wn);

/* Remove a build directory: its files, then itself. Only system calls,
 * so the compiler's waiter can do it after the program has died. */
void fw_cache_rm_build(const char *dir);

/* ---- fw_spawn.c ----------------------------------------------------------- */

/* The program's stopping signals (SIGINT, SIGTERM, ...) while a build or
 * its wait runs: fw_stop_begin notes them instead of acting, so the build
 * can be abandoned at once; fw_stop_end puts the program's own handlers
 * back and returns the signals that came (a mask for fw_stop_reraise). */
void fw_stop_begin(void);
bool fw_stop_requested(void);
unsigned fw_stop_end(void);
void fw_stop_reraise(unsigned caught);

enum { FW_RUN_OK = 0, FW_RUN_FAILED = -1, FW_RUN_ABANDONED = -2 };

/* Run the compiler exe with argv and envp, its output in log, its
 * temporary files in build: FW_RUN_OK, FW_RUN_FAILED with why (it
 * failed, ran over FW_COMPILE_TIMEOUT_S or could not start), or
 * FW_RUN_ABANDONED (the program was signalled: the compiler and its
 * children are killed and build is emptied). */
int fw_spawn(const char *exe, char *const argv[], char *const envp[],
             const char *log, const char *build, char *why, size_t wn);

#endif
