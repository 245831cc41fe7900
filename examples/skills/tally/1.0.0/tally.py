# what: a conversational JSON-RPC skill: a running tally kept between calls
# method: add
# params: {"values": [3, 4, 5]}
#
# One request per stdin line, one response per request: in a skill session
# the same process answers every call, so `count` and `total` carry over.
# Each number is reported as a JSON-RPC notification before the response,
# which the caller receives as skill.progress.
import json
import sys

count, total = 0, 0.0
for line in sys.stdin:
    request = json.loads(line)
    params = request.get("params") or {}
    if request.get("method") == "reset":
        count, total = 0, 0.0
    values = params.get("values", []) if request.get("method") == "add" else []
    for i, value in enumerate(values, 1):
        count += 1
        total += float(value)
        print(json.dumps({"jsonrpc": "2.0", "method": "progress",
                          "params": {"done": i, "of": len(values)}}), flush=True)
    result = {"count": count, "total": total, "mean": total / count if count else None}
    print(json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}), flush=True)
