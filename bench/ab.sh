#!/usr/bin/env bash
# A/B of two builds of one benchmark program on this machine, interleaved:
# ROUNDS rounds, each running both (alternating which goes first), then the
# median over rounds of each same-run ratio. On a VM that drifts between
# runs, a ratio measured within one run, compared round by round, is what
# tells a change from the weather.
#
#   bench/ab.sh BASE_BINARY NEW_BINARY [ROUNDS] [FILTER] [NUM/DEN ...]
#   bench/ab.sh /tmp/base/build-bench/bench/cubicle_pool_bench build-bench/bench/cubicle_pool_bench 4 \
#     'BM_(SpawnTrue|BwrapTrue|CubicleRunTrue|PooledTrue|DaemonTrue)/' \
#     DaemonTrue/SpawnTrue PooledTrue/SpawnTrue CubicleRunTrue/BwrapTrue
#
# Each binary runs the cubicle binary it was built with (CUBICLE_BINARY
# unset). CUBICLE_BENCH_REPS (default 200) repetitions per benchmark.
set -euo pipefail
base="$1" new="$2" rounds="${3:-4}" filter="${4:-BM_(SpawnTrue|PooledTrue|DaemonTrue)/}"
shift $(( $# < 4 ? $# : 4 ))
ratios=("$@")
[[ ${#ratios[@]} -gt 0 ]] || ratios=(DaemonTrue/SpawnTrue PooledTrue/SpawnTrue)
out="$(mktemp)"
trap 'rm -f "$out"' EXIT
for ((i = 1; i <= rounds; i++)); do
  if ((i % 2)); then order="base new"; else order="new base"; fi
  for v in $order; do
    bin="$base"; [[ $v == new ]] && bin="$new"
    # "BM_X/iterations:1/repeats:N/real_time_p50   1.23 ms ..." -> "X_p50=1.23"
    line=$(CUBICLE_BENCH_REPS="${CUBICLE_BENCH_REPS:-200}" "$bin" --benchmark_filter="$filter" 2>/dev/null |
      awk '$1 ~ /_p(50|99)$/ {split($1, a, "/"); sub(/^real_time_/, "", a[4]); sub(/^BM_/, "", a[1]); printf "%s_%s=%s ", a[1], a[4], $2}')
    echo "$v $i $line" >>"$out"
  done
done
python3 - "$out" "${ratios[@]}" <<'PY'
import collections, statistics, sys
runs = collections.defaultdict(dict)  # (variant, round) -> {name: ms}
for line in open(sys.argv[1]):
    f = line.split()
    runs[(f[0], int(f[1]))] = {k: float(v) for k, v in (kv.split("=") for kv in f[2:])}
rounds = sorted({r for _, r in runs})
print(f"{len(rounds)} rounds; medians of per-round ratios (per round in brackets)")
print(f"| Ratio | base P50 | new P50 | base P99 | new P99 |\n|---|---:|---:|---:|---:|")
for spec in sys.argv[2:]:
    num, den = spec.split("/")
    cells = []
    for q in ("p50", "p99"):
        for v in ("base", "new"):
            per = [runs[(v, r)][f"{num}_{q}"] / runs[(v, r)][f"{den}_{q}"] for r in rounds
                   if f"{num}_{q}" in runs[(v, r)] and f"{den}_{q}" in runs[(v, r)]]
            cells.append(f"{statistics.median(per):.2f} [{', '.join(f'{x:.2f}' for x in per)}]" if per else "-")
    print(f"| {num} / {den} | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} |")
PY
