/* test_format.c - varints, zigzag, and the report's string/size output. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "report.h"

static void varint_roundtrip(void)
{
    static const uint64_t vals[] = {0, 1, 127, 128, 255, 300, 16383, 16384,
                                    (1ull << 32) - 1, 1ull << 32,
                                    (1ull << 63), UINT64_MAX};
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
        uint8_t buf[GMT_VARINT_MAX];
        uint8_t *end = gmt_put_varint(buf, vals[i]);
        uint64_t v = 0;
        CHECK(gmt_get_varint(buf, end, &v) == end);
        CHECK(v == vals[i]);
        /* every truncation is detected */
        for (uint8_t *e = buf; e < end; e++)
            CHECK(gmt_get_varint(buf, e, &v) == NULL);
    }
    CHECK(gmt_put_varint((uint8_t[10]){0}, UINT64_MAX) != NULL);
    uint8_t b[GMT_VARINT_MAX];
    CHECK(gmt_put_varint(b, UINT64_MAX) - b == GMT_VARINT_MAX);
}

/* The 8-byte fast path of the decoder: values of every length with
 * bytes after them (set high bits, as the next field's may be). */
static void varint_with_bytes_after(void)
{
    uint64_t x = 0x9e3779b97f4a7c15ull;
    for (unsigned bits = 0; bits <= 64; bits++) {
        for (int k = 0; k < 50; k++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            uint64_t want = bits == 64 ? x : bits == 0 ? 0 : x & ((1ull << bits) - 1);
            uint8_t buf[32];
            memset(buf, k & 1 ? 0xff : 0x80 | (uint8_t)k, sizeof buf);
            uint8_t *end = gmt_put_varint(buf, want);
            uint64_t got = ~want;
            CHECK(gmt_get_varint(buf, buf + sizeof buf, &got) == end);
            CHECK(got == want);
        }
    }
}

static void varint_rejects_overlong(void)
{
    uint64_t v;
    /* 10th byte may only carry one bit */
    uint8_t over[10] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02};
    CHECK(gmt_get_varint(over, over + 10, &v) == NULL);
    /* 11 bytes of continuation never end */
    uint8_t cont[11];
    memset(cont, 0x80, sizeof cont);
    CHECK(gmt_get_varint(cont, cont + 11, &v) == NULL);
}

static void zigzag(void)
{
    static const int64_t vals[] = {0, -1, 1, -64, 63, INT64_MIN, INT64_MAX};
    for (size_t i = 0; i < sizeof vals / sizeof *vals; i++) {
        uint8_t buf[GMT_VARINT_MAX];
        int64_t v;
        uint8_t *end = gmt_put_svarint(buf, vals[i]);
        CHECK(gmt_get_svarint(buf, end, &v) == end && v == vals[i]);
    }
    CHECK(gmt_zigzag(-1) == 1 && gmt_zigzag(1) == 2);
}

static void sizes(void)
{
    char b[32];
    CHECK(strcmp(gmt_fmt_bytes(b, 512, false), "512 B") == 0);
    CHECK(strcmp(gmt_fmt_bytes(b, 1536, false), "1.50 KiB") == 0);
    CHECK(strcmp(gmt_fmt_bytes(b, 3ull << 30, false), "3.00 GiB") == 0);
    CHECK(strcmp(gmt_fmt_bytes(b, 3ull << 30, true), "3221225472") == 0);
}

static void json_strings(void)
{
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    gmt_json_str(f, "a\"b\\c\n\x01 \xc3\xa9 \xff\xfe end");
    fclose(f);
    CHECK(strcmp(out, "\"a\\\"b\\\\c\\u000a\\u0001 \xc3\xa9 \\ufffd\\ufffd end\"") == 0);
    free(out);
}

int main(void)
{
    varint_roundtrip();
    varint_with_bytes_after();
    varint_rejects_overlong();
    zigzag();
    sizes();
    json_strings();
    return CHECK_DONE();
}
