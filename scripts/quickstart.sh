#!/usr/bin/env bash
# The main job on built-in defaults: install what is missing, build, start
# `cubicle serve` on its built-in config (examples/skills as its skills
# directory) and run every bundled example skill
# in examples/ through it, printing what each did and the latencies measured.
# CUBICLE_WITH_R=1 installs R too, so that the R example skill runs.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
exec python3 "$root/examples/run_examples.py" "${CUBICLE_BUILD_DIR:-$root/build}/cli/cubicle"
