#!/usr/bin/env bash
# The main job on built-in defaults: install what is missing, build, and run
# every bundled example in examples/ through `cubicle run`, saying what each did.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
"$root/scripts/install-deps.sh"
"$root/scripts/build.sh"
cubicle=${CUBICLE_BUILD_DIR:-$root/build}/cli/cubicle

status=0
for example in "$root"/examples/*.sh "$root"/examples/*.py; do
  name=$(basename "$example")
  case "$name" in
    *.py) interp=python3 ;;
    *) interp=/bin/sh ;;
  esac
  expected=$(sed -n 's/^# expect-exit: *//p' "$example" | head -n 1)
  expected=${expected:-0}
  echo "== $name: $(sed -n 's/^# what: *//p' "$example" | head -n 1)"
  json=$(mktemp)
  set +e
  "$cubicle" run --ro-bind "$root/examples" /examples --timeout 20 --json-status "$json" \
    -- "$interp" "/examples/$name"
  rc=$?
  set -e
  summary=$(python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); print("reason=%s status=%s wall=%.1fms setup=%.1fms" % (d["reason"], d["status"], d["wall_ms"], d["setup_ms"]))' "$json")
  rm -f "$json"
  if [[ $rc -eq $expected ]]; then
    echo "-- $name: ok ($summary)"
  else
    echo "-- $name: UNEXPECTED exit $rc, wanted $expected ($summary)"
    status=1
  fi
done
exit $status
