/* smoke.c - a short fuzz run inside the test suite.
 *
 * usage: fuzz_smoke CORPUS_DIR [MUTATIONS]
 * Runs the libFuzzer entry point (fuzz_reader.c) over every file of the
 * corpus, then over MUTATIONS (default 3000) deterministic mutations of
 * them: random byte flips, inserted junk, truncations and extensions.
 * Built with AddressSanitizer and UBSan, so any out-of-bounds access or
 * undefined behaviour aborts the run; a hang is caught by the suite's time
 * limit. Prints the number of inputs run.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);

static unsigned long long rng = 88172645463325252ull;

static unsigned long long next(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

int main(int argc, char **argv)
{
    if (argc < 2)
        return 2;
    long mutations = argc > 2 ? atol(argv[2]) : 3000;
    DIR *d = opendir(argv[1]);
    if (d == NULL) {
        perror(argv[1]);
        return 2;
    }
    unsigned char **inputs = NULL;
    size_t *sizes = NULL, n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", argv[1], e->d_name);
        FILE *f = fopen(path, "rb");
        if (f == NULL)
            continue;
        unsigned char *buf = malloc(1 << 20);
        size_t len = buf ? fread(buf, 1, 1 << 20, f) : 0;
        fclose(f);
        inputs = realloc(inputs, (n + 1) * sizeof *inputs);
        sizes = realloc(sizes, (n + 1) * sizeof *sizes);
        inputs[n] = buf;
        sizes[n++] = len;
    }
    closedir(d);
    if (n == 0) {
        fprintf(stderr, "no corpus in %s\n", argv[1]);
        return 2;
    }
    for (size_t i = 0; i < n; i++)
        LLVMFuzzerTestOneInput(inputs[i], sizes[i]);
    unsigned char *m = malloc((1 << 20) + 4096);
    for (long k = 0; k < mutations; k++) {
        size_t i = next() % n, len = sizes[i];
        memcpy(m, inputs[i], len);
        switch (next() % 4) {
        case 0: /* flip bytes */
            for (int j = 0; j < 1 + (int)(next() % 16) && len; j++)
                m[next() % len] ^= (unsigned char)(1u << (next() % 8));
            break;
        case 1: /* random bytes */
            for (int j = 0; j < 1 + (int)(next() % 8) && len; j++)
                m[next() % len] = (unsigned char)next();
            break;
        case 2: /* truncate */
            len = len ? next() % len : 0;
            break;
        default: /* extend with junk */
            for (int j = 0; j < 4096; j++)
                m[len + (size_t)j] = (unsigned char)next();
            len += 4096;
            break;
        }
        LLVMFuzzerTestOneInput(m, len);
    }
    printf("%zu corpus inputs and %ld mutations ran clean\n", n, mutations);
    for (size_t i = 0; i < n; i++)
        free(inputs[i]);
    free(inputs);
    free(sizes);
    free(m);
    return 0;
}
