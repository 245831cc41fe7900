#!/usr/bin/env python3
"""Runs every example skill in this folder through `cubicle serve`.

Starts the daemon on its built-in default config (stdio transport), warms
the pools, sends each example as one sandbox.run request (the script on
stdin), and prints what each did and how long the round trip took.
Exit status 0 when every example ended as its '# expect-exit:' line says.
"""
import json
import pathlib
import subprocess
import sys
import time

here = pathlib.Path(__file__).resolve().parent
cubicle = sys.argv[1] if len(sys.argv) > 1 else str(here.parent / "build" / "cli" / "cubicle")

daemon = subprocess.Popen([cubicle, "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
next_id = 0


def call(method, params):
    global next_id
    next_id += 1
    start = time.perf_counter()
    daemon.stdin.write(json.dumps({"jsonrpc": "2.0", "id": next_id, "method": method, "params": params}) + "\n")
    daemon.stdin.flush()
    reply = json.loads(daemon.stdout.readline())
    return reply, (time.perf_counter() - start) * 1000


for profile in ("shell", "python"):
    call("pool.warm", {"profile": profile, "count": 2, "timeout_ms": 20000})

failures = 0
for path in sorted(here.glob("*.sh")) + sorted(p for p in here.glob("*.py") if p.name != "run_examples.py"):
    text = path.read_text()
    what = next((l[7:].strip() for l in text.splitlines() if l.startswith("# what:")), "")
    expect = next((int(l[14:]) for l in text.splitlines() if l.startswith("# expect-exit:")), 0)
    is_python = path.suffix == ".py"
    params = {"profile": "python" if is_python else "shell",
              "argv": ["python3", "-"] if is_python else ["/bin/sh", "-s"],
              "stdin": text, "timeout_ms": 20000}
    reply, ms = call("sandbox.run", params)
    print(f"== {path.name}: {what}")
    if "error" in reply:
        print(f"-- {path.name}: JSON-RPC error {reply['error']}")
        failures += 1
        continue
    r = reply["result"]
    for stream in ("stdout", "stderr"):
        for line in r.get(stream, "").splitlines():
            print(f"   {stream}: {line}")
    ok = r["status"] == expect
    failures += 0 if ok else 1
    print(f"-- {path.name}: {'ok' if ok else 'UNEXPECTED'} reason={r['reason']} status={r['status']} "
          f"round trip {ms:.1f} ms (sandbox wall {r['wall_ms']:.1f} ms)")

stats, _ = call("pool.stats", {})
for name, s in stats["result"]["pools"].items():
    print(f"pool {name}: hits={s['hits']} misses={s['misses']} idle={s['idle']} last build {s['last_build_ms']:.1f} ms")
daemon.stdin.close()
daemon.wait(timeout=60)
sys.exit(1 if failures or daemon.returncode != 0 else 0)
