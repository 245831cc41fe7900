#!/usr/bin/env bash
# The main job on built-in defaults: install what is missing, build, start
# `cubicle serve` on its built-in config (examples/skills as its skills
# directory) and run every bundled example skill
# in examples/ through it, printing what each did and the latencies measured.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
exec python3 "$root/examples/run_examples.py" "${CUBICLE_BUILD_DIR:-$root/build}/cli/cubicle"
