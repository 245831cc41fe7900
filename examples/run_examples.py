#!/usr/bin/env python3
"""Runs every example in this folder through `cubicle serve`.

Starts the daemon on its built-in default config (stdio transport) with
skills/ as its skills directory, warms the pools, then:
- each *.sh / *.py here as one sandbox.run request (the program on stdin;
  Python as `python3 -I -`, which the python profile's warm interpreters
  serve without starting an interpreter);
- each skill of skills/ (one folder per skill, one per version inside,
  each with its manifest: docs/skills.md), listed by skill.list and called
  by name with skill.call (a JSON-RPC request on the skill's stdin, its
  response line back; the daemon passes the script it loaded to the warm
  interpreter), with the method and params its script's header names;
  an R skill where the host has no R (so no "r" profile) is said to be
  left out, and fails nothing,
- a session (the daemon is given a temporary state directory): a CSV
  uploaded with files.put, two session.exec that see it and each other's
  files, the result fetched from outputs/ with files.get, then destroyed,
and prints what each did and the latencies measured: the client's round
trip, and the daemon's own hand-off histogram from pool.stats.
Exit status 0 when every example ended as its '# expect-exit:' line says
and every skill answered.
"""
import base64
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

here = pathlib.Path(__file__).resolve().parent
# The binary given, else the source tree's build, else (installed, as
# /usr/share/doc/cubicle/examples) the one on PATH.
built = here.parent / "build" / "cli" / "cubicle"
cubicle = sys.argv[1] if len(sys.argv) > 1 else str(built) if built.exists() else shutil.which("cubicle") or str(built)

state_dir = tempfile.mkdtemp(prefix="cubicle-examples-")
# The built-in configuration, with skills/ as the skills directory.
config = json.loads(subprocess.run([cubicle, "serve", "--print-default-config"], check=True, capture_output=True,
                                   text=True).stdout)
config["skills"] = {"dir": str(here / "skills")}
config_path = pathlib.Path(state_dir) / "config.json"
config_path.write_text(json.dumps(config))
daemon = subprocess.Popen([cubicle, "serve", "--config", str(config_path), "--state-dir", state_dir],
                          stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1)
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
    call("pool.warm", {"profile": profile, "count": 4 if profile == "python" else 2, "timeout_ms": 20000})

failures = 0
for path in sorted(here.glob("*.sh")) + sorted(p for p in here.glob("*.py") if p.name != "run_examples.py"):
    text = path.read_text()
    what = next((l[7:].strip() for l in text.splitlines() if l.startswith("# what:")), "")
    expect = next((int(l[14:]) for l in text.splitlines() if l.startswith("# expect-exit:")), 0)
    is_python = path.suffix == ".py"
    params = {"profile": "python" if is_python else "shell",
              "argv": ["python3", "-I", "-"] if is_python else ["/bin/sh", "-s"],
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
          f"warm={r['warm']} round trip {ms:.1f} ms (sandbox wall {r['wall_ms']:.1f} ms)")

listing, _ = call("skill.list", {})
for error in listing["result"]["errors"]:
    # The built-in "r" profile is there only where the host has R: an R
    # skill is left out elsewhere, which is no failure of the example.
    if "r" not in config["profiles"] and "no profile named 'r'" in error["error"]:
        print(f"-- skills: left out, no R on this host (apt-get install r-base-core): {error['error']}")
        continue
    print(f"-- skills: left out: {error['error']}")
    failures += 1
for skill in listing["result"]["skills"]:
    name = skill["name"]
    described, _ = call("skill.describe", {"name": name})
    folder = pathlib.Path(described["result"]["folder"])
    text = (folder / described["result"]["entry"]).read_text()
    header = {l[2:].split(":", 1)[0]: l.split(":", 1)[1].strip() for l in text.splitlines()
              if l.startswith("# ") and ":" in l and l[2:].split(":", 1)[0] in ("what", "method", "params")}
    params = {"skill": name, "method": header["method"], "params": json.loads(header["params"])}
    reply, ms = call("skill.call", params)
    print(f"== skill {name}@{skill['latest']}: {skill['description']}")
    if "error" in reply:
        print(f"-- skill {name}: JSON-RPC error {reply['error']}")
        failures += 1
        continue
    r = reply["result"]
    answer = {"result": r["result"]} if "result" in r else {"error": r["error"]}
    print(f"   {header['method']}({json.dumps(params['params'])}) -> {json.dumps(answer)}")
    for line in r.get("logs", "").splitlines():
        print(f"   log: {line}")
    print(f"-- skill {name}: ok, id {r['skill']['id'][:12]}, round trip {ms:.1f} ms "
          f"(sandbox wall {r['wall_ms']:.1f} ms)")


def session_example():
    """A conversation's workspace: files persist across executions."""
    reply, ms = call("session.create", {"session": "example-conversation", "profile": "python"})
    print(f"== session: created in {ms:.1f} ms: {json.dumps(reply.get('result', reply.get('error')))[:120]}")
    if "error" in reply:
        return 1
    try:
        csv = "city,temp\nOslo,4\nLima,19\nCairo,24\n"
        call("files.put", {"session": "example-conversation", "path": "uploads/temps.csv",
                           "data": base64.b64encode(csv.encode()).decode()})
        steps = [
            "import csv; rows = list(csv.DictReader(open('uploads/temps.csv')));"
            " open('mean.txt', 'w').write(str(sum(int(r['temp']) for r in rows) / len(rows)))",
            "mean = open('mean.txt').read(); open('outputs/report.txt', 'w').write('mean temperature: ' + mean + '\\n');"
            " print('report written')",
        ]
        for code in steps:
            reply, ms = call("session.exec", {"session": "example-conversation", "argv": ["python3", "-I", "-c", code]})
            r = reply.get("result", {})
            print(f"-- session.exec: status={r.get('status')} outputs={json.dumps(r.get('outputs'))} "
                  f"round trip {ms:.1f} ms")
            if r.get("status") != 0:
                print(f"   stderr: {r.get('stderr', reply.get('error'))}")
                return 1
        reply, _ = call("files.get", {"session": "example-conversation", "path": "outputs/report.txt"})
        print(f"   outputs/report.txt: {base64.b64decode(reply['result']['data']).decode().strip()}")
        return 0
    finally:
        call("session.destroy", {"session": "example-conversation", "archive": False})


failures += session_example()

stats, _ = call("pool.stats", {})
for name, s in stats["result"]["pools"].items():
    h = s["handoff_ms"]
    print(f"pool {name}: hits={s['hits']} misses={s['misses']} idle={s['idle']} "
          f"warm interpreter={s['warm_interpreter']} refill mean {s['refill_ms']['mean_ms']:.1f} ms, "
          f"hand-off mean {h['mean_ms']:.2f} ms over {h['count']}")
daemon.stdin.close()
daemon.wait(timeout=60)
shutil.rmtree(state_dir, ignore_errors=True)
sys.exit(1 if failures or daemon.returncode != 0 else 0)
