#!/usr/bin/env python3
"""Turns the JSON output of cubicle_launch_bench, cubicle_pool_bench,
cubicle_skill_bench or cubicle_cgroup_bench into the Markdown tables of
bench/README.md.

launch bench: P50/P90/P99 per contender (/bin/true, then python3), the
ratios, and the per-step breakdowns of the *Steps benchmarks.
pool bench: P50/P90/P99 per contender and the cold and pooled ratios
against bwrap and posix_spawn, all from the one program's run.
cgroup bench: P50/P90/P99 per operation, direct cgroupfs I/O vs libcgroup.
skill bench: skill.call by name against the same script by argv.

Usage: bench/summarize.py RESULT.json
"""
import json
import sys

STATS = ("p50", "p90", "p99")

TRUE_ROWS = [
    ("BM_PosixSpawn", "posix_spawn + waitpid"),
    ("BM_CubicleLaunch", "runtime::Launch in process, no limits"),
    ("BM_CubicleLaunchLimits", "runtime::Launch in process, memory 256M + pids 64"),
    ("BM_CubicleRunBinary", "`cubicle run --` (default limits: 1G, 1024 pids)"),
    ("BM_CubicleRunBinaryNoLimits", "`cubicle run --memory unlimited --pids unlimited --`"),
    ("BM_CubicleRunBinaryNoHostCache", "= BM_CubicleRunBinary with `CUBICLE_HOST_CACHE=off`"),
    ("BM_Bwrap", "`bwrap ...`"),
    ("BM_CubicleVersion", "`cubicle --version`: the binary's start and exit"),
    ("BM_BwrapVersion", "`bwrap --version`: the binary's start and exit"),
    ("BM_CubicleLaunchSteps", "= BM_CubicleLaunch, steps recorded"),
    ("BM_CubicleLaunchLimitsSteps", "= BM_CubicleLaunchLimits, steps recorded"),
    ("BM_CubicleRunBinarySteps", "= BM_CubicleRunBinary + `--json-status FILE`"),
    ("BM_CubicleRunBinaryNoLimitsSteps", "= BM_CubicleRunBinaryNoLimits + `--json-status FILE`"),
    ("BM_CubicleLaunchStepsAfterIdle", "= BM_CubicleLaunchSteps, 200 ms idle before each"),
    ("BM_CubicleLaunchLimitsStepsAfterIdle", "= BM_CubicleLaunchLimitsSteps, 200 ms idle before each"),
]
PYTHON_ROWS = [
    ("BM_PythonPosixSpawn", "posix_spawn + waitpid"),
    ("BM_PythonCubicleLaunch", "runtime::Launch in process, no limits"),
    ("BM_PythonCubicleLaunchLimits", "runtime::Launch in process, memory 256M + pids 64"),
    ("BM_PythonCubicleRunBinary", "`cubicle run --` (default limits)"),
    ("BM_PythonBwrap", "`bwrap ...`"),
    ("BM_PythonCubicleLaunchSteps", "= BM_PythonCubicleLaunch, steps recorded"),
    ("BM_PythonCubicleLaunchLimitsSteps", "= BM_PythonCubicleLaunchLimits, steps recorded"),
]
RATIOS = [
    ("BM_CubicleRunBinary", "BM_Bwrap"),
    ("BM_CubicleRunBinaryNoHostCache", "BM_Bwrap"),
    ("BM_CubicleRunBinary", "BM_CubicleRunBinaryNoHostCache"),
    ("BM_CubicleVersion", "BM_BwrapVersion"),
    ("BM_CubicleRunBinaryNoLimits", "BM_Bwrap"),
    ("BM_CubicleLaunchLimits", "BM_Bwrap"),
    ("BM_CubicleLaunch", "BM_Bwrap"),
    ("BM_CubicleRunBinary", "BM_PosixSpawn"),
    ("BM_CubicleRunBinaryNoLimits", "BM_PosixSpawn"),
    ("BM_CubicleLaunchLimits", "BM_PosixSpawn"),
    ("BM_CubicleLaunch", "BM_PosixSpawn"),
    ("BM_Bwrap", "BM_PosixSpawn"),
    ("BM_CubicleLaunchLimits", "BM_CubicleLaunch"),
    ("BM_CubicleRunBinary", "BM_CubicleRunBinaryNoLimits"),
    ("BM_PythonCubicleRunBinary", "BM_PythonBwrap"),
    ("BM_PythonCubicleLaunchLimits", "BM_PythonBwrap"),
    ("BM_PythonCubicleLaunch", "BM_PythonBwrap"),
    ("BM_PythonCubicleLaunch", "BM_PythonPosixSpawn"),
    ("BM_PythonBwrap", "BM_PythonPosixSpawn"),
]
POOL_ROWS = [
    ("BM_SpawnTrue", "posix_spawn + waitpid of /bin/true"),
    ("BM_BwrapTrue", "`bwrap ... /bin/true`, spawned and reaped"),
    ("BM_CubicleRunTrue", "`cubicle run -- /bin/true` (default limits), spawned and reaped"),
    ("BM_ColdTrue", "a fresh zygote in process, then its run"),
    ("BM_PooledTrue", "runtime::Pool::Run in process, warm and quiet pool"),
    ("BM_DaemonTrue", "`cubicle serve`: sandbox.run line out to reply line in, warm and quiet pool"),
    ("BM_DaemonTrueBackToBack", "= BM_DaemonTrue, requests back to back"),
    ("BM_SpawnPython", "posix_spawn + waitpid of python3"),
    ("BM_BwrapPython", "`bwrap ... python3`"),
    ("BM_ColdPython", "a fresh zygote in process, python3"),
    ("BM_PooledPython", "runtime::Pool::Run, python3"),
    ("BM_WarmPython", "warm interpreter pool"),
    ("BM_WarmPythonNumpy", "warm interpreter with numpy"),
    ("BM_SkillCallExec", "skill.call in process, interpreter exec'd"),
    ("BM_SkillCallWarm", "skill.call in process, warm interpreter"),
]
POOL_RATIOS = [
    ("BM_CubicleRunTrue", "BM_BwrapTrue"),
    ("BM_CubicleRunTrue", "BM_SpawnTrue"),
    ("BM_BwrapTrue", "BM_SpawnTrue"),
    ("BM_DaemonTrue", "BM_SpawnTrue"),
    ("BM_DaemonTrueBackToBack", "BM_SpawnTrue"),
    ("BM_PooledTrue", "BM_SpawnTrue"),
    ("BM_ColdTrue", "BM_BwrapTrue"),
]
SKILL_ROWS = [
    ("BM_SkillCallArgv", "skill.call, argv [python3, -I, -c, SCRIPT], warm python profile"),
    ("BM_SkillCallByName", "skill.call {skill: inc}: the same script from the skills directory"),
    ("BM_SkillCallByRange", "skill.call {skill: inc@^1}"),
    ("BM_SkillCallArgvLarge", "= BM_SkillCallArgv, script padded to 64 KiB"),
    ("BM_SkillCallByNameLarge", "= BM_SkillCallByName, script padded to 64 KiB"),
    ("BM_SkillCallInEnvironment", "skill.call {skill: inc, environment: pkgs}: a sandbox of its own, host python3"),
    ("BM_SkillCallInEnvironmentOwnPython", "skill.call {skill: inc, environment: own}: its own python3, host's masked"),
]
SKILL_RATIOS = [
    ("BM_SkillCallByName", "BM_SkillCallArgv"),
    ("BM_SkillCallByRange", "BM_SkillCallArgv"),
    ("BM_SkillCallByNameLarge", "BM_SkillCallArgvLarge"),
    ("BM_SkillCallInEnvironment", "BM_SkillCallByName"),
    ("BM_SkillCallInEnvironmentOwnPython", "BM_SkillCallByName"),
]
# In the order they happen; see bench/README.md for what overlaps.
STEPS = ["validate", "cgroup", "prepare", "clone", "cgroup_attach", "id_maps", "ready", "handoff",
         "child_ids", "rootfs", "uts_net", "request_wait", "payload_fork", "payload_setup", "run",
         "setup", "wall", "cleanup", "launch", "outside"]
