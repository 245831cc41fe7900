#!/usr/bin/env bash
# Builds (if needed) and runs cubicle_launch_bench: console output on the
# terminal, JSON to a file, then the Markdown summary of bench/README.md.
#
#   bench/run.sh [extra benchmark flags, e.g. --benchmark_filter=Bwrap]
#
# Environment: BUILD_DIR (default <repo>/build-bench), OUT (JSON file,
# default $BUILD_DIR/cubicle_launch_bench.json), CUBICLE_BENCH_REPS (samples
# per benchmark, default 200), CUBICLE_BINARY (cubicle binary to spawn).
# Run as root, or where unprivileged user namespaces are allowed.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$repo/build-bench}"
out="${OUT:-$build/cubicle_launch_bench.json}"

if [[ ! -f "$build/build.ninja" ]]; then
  cmake -S "$repo" -B "$build" -G Ninja -DCUBICLE_BUILD_TESTS=OFF -DCUBICLE_BUILD_BENCH=ON
fi
ninja -C "$build" cubicle cubicle_launch_bench

echo "nproc: $(nproc)  kernel: $(uname -r)  date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  reps: ${CUBICLE_BENCH_REPS:-200}"
"$build/bench/cubicle_launch_bench" \
  --benchmark_format=console \
  --benchmark_out="$out" --benchmark_out_format=json \
  "$@"
echo "JSON: $out"

if command -v python3 >/dev/null; then
  echo
  python3 "$repo/bench/summarize.py" "$out"
fi
