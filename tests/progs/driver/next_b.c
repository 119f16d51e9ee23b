/* next_b.c - the definition next_a.c's RTLD_NEXT lookup must find. */
int gmt_next_probe(void)
{
    return 2;
}
