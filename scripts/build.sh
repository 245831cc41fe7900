#!/usr/bin/env bash
# Configures and builds cubicle into build/ (or $CUBICLE_BUILD_DIR): every
# target, or only those $CUBICLE_TARGETS names (e.g. "cubicle").
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${CUBICLE_BUILD_DIR:-$root/build}
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=${CMAKE_BUILD_TYPE:-RelWithDebInfo} "$@" >/dev/null
# Unquoted on purpose: a list of targets, or none (all).
# shellcheck disable=SC2086
ninja -C "$build" ${CUBICLE_TARGETS:-} >/dev/null
