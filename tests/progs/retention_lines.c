/* retention_lines.c - retention lines as a damaged or hostile recorder
 * might write them, through the library's own entry point
 * (gpumemtrace_retention_line): `gpumemreport retention` must show the
 * well-formed ones and count the rest, never crash.
 *
 * Capture 1 is well formed: two top-level holders (the first written the
 * older way, without the field naming where a holder lies), one holder
 * nested in the second, three blocks, one of them at the address of a
 * live allocation (its site is this file's cudaMalloc).
 * Then lines that must be skipped: fields missing, numbers that are not,
 * a holder index out of range, a block before any capture, a second
 * capture 1, a capture 0, an unknown line type, an empty line, holders
 * nested in a holder that is not there, or is nested itself. */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

#include <cuda_runtime_api.h>

typedef int (*line_fn)(unsigned, const char *, size_t);

static void say(line_fn f, unsigned capture, const char *s)
{
    f(capture, s, strlen(s));
}

int main(void)
{
    void *p = NULL;
    if (cudaMalloc(&p, 1 << 20) != cudaSuccess) /* starts the tracer */
        return 1;
    line_fn line = (line_fn)dlsym(RTLD_DEFAULT, "gpumemtrace_retention_line");
    if (line == NULL) {
        printf("no gpumemtrace_retention_line: not traced\n");
        return 1;
    }
    char buf[256];
    say(line, 7, "block\t1000\t64\t-1\tbefore any capture");
    say(line, 1, "capture\ttest\t100\t3\t2\t0.001\t");
    say(line, 1, "holder\t1048576\t1\t__main__.kept");
    say(line, 1, "holder\t4096\t2\t__main__.other\x1f.cache\x1f['k']\t-1");
    say(line, 1, "holder\t2048\t1\t__main__.other\x1f.cache\x1f['k']\x1f[1]\t1");
    snprintf(buf, sizeof buf, "block\t%llx\t1048576\t0\t__main__.kept",
             (unsigned long long)(size_t)p);
    say(line, 1, buf);
    say(line, 1, "block\tdeadbeef000\t2048\t1\t__main__.other\x1f.cache\x1f['k']\x1f[0]");
    say(line, 1, "block\tdeadbeef800\t2048\t1\t__main__.other\x1f.cache\x1f['k']\x1f[1]");
    /* what must be skipped */
    say(line, 1, "holder\t12");
    say(line, 1, "holder\tlots\t1\tx");
    say(line, 1, "block\tnothex\t5\t0\tx");
    say(line, 1, "block\t1000\t5\t99\tholder out of range");
    say(line, 1, "block\t1000\t5\t-7\tholder out of range");
    say(line, 1, "capture\tagain\t1\t1\t1\t0.1\t");
    say(line, 0, "capture\tzero\t1\t1\t1\t0.1\t");
    say(line, 1, "mystery\tline");
    say(line, 1, "");
    say(line, 1, "holder\t18446744073709551616\t1\toverflows");
    say(line, 1, "holder\t1\t1\tparent out of range\t9");
    say(line, 1, "holder\t1\t1\tparent nested itself\t2");
    say(line, 1, "holder\t1\t1\tparent not a number\tx");
    printf("ok\n");
    return 0;
}
