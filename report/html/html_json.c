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
    gmt_json_str_to(f, s, true);
}

void html_kv_str(FILE *f, bool comma, const char *key, const char *s)
{
    fprintf(f, "%s\"%s\":", comma ? "," : "", key);
    html_str(f, s);
}
