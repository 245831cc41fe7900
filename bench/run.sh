#!/usr/bin/env bash
# Builds (if needed) and runs one benchmark program: console output on the
# terminal, JSON to a file, then the Markdown summary of bench/README.md.
#
#   bench/run.sh [extra benchmark flags, e.g. --benchmark_filter=Bwrap]
#   BENCH=cgroup bench/run.sh             # cubicle_cgroup_bench instead
#   BENCH=pool bench/run.sh               # cubicle_pool_bench (pools, warm Python, skill.call)
#   BENCH=skill bench/run.sh              # cubicle_skill_bench (skill.call by name vs by argv)
#
# Environment: BENCH (launch, the default, cgroup, pool or skill), BUILD_DIR (default
# <repo>/build-bench), OUT (JSON file, default
# $BUILD_DIR/cubicle_<BENCH>_bench.json), CUBICLE_BENCH_REPS (samples per
# benchmark, default 200), CUBICLE_BINARY (cubicle binary to spawn).
# Run as root: the *Limits benchmarks and the cgroup bench create cgroups.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${BUILD_DIR:-$repo/build-bench}"
bench="${BENCH:-launch}"
case "$bench" in
  launch | cgroup | pool | skill) ;;
  *) echo "BENCH must be launch, cgroup, pool or skill" >&2; exit 2 ;;
esac
out="${OUT:-$build/cubicle_${bench}_bench.json}"

if [[ ! -f "$build/build.ninja" ]]; then
  cmake -S "$repo" -B "$build" -G Ninja -DCUBICLE_BUILD_TESTS=OFF -DCUBICLE_BUILD_BENCH=ON
fi
ninja -C "$build" cubicle "cubicle_${bench}_bench"

echo "nproc: $(nproc)  kernel: $(uname -r)  date: $(date -u +%Y-%m-%dT%H:%M:%SZ)  reps: ${CUBICLE_BENCH_REPS:-200}  load: $(cut -d' ' -f1-3 /proc/loadavg)"
"$build/bench/cubicle_${bench}_bench" \
  --benchmark_format=console \
  --benchmark_out="$out" --benchmark_out_format=json \
  "$@"
echo "JSON: $out"

if command -v python3 >/dev/null; then
  echo
  python3 "$repo/bench/summarize.py" "$out"
fi
