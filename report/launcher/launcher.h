/* launcher.h - what the two files of the gpumemtrace launcher share.
 *
 * launcher.c runs the command: command line, environment, LD_PRELOAD,
 * exec, signal forwarding, exit status. launch_traces.c finds this run's
 * traces once the command has ended and prints a line for each. Neither
 * is part of gpumemreport: the launcher links libgmttrace (report/trace/)
 * alone, and runs gpumemreport as a program for --report's summary.
 *
 * tests/unit/test_launcher.c compiles launcher.c in and calls
 * pattern_dir() and name_matches() by these names.
 */
#ifndef GMT_LAUNCHER_H
#define GMT_LAUNCHER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- launcher.c: messages ------------------------------------------------ */
extern bool g_quiet; /* -q: print nothing but errors */
/* "gpumemtrace: <msg>" on stderr: what the launcher has to say; -q
 * silences it. */
void say(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The directory of this program (/proc/self/exe's); false: unknown. */
bool launcher_dir(char *out, size_t cap);

/* ---- launch_traces.c: this run's traces ------------------------------------ */
/* Does a file name fit the name part of the output pattern? */
bool name_matches(const char *pat, const char *s);
/* The directory part of an output pattern, expanded as the library would
 * in the launcher's place. False if it depends on the pid (not listable)
 * or does not fit in cap. */
bool pattern_dir(const char *pattern, char *out, size_t cap);
/* One line per trace of this session found through the (absolute) output
 * pattern, paths below cwd shown relative to it; with report (and not
 * -q), the full `gpumemreport summary` of them first, on stderr. disabled:
 * GPUMEMTRACE_DISABLE was set, which then explains a run without traces. */
void summarize(const char *pattern, const char *cwd, uint64_t session,
               bool report, bool disabled);

#endif /* GMT_LAUNCHER_H */
