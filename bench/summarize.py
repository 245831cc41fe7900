#!/usr/bin/env python3
"""Turns cubicle_launch_bench's JSON output into the Markdown tables of
bench/README.md: P50/P90/P99 per contender, the ratios, and the per-step
breakdown of BM_CubicleLaunchSteps.

Usage: bench/summarize.py RESULT.json
"""
import json
import sys

CONTENDERS = [
    ("BM_PosixSpawn", "posix_spawn(/bin/true) + waitpid"),
    ("BM_CubicleLaunch", "runtime::Launch in process (cold path)"),
    ("BM_CubicleRunBinary", "`cubicle run -- /bin/true` (binary)"),
    ("BM_Bwrap", "`bwrap ... /bin/true`"),
    ("BM_CubicleLaunchSteps", "runtime::Launch, steps recorded"),
]
STATS = ("p50", "p90", "p99")
# In the order they happen; see bench/README.md for what overlaps.
STEPS = ["validate", "prepare", "clone", "id_maps", "child_ids", "rootfs", "uts_net",
         "payload_fork", "payload_setup", "run", "setup", "wall"]


def main(path):
    with open(path) as f:
        data = json.load(f)
    # family name -> statistic -> aggregate entry
    aggregates = {}
    errors = {}
    for b in data["benchmarks"]:
        family = b["name"].split("/")[0]
        if b.get("error_occurred"):
            errors[family] = b.get("error_message", "error")
        if b.get("run_type") == "aggregate":
            aggregates.setdefault(family, {})[b["aggregate_name"]] = b

    ctx = data["context"]
    print(f"Run: {ctx.get('date')}, {ctx.get('num_cpus')} CPUs, kernel {ctx.get('kernel')}, "
          f"{ctx.get('repetitions')} repetitions, load avg {ctx.get('load_avg')}\n")

    def ms(family, stat, key="real_time"):
        entry = aggregates.get(family, {}).get(stat)
        return None if entry is None or key not in entry else float(entry[key])

    print("| Benchmark | What | P50 ms | P90 ms | P99 ms |")
    print("|---|---|---:|---:|---:|")
    for family, what in CONTENDERS:
        if family in errors and family not in aggregates:
            print(f"| {family} | {what} | skipped: {errors[family]} | | |")
            continue
        cells = [ms(family, s) for s in STATS]
        print(f"| {family} | {what} | " + " | ".join("n/a" if c is None else f"{c:.2f}" for c in cells) + " |")

    print("\n| Ratio | P50 | P99 |")
    print("|---|---:|---:|")
    for num, den in [("BM_CubicleLaunch", "BM_Bwrap"), ("BM_CubicleRunBinary", "BM_Bwrap"),
                     ("BM_CubicleLaunch", "BM_PosixSpawn"), ("BM_CubicleRunBinary", "BM_PosixSpawn"),
                     ("BM_Bwrap", "BM_PosixSpawn")]:
        row = []
        for s in ("p50", "p99"):
            a, b = ms(num, s), ms(den, s)
            row.append("n/a" if a is None or not b else f"{a / b:.2f}x")
        print(f"| {num} / {den} | {row[0]} | {row[1]} |")

    steps = aggregates.get("BM_CubicleLaunchSteps")
    if steps:
        print("\n| Step (BM_CubicleLaunchSteps) | mean ms | P50 ms | P90 ms | P99 ms |")
        print("|---|---:|---:|---:|---:|")
        for step in STEPS:
            key = f"{step}_ms"
            cells = [ms("BM_CubicleLaunchSteps", s, key) for s in ("mean",) + STATS]
            if all(c is None for c in cells):
                continue
            print(f"| {step} | " + " | ".join("n/a" if c is None else f"{c:.3f}" for c in cells) + " |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
