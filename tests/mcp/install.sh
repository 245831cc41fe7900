#!/usr/bin/env bash
# Installs the official MCP clients that tests/mcp drives — exact versions,
# from package-lock.json — into tests/mcp/node_modules (gitignored), and
# again only when the lock file changed. Exits 77, which ctest reads as a
# skip, when node or npm is missing or the registry cannot be reached: the
# tests then skip too, saying why.
set -u
here=$(cd "$(dirname "$0")" && pwd)
if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "SKIP: node or npm is not installed"
  exit 77
fi
major=$(node -p 'process.versions.node.split(".")[0]')
if ((major < 20)); then
  echo "SKIP: node $(node --version) is older than 20, which the SDK's dependencies need"
  exit 77
fi
stamp="$here/node_modules/.cubicle-lock.sha256"
want=$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)
if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" ]]; then
  echo "installed already (package-lock.json $want)"
  exit 0
fi
if ! npm ci --prefix "$here" --no-audit --no-fund --loglevel=error; then
  echo "SKIP: npm ci failed (is the npm registry reachable?)"
  exit 77
fi
echo "$want" >"$stamp"
echo "installed (package-lock.json $want)"
