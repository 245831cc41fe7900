# what: a JSON-RPC skill that calls word-stats through the daemon
# method: report
# params: {"text": "to be or not to be"}
#
# It writes a skill.call request on its stdout and reads the answer from
# its stdin (matching its own id): its manifest's `calls` allows it. The
# request is read line by line: the stdin stays open for the answer.
import json
import sys

request = json.loads(sys.stdin.readline())
text = (request.get("params") or {}).get("text", "")
print(json.dumps({"jsonrpc": "2.0", "id": "stats", "method": "skill.call",
                  "params": {"skill": "word-stats", "method": "stats", "params": {"text": text, "top": 1}}}),
      flush=True)
for line in sys.stdin:
    answer = json.loads(line)
    if answer.get("id") == "stats":
        break
if "error" in answer:
    print(json.dumps({"jsonrpc": "2.0", "id": request["id"], "error": answer["error"]}), flush=True)
    sys.exit(0)
stats = answer["result"]["result"]
common = stats["top"][0][0] if stats["top"] else None
print(json.dumps({"jsonrpc": "2.0", "id": request["id"],
                  "result": {"summary": f"{stats['words']} words, most often '{common}'",
                             "word_stats": answer["result"]["skill"]["version"]}}), flush=True)
