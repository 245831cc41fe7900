#!/usr/bin/env bash
# Runs one of this directory's node tests (run.sh NODE SCRIPT ARGS...). As
# root, in a mount namespace of its own: the workspaces the servers mount
# then never show in the host's mount table, which tests running beside
# this one compare before and after.
set -u
if [[ $(id -u) -eq 0 && -z "${CUBICLE_MCP_TEST_UNSHARED:-}" ]] && command -v unshare >/dev/null 2>&1; then
  export CUBICLE_MCP_TEST_UNSHARED=1
  exec unshare --mount --propagation private "$0" "$@"
fi
exec "$@"
