#!/usr/bin/env python3
"""R skills warm and cold, against Python ones, through `cubicle serve`.

    bench/r_warm_or_cold.py [CUBICLE_BINARY] [SAMPLES] [CLIENTS]

Serves the built-in configuration over stdio (it must have its "r"
profile, with its warm R: the host needs R), with two profiles of its
own: "python-cold" and "r-cold", the built-in python and r profiles
without their warm interpreters. Skills: trivial ones that read their
request and answer it — `py` (Python), `r` (R, base only) and `r-json`
(R, parsing and answering with jsonlite) on the warm profiles, and the
same on the cold ones. One at a time: each sample calls every case once,
in a random order, on a quiet pool; P50/P90 of the client's round trip.
Sustained: CLIENTS threads (default 4) each sending its next skill.call
the moment the last is answered, SAMPLES calls each, warm R and cold R in
turn; calls per second. Prints the ratios that matter: a warm R call
against a cold one and against a warm Python call.
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
import threading
import time

here = pathlib.Path(__file__).resolve().parent
cubicle = sys.argv[1] if len(sys.argv) > 1 else str(here.parent / "build" / "cli" / "cubicle")
samples = int(sys.argv[2]) if len(sys.argv) > 2 else 50
clients = int(sys.argv[3]) if len(sys.argv) > 3 else 4

PY = "import json, sys\nr = json.loads(sys.stdin.readline())\nprint(json.dumps({'jsonrpc': '2.0', 'id': r['id'], 'result': 1}), flush=True)\n"
R = ('line <- readLines(file("stdin"), n = 1L)\n'
     'id <- sub(\'.*"id": *([0-9]+).*\', "\\\\1", line)\n'
     'cat(sprintf(\'{"jsonrpc":"2.0","id":%s,"result":1}\\n\', id))\n')
R_JSON = ('request <- jsonlite::fromJSON(readLines(file("stdin"), n = 1L))\n'
          'cat(jsonlite::toJSON(list(jsonrpc = "2.0", id = request$id, result = 1), auto_unbox = TRUE), "\\n")\n')

work = pathlib.Path(tempfile.mkdtemp(prefix="cubicle-rbench-"))
skills = work / "skills"
for name, entry, text, more in [("py", "main.py", PY, ""), ("py-cold", "main.py", PY, "profile: python-cold\n"),
                                ("r", "main.R", R, ""), ("r-json", "main.R", R_JSON, ""),
                                ("r-cold", "main.R", R, "profile: r-cold\n"),
                                ("r-json-cold", "main.R", R_JSON, "profile: r-cold\n")]:
    (skills / name).mkdir(parents=True)
    (skills / name / "skill.yaml").write_text(f"name: {name}\nversion: 1.0.0\nentry: {entry}\n{more}")
    (skills / name / entry).write_text(text)
config = json.loads(subprocess.run([cubicle, "serve", "--print-default-config"], check=True, capture_output=True,
                                   text=True).stdout)
if "interpreter" not in config["profiles"].get("r", {}):
    sys.exit("r_warm_or_cold: the built-in configuration has no warm r profile: this host has no R")
for warm, cold_name in [("python", "python-cold"), ("r", "r-cold")]:
    cold = dict(config["profiles"][warm])
    del cold["interpreter"]
    config["profiles"][cold_name] = cold
config["skills"] = {"dir": str(skills)}
(work / "config.json").write_text(json.dumps(config))
daemon = subprocess.Popen([cubicle, "serve", "--config", str(work / "config.json")], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True, bufsize=1)
next_id = 0
lock = threading.Lock()
waiting = {}  # id -> [event, reply]


def reader():
    for line in daemon.stdout:
        reply = json.loads(line)
        if "id" not in reply:
            continue  # a notification
        with lock:
            slot = waiting.pop(reply["id"])
        slot[1] = reply
        slot[0].set()


threading.Thread(target=reader, daemon=True).start()


def call(method, params):
    """The round trip in ms, and the result."""
    global next_id
    slot = [threading.Event(), None]
    with lock:
        next_id += 1
        waiting[next_id] = slot
        line = json.dumps({"jsonrpc": "2.0", "id": next_id, "method": method, "params": params}) + "\n"
        start = time.perf_counter()
        daemon.stdin.write(line)
        daemon.stdin.flush()
    if not slot[0].wait(120):
        sys.exit(f"r_warm_or_cold: {method}: no reply in 120 s")
    ms = (time.perf_counter() - start) * 1000
    reply = slot[1]
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
    "R skill, warm": skill("r"),
    "R skill with jsonlite, warm": skill("r-json"),
    "R skill, cold": skill("r-cold"),
    "R skill with jsonlite, cold": skill("r-json-cold"),
    "sandbox.run /bin/true, r profile": run("r", ["/bin/true"]),
    "sandbox.run Rscript --vanilla -e 'invisible(0)', r (warm)": run("r", ["Rscript", "--vanilla", "-e", "invisible(0)"]),
    "sandbox.run Rscript --vanilla -e 'invisible(0)', r-cold": run("r-cold",
                                                                    ["Rscript", "--vanilla", "-e", "invisible(0)"]),
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


def sustained(name, profile):
    """Calls per second of CLIENTS threads, each calling `name` back to back
    SAMPLES times, and how many of them the pool handed to a zygote it had
    made, and how many took its cold path."""
    quiet()
    before = call("pool.stats", {})[1]["pools"][profile]
    threads = [threading.Thread(target=lambda: [skill(name)() for _ in range(samples)]) for _ in range(clients)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rate = clients * samples / (time.perf_counter() - start)
    after = call("pool.stats", {})[1]["pools"][profile]
    # A miss waits for a zygote the pool is making (a template's fork on a
    # warm profile) or, past max_total, builds one for the request: cold.
    return (rate, after["handoff_ms"]["count"] - before["handoff_ms"]["count"],
            after["cold_start_ms"]["count"] - before["cold_start_ms"]["count"])


rates = {name: sustained(name, profile) for name, profile in (("r", "r"), ("r-cold", "r-cold"), ("py", "python"))}
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
for a, b in [("R skill, cold", "R skill, warm"),
             ("R skill with jsonlite, cold", "R skill with jsonlite, warm"),
             ("R skill, warm", "python skill, warm (baseline)"),
             ("R skill, cold", "python skill, warm (baseline)"),
             ("sandbox.run Rscript --vanilla -e 'invisible(0)', r-cold",
              "sandbox.run Rscript --vanilla -e 'invisible(0)', r (warm)")]:
    print(f"| {a} / {b} | {p50[a] / p50[b]:.2f} |")
print(f"\n{clients} clients back to back, {samples} calls each:\n\n| skill | calls/s | pooled | cold path |\n"
      "|---|---:|---:|---:|")
for name, (rate, hits, misses) in rates.items():
    print(f"| {name} | {rate:.1f} | {hits} | {misses} |")
print(f"\n| warm R / cold R, calls/s | {rates['r'][0] / rates['r-cold'][0]:.2f} |")
print(f"| warm Python / warm R, calls/s | {rates['py'][0] / rates['r'][0]:.2f} |")