STEP_BENCHES = ["BM_CubicleLaunchSteps", "BM_CubicleLaunchLimitsSteps",
                "BM_CubicleLaunchStepsAfterIdle", "BM_CubicleLaunchLimitsStepsAfterIdle",
                "BM_CubicleRunBinaryNoLimitsSteps", "BM_CubicleRunBinarySteps",
                "BM_PythonCubicleLaunchSteps", "BM_PythonCubicleLaunchLimitsSteps"]


def load(path):
    with open(path) as f:
        data = json.load(f)
    aggregates, errors, order = {}, {}, []
    for b in data["benchmarks"]:
        name = b.get("run_name", b["name"])
        # "BM_X/iterations:1/repeats:200" or "BM_X/direct/iterations:1/...": keep the
        # family and any BENCHMARK_CAPTURE label.
        parts = [p for p in name.split("/")
                 if ":" not in p and p not in ("real_time", "manual_time")]
        family = "/".join(parts)
        if family not in order:
            order.append(family)
        if b.get("error_occurred"):
            errors[family] = b.get("error_message", "error")
        if b.get("run_type") == "aggregate":
            aggregates.setdefault(family, {})[b["aggregate_name"]] = b
    return data, aggregates, errors, order


def value(aggregates, family, stat, key="real_time"):
    entry = aggregates.get(family, {}).get(stat)
    return None if entry is None or key not in entry else float(entry[key])


