# what: a JSON-RPC skill that answers with a JSON-RPC error for bad input
# method: divide
# params: {"a": 1, "b": 0}
import json
import sys

request = json.loads(sys.stdin.readline())
a, b = request["params"]["a"], request["params"]["b"]
if b == 0:
    reply = {"jsonrpc": "2.0", "id": request["id"], "error": {"code": 1, "message": "division by zero"}}
else:
    reply = {"jsonrpc": "2.0", "id": request["id"], "result": a / b}
print(json.dumps(reply), flush=True)
