#!/bin/sh
# tests/run.sh BUILD_DIR - run the whole CPU test suite; the last line of
# output is "N passed, N failed". See tests/run.py.
exec python3 "$(dirname "$0")/run.py" "${@:-build}"