def fmt(v, digits=2):
    return "n/a" if v is None else f"{v:.{digits}f}"


def table(aggregates, errors, rows, unit):
    print(f"| Benchmark | What | P50 {unit} | P90 {unit} | P99 {unit} |")
    print("|---|---|---:|---:|---:|")
    for family, what in rows:
        if family not in aggregates and family not in errors:
            continue
        if family in errors and family not in aggregates:
            print(f"| {family} | {what} | skipped: {errors[family]} | | |")
            continue
        cells = [value(aggregates, family, s) for s in STATS]
        n = aggregates[family]["p50"].get("repetitions", "")
        print(f"| {family} | {what} (n={n}) | " + " | ".join(fmt(c) for c in cells) + " |")


def ratios(aggregates, pairs):
    print("| Ratio | P50 | P90 | P99 |")
    print("|---|---:|---:|---:|")
    for num, den in pairs:
        row = []
        for s in STATS:
            a, b = value(aggregates, num, s), value(aggregates, den, s)
            row.append("n/a" if a is None or not b else f"{a / b:.2f}")
        if all(r == "n/a" for r in row):
            continue
        print(f"| {num} / {den} | " + " | ".join(row) + " |")


def pool(data, aggregates, errors):
    table(aggregates, errors, POOL_ROWS, "ms")
    print("\n### Ratios\n")
    ratios(aggregates, POOL_RATIOS)


def skill(data, aggregates, errors):
    table(aggregates, errors, SKILL_ROWS, "ms")
    print("\n### Ratios\n")
    ratios(aggregates, SKILL_RATIOS)


def launch(data, aggregates, errors):
    print("### /bin/true\n")
    table(aggregates, errors, TRUE_ROWS, "ms")
    print("\n### python3 -I -c pass\n")
    table(aggregates, errors, PYTHON_ROWS, "ms")

    print("\n### Ratios\n")
    ratios(aggregates, RATIOS)

    for bench in STEP_BENCHES:
        if bench not in aggregates:
            continue
        print(f"\n### Steps: {bench}\n")
        print("| Step | mean ms | P50 ms | P90 ms | P99 ms |")
        print("|---|---:|---:|---:|---:|")
        for step in STEPS:
            key = f"{step}_ms"
            cells = [value(aggregates, bench, s, key) for s in ("mean",) + STATS]
            if all(c is None for c in cells):
                continue
            print(f"| {step} | " + " | ".join(fmt(c, 3) for c in cells) + " |")


def cgroup(data, aggregates, errors, order):
    print("| Benchmark | P50 µs | P90 µs | P99 µs | n |")
    print("|---|---:|---:|---:|---:|")
    for family in order:
        if family in errors and family not in aggregates:
            print(f"| {family} | skipped: {errors[family]} | | | |")
            continue
        cells = [value(aggregates, family, s) for s in STATS]
        n = aggregates.get(family, {}).get("p50", {}).get("repetitions", "")
        print(f"| {family} | " + " | ".join(fmt(c, 1) for c in cells) + f" | {n} |")


def main(path):
    data, aggregates, errors, order = load(path)
    ctx = data["context"]
    kernel = f", kernel {ctx['kernel']}" if "kernel" in ctx else ""
    print(f"Run: {ctx.get('date')}, {ctx.get('num_cpus')} CPUs{kernel}, "
          f"{ctx.get('repetitions')} repetitions, load avg {ctx.get('load_avg')}\n")
    if any(f.startswith("BM_CreateRemove") for f in order):
        cgroup(data, aggregates, errors, order)
    elif any(f.startswith("BM_SkillCallBy") for f in order):
        skill(data, aggregates, errors)
    elif any(f in ("BM_SpawnTrue", "BM_DaemonTrue", "BM_PooledTrue") for f in order):
        pool(data, aggregates, errors)
    else:
        launch(data, aggregates, errors)


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
