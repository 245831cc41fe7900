#!/usr/bin/env python3
"""Whether a warm R would pay: R skills against Python ones through `cubicle serve`.

    bench/r_warm_or_cold.py [CUBICLE_BINARY] [SAMPLES]

Serves the built-in configuration over stdio (it must have its "r"
profile: the host needs R), with a profile "python-cold" (the built-in
python profile without its warm interpreter) and a skills directory of
trivial skills that read their request and answer it: `py` (Python),
`r` (R, base only) and `r-json` (R, parsing and answering with jsonlite).
Each sample calls every case once, in a random order, on a quiet pool;
prints P50/P90 of the client's round trip and the ratios that matter:
what R costs over a warm Python call (what a warm R would save at most),
and R's start against Python's, each in its own pooled sandbox.
"""
import json
import os
import pathlib
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

here = pathlib.Path(__file__).resolve().parent
cubicle = sys.argv[1] if len(sys.argv) > 1 else str(here.parent / "build" / "cli" / "cubicle")
samples = int(sys.argv[2]) if len(sys.argv) > 2 else 50

PY = "import json, sys\nr = json.loads(sys.stdin.readline())\nprint(json.dumps({'jsonrpc': '2.0', 'id': r['id'], 'result': 1}), flush=True)\n"
R = ('line <- readLines(file("stdin"), n = 1L)\n'
     'id <- sub(\'.*"id": *([0-9]+).*\', "\\\\1", line)\n'
     'cat(sprintf(\'{"jsonrpc":"2.0","id":%s,"result":1}\\n\', id))\n')
R_JSON = ('request <- jsonlite::fromJSON(readLines(file("stdin"), n = 1L))\n'
          'cat(jsonlite::toJSON(list(jsonrpc = "2.0", id = request$id, result = 1), auto_unbox = TRUE), "\\n")\n')

work = pathlib.Path(tempfile.mkdtemp(prefix="cubicle-rbench-"))
skills = work / "skills"
for name, entry, text, more in [("py", "main.py", PY, ""), ("py-cold", "main.py", PY, "profile: python-cold\n"),
                                ("r", "main.R", R, ""), ("r-json", "main.R", R_JSON, "")]:
    (skills / name).mkdir(parents=True)
    (skills / name / "skill.yaml").write_text(f"name: {name}\nversion: 1.0.0\nentry: {entry}\n{more}")
    (skills / name / entry).write_text(text)
config = json.loads(subprocess.run([cubicle, "serve", "--print-default-config"], check=True, capture_output=True,
                                   text=True).stdout)
if "r" not in config["profiles"]:
    sys.exit("r_warm_or_cold: the built-in configuration has no r profile: this host has no R")
cold = dict(config["profiles"]["python"])
del cold["interpreter"]
config["profiles"]["python-cold"] = cold
config["skills"] = {"dir": str(skills)}
(work / "config.json").write_text(json.dumps(config))
daemon = subprocess.Popen([cubicle, "serve", "--config", str(work / "config.json")], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True, bufsize=1)
next_id = 0


def call(method, params):
    """The round trip in ms, and the result."""
    global next_id
    next_id += 1
    start = time.perf_counter()
    daemon.stdin.write(json.dumps({"jsonrpc": "2.0", "id": next_id, "method": method, "params": params}) + "\n")
    daemon.stdin.flush()
    reply = json.loads(daemon.stdout.readline())
    ms = (time.perf_counter() - start) * 1000
    if "error" in reply or reply["result"].get("status", 0) != 0 or "error" in reply["result"]:
        sys.exit(f"r_warm_or_cold: {method} {json.dumps(params)[:200]}: {json.dumps(reply)[:600]}")
    return ms, reply["result"]


def quiet():
    """Until every pool has an idle zygote and builds none (at most 30 s)."""
    for _ in range(3000):
        pools = call("pool.stats", {})[1]["pools"]
        if all(p["building"] == 0 and p["idle"] >= 1 for p in pools.values()):
            return
        time.sleep(0.01)


def skill(name):
    return lambda: call("skill.call", {"skill": name, "method": "m", "params": {}})[0]


def run(profile, argv):
    return lambda: call("sandbox.run", {"profile": profile, "argv": argv})[0]


cases = {
    "python skill, warm (baseline)": skill("py"),
    "python skill, cold": skill("py-cold"),
    "R skill (cold)": skill("r"),
    "R skill with jsonlite (cold)": skill("r-json"),
    "sandbox.run /bin/true, r profile": run("r", ["/bin/true"]),
    "sandbox.run python3 -I -c pass, python-cold": run("python-cold", ["python3", "-I", "-c", "pass"]),
    "sandbox.run Rscript --vanilla -e 'invisible(0)'": run("r", ["Rscript", "--vanilla", "-e", "invisible(0)"]),
}
times = {name: [] for name in cases}
for name, f in cases.items():  # one untimed run each
    quiet()
    f()
for _ in range(samples):
    order = list(cases.items())
    random.shuffle(order)
    for name, f in order:
        quiet()
        times[name].append(f())
daemon.stdin.close()
daemon.wait(timeout=60)
shutil.rmtree(work, ignore_errors=True)


def pct(xs, p):
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


print(f"{samples} samples each, load average {os.getloadavg()[0]:.1f} at the end\n")
print("| ms | P50 | P90 |\n|---|---:|---:|")
for name, xs in times.items():
    print(f"| {name} | {pct(xs, 50):.2f} | {pct(xs, 90):.2f} |")
p50 = {name: statistics.median(xs) for name, xs in times.items()}
print("\n| Ratio (P50) | |\n|---|---:|")
for a, b in [("R skill (cold)", "python skill, warm (baseline)"),
             ("R skill with jsonlite (cold)", "python skill, warm (baseline)"),
             ("R skill (cold)", "python skill, cold"),
             ("sandbox.run Rscript --vanilla -e 'invisible(0)'", "sandbox.run python3 -I -c pass, python-cold"),
             ("sandbox.run Rscript --vanilla -e 'invisible(0)'", "sandbox.run /bin/true, r profile")]:
    print(f"| {a} / {b} | {p50[a] / p50[b]:.2f} |")
r_start = p50["sandbox.run Rscript --vanilla -e 'invisible(0)'"] - p50["sandbox.run /bin/true, r profile"]
print(f"\nR's start in the sandbox (Rscript less /bin/true, P50): {r_start:.1f} ms; "
      f"an R skill over a warm Python skill: {p50['R skill (cold)'] - p50['python skill, warm (baseline)']:.1f} ms")
