#!/usr/bin/env bash
# The whole test suite: install what is missing, build once, run every test
# (unit, integration as root, the rootless core subset) with ctest.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
# The project's own check: a warning fails it (a user's build only warns).
"$root/scripts/build.sh" -DCUBICLE_WERROR=ON
build=${CUBICLE_BUILD_DIR:-$root/build}
jobs=${CUBICLE_TEST_JOBS:-$(nproc)}
cd "$build"
# The fixtures are made with ordinary modes (a file the sandbox user reads,
# a directory it enters); a caller's umask of 077 would make them private.
# What cubicle itself writes does not depend on the umask.
umask 022
ctest --output-on-failure -j "$jobs" --timeout 300
