# what: a JSON-RPC skill: counts words and characters of the text it is given
# method: stats
# params: {"text": "the quick brown fox jumps over the lazy dog", "top": 2}
#
# The skill protocol: one JSON-RPC request line on stdin, one response line
# (matching id) on stdout; anything on stderr comes back as logs.
import collections
import json
import sys

request = json.loads(sys.stdin.readline())
params = request.get("params") or {}
text = params.get("text", "")
words = text.split()
top = collections.Counter(words).most_common(int(params.get("top", 3)))
print(f"counted {len(words)} words", file=sys.stderr)
print(json.dumps({"jsonrpc": "2.0", "id": request["id"],
                  "result": {"words": len(words), "chars": len(text), "top": top}}), flush=True)
