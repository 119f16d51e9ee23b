/* test_launcher.c - the launcher's pure helpers: option names and values
 * from the library's table, LD_PRELOAD merging, the output pattern (rank,
 * absolute, directory) and matching trace names. The launcher is compiled
 * in, its main renamed; the end-to-end tests run the real thing. */
#define main launcher_main
#include "launcher.c"
#undef main

#include "check.h"

static void options_from_the_table(void)
{
    char why[96];
    const struct optdef *o = optdef_find("stack-depth", 11);
    CHECK(o && strcmp(o->name, "STACK_DEPTH") == 0 && o->type == 'i');
    CHECK(optdef_find("GPUMEMTRACE_POOL", 16) == optdef_find("pool", 4));
    CHECK(optdef_find("stack", 5) == NULL);       /* no prefixes */
    CHECK(optdef_find("stack_depthx", 12) == NULL);
    CHECK(optdef_check(o, "256", why, sizeof why) == NULL);
    CHECK(optdef_check(o, "257", why, sizeof why) != NULL);
    CHECK(optdef_check(o, "-1", why, sizeof why) != NULL);
    CHECK(optdef_check(o, "", why, sizeof why) != NULL);
    const struct optdef *b = optdef_find("pool", 4);
    CHECK(optdef_check(b, "Off", why, sizeof why) == NULL);
    CHECK(optdef_check(b, "2", why, sizeof why) != NULL);
    const struct optdef *h = optdef_find("session", 7);
    CHECK(optdef_check(h, "00ff", why, sizeof why) == NULL);
    CHECK(optdef_check(h, "0", why, sizeof why) != NULL);
    CHECK(optdef_check(h, "xyz", why, sizeof why) != NULL);
    CHECK(optdef_check(optdef_find("output", 6), "", why, sizeof why) != NULL);
}

static void preload_merging(void)
{
    const char *lib = "/opt/g/lib/libgpumemtrace.so", *rep;
    char *s = preload_join(lib, NULL, &rep);
    CHECK(strcmp(s, lib) == 0 && rep == NULL);
    free(s);
    s = preload_join(lib, "libm.so.6 /x/liba.so::", &rep);
    CHECK(strcmp(s, "/opt/g/lib/libgpumemtrace.so:libm.so.6:/x/liba.so") == 0);
    free(s);
    s = preload_join(lib, "liba.so:/opt/g/lib/libgpumemtrace.so", &rep);
    CHECK(strcmp(s, "/opt/g/lib/libgpumemtrace.so:liba.so") == 0 && rep == NULL);
    free(s);
    s = preload_join(lib, "/old/libgpumemtrace.so liba.so", &rep);
    CHECK(strcmp(s, "/opt/g/lib/libgpumemtrace.so:liba.so") == 0);
    CHECK(rep && strcmp(rep, "/old/libgpumemtrace.so") == 0);
    free(s);
    s = preload_join(lib, "/x/notlibgpumemtrace.so", &rep);
    CHECK(strcmp(s, "/opt/g/lib/libgpumemtrace.so:/x/notlibgpumemtrace.so") == 0);
    free(s);
}

static void patterns(void)
{
    static const char *const vars[] = {GMT_RANK_VARS};
    for (size_t i = 0; i < sizeof vars / sizeof *vars; i++)
        unsetenv(vars[i]);
    char buf[64];
    CHECK(strcmp(default_pattern(), "gpumemtrace.%R%p.gmt") == 0);
    CHECK(gmt_rank(buf, sizeof buf) == NULL && strcmp(buf, "0") == 0);
    setenv("LOCAL_RANK", "1", 1);
    setenv("PMIX_RANK", "12", 1);
    CHECK(strcmp(default_pattern(), "gpumemtrace.%R%p.gmt") == 0);
    CHECK(strcmp(gmt_rank(buf, sizeof buf), "PMIX_RANK") == 0 && strcmp(buf, "12") == 0);
    setenv("RANK", "+3", 1); /* not a plain number: skipped */
    CHECK(strcmp(gmt_rank(buf, sizeof buf), "PMIX_RANK") == 0);
    setenv("RANK", "12345678901", 1); /* too long */
    CHECK(strcmp(gmt_rank(buf, sizeof buf), "PMIX_RANK") == 0);
    setenv("RANK", "7", 1);
    CHECK(strcmp(gmt_rank(buf, sizeof buf), "RANK") == 0 && strcmp(buf, "7") == 0);

    char out[64];
    CHECK(absolute_pattern("t.%p.gmt", "/a/100%", out, sizeof out) &&
          strcmp(out, "/a/100%%/t.%p.gmt") == 0);
    CHECK(absolute_pattern("t.gmt", "/", out, sizeof out) && strcmp(out, "/t.gmt") == 0);
    CHECK(absolute_pattern("/abs/t.gmt", "/a", out, sizeof out) &&
          strcmp(out, "/abs/t.gmt") == 0);
    CHECK(!absolute_pattern("t.gmt", "/a/very/long/directory/name/that/does/not/fit/here",
                            out, 32));

    CHECK(pattern_dir("/a/r%r/100%%/t.%p.gmt", out, sizeof out) &&
          strcmp(out, "/a/r7/100%") == 0);
    CHECK(pattern_dir("/t.%p.gmt", out, sizeof out) && strcmp(out, "/") == 0);
    CHECK(pattern_dir("t.gmt", out, sizeof out) && strcmp(out, ".") == 0);
    CHECK(!pattern_dir("/a/%p/t.gmt", out, sizeof out));
    CHECK(!pattern_dir("/a/%R/t.gmt", out, sizeof out));
}

static void names(void)
{
    CHECK(name_matches("gpumemtrace.%p.gmt", "gpumemtrace.123.gmt"));
    CHECK(name_matches("gpumemtrace.%p.gmt", "gpumemtrace.123.gmt.2"));
    CHECK(!name_matches("gpumemtrace.%p.gmt", "gpumemtrace.123.gmt.x"));
    CHECK(!name_matches("gpumemtrace.%p.gmt", "gpumemtrace..gmt"));
    CHECK(!name_matches("gpumemtrace.%p.gmt", "gpumemtrace.12a.gmt"));
    CHECK(!name_matches("gpumemtrace.%p.gmt", "gpumemtrace.123.gmt~"));
    CHECK(name_matches("gpumemtrace.r%r.%p.gmt", "gpumemtrace.r0.55.gmt"));
    CHECK(name_matches("t%p%r.gmt", "t1234.gmt")); /* ambiguous split */
    CHECK(name_matches("gpumemtrace.%R%p.gmt", "gpumemtrace.55.gmt"));
    CHECK(name_matches("gpumemtrace.%R%p.gmt", "gpumemtrace.r3.55.gmt"));
    CHECK(name_matches("gpumemtrace.%R%p.gmt", "gpumemtrace.r12.55.gmt.1"));
    CHECK(!name_matches("gpumemtrace.%R%p.gmt", "gpumemtrace.r.55.gmt"));
    CHECK(!name_matches("gpumemtrace.%R%p.gmt", "gpumemtrace.rx3.55.gmt"));

    CHECK(name_matches("%h-%p.gmt", "node-1-42.gmt"));
    CHECK(name_matches("100%%-%p", "100%-9"));
    CHECK(!name_matches("100%%-%p", "100%%-9"));
    CHECK(name_matches("a%x", "a%x")); /* unknown escapes are literal */
    CHECK(name_matches("fixed.gmt", "fixed.gmt.1"));
}

int main(void)
{
    options_from_the_table();
    preload_merging();
    patterns();
    names();
    return CHECK_DONE();
}
