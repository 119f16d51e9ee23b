/* html_json.c - JSON strings that are safe inside an HTML <script> element.
 *
 * The page carries its data as JSON in <script type="application/json">.
 * The HTML parser ends that element at the first "</script" whatever the
 * JSON means, and a "<!--" can change how it scans on: trace strings are
 * hostile (a marker name, a file path), so every '<', '>' and '&' is
 * written as a \u escape, which JSON.parse reads back as the character.
 * U+2028/2029 are escaped too (older script parsers took them for line
 * ends), control characters as \u00XX, invalid UTF-8 as U+FFFD.
 */
#include "html.h"

void html_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)(s ? s : ""); *p;) {
        if (*p == '"' || *p == '\\') {
            fputc('\\', f);
            fputc(*p++, f);
        } else if (*p < 0x20 || *p == 0x7f || *p == '<' || *p == '>' || *p == '&') {
            fprintf(f, "\\u%04x", *p++);
        } else if (*p < 0x80) {
            fputc(*p++, f);
        } else {
            int n = gmt_utf8_len(p);
            if (n == 0) {
                fputs("\\ufffd", f);
                p++;
            } else if (n == 3 && p[0] == 0xe2 && p[1] == 0x80 && (p[2] == 0xa8 || p[2] == 0xa9)) {
                fprintf(f, "\\u%04x", p[2] == 0xa8 ? 0x2028 : 0x2029);
                p += 3;
            } else {
                fwrite(p, 1, (size_t)n, f);
                p += n;
            }
        }
    }
    fputc('"', f);
}

void html_kv_str(FILE *f, bool comma, const char *key, const char *s)
{
    fprintf(f, "%s\"%s\":", comma ? "," : "", key);
    html_str(f, s);
}
