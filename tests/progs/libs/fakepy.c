/* fakepy.c - claims to be a Python the tracer does not know (3.99), to
 * test that such a process records no Python frames and says why. */
const char *Py_GetVersion(void);

const char *Py_GetVersion(void)
{
    return "3.99.0 (fake, for gpumemtrace's tests)";
}
