#!/bin/sh
# Runs the Core* integration tests as an unprivileged user: rootless is as
# first-class as root (DESIGN §4).
#
#   tests/rootless.sh TEST_BINARY CUBICLE_BINARY [GTEST_ARGS...]
#
# As root, the two binaries are copied into a fresh world-readable temporary
# directory (the build tree may sit under /root, which the unprivileged user
# cannot traverse) and the tests run under `setpriv` as ROOTLESS_UID:ROOTLESS_GID
# (default 4242:4242) with no supplementary groups and no capabilities. Not as
# root, the tests simply run as the caller. Exits with the test binary's status,
# or 77 (ctest's SKIP_RETURN_CODE) with the reason when the host cannot run
# them: no setpriv, or an unprivileged user may not make a user namespace
# with a mount namespace in it (user.max_user_namespaces=0,
# kernel.unprivileged_userns_clone=0, AppArmor's
# kernel.apparmor_restrict_unprivileged_userns=1, a container's seccomp
# policy), found by trying it with unshare(1).
set -eu

skip() {
  echo "$0: SKIPPED: $*" >&2
  exit 77
}

# Runs "$@" (a probe that prints why it failed) or skips naming `who`.
require_user_namespaces() {
  who=$1
  shift
  if ! command -v unshare >/dev/null 2>&1; then
    return 0  # nothing to probe with; the tests will say what fails
  fi
  if ! why=$(cd / && "$@" unshare --user --map-root-user --mount true 2>&1); then
    skip "$who cannot make a user namespace with a mount namespace here: ${why:-unshare failed}"
  fi
}

if [ "$#" -lt 2 ]; then
  echo "usage: $0 TEST_BINARY CUBICLE_BINARY [GTEST_ARGS...]" >&2
  exit 2
fi
test_binary=$1
cubicle_binary=$2
shift 2
# Core* suites, and parameterised ones (PREFIX/CoreSuite.Test/PARAM).
filter='Core*:*/Core*'

if [ "$(id -u)" -ne 0 ]; then
  require_user_namespaces "uid $(id -u)"
  exec env CUBICLE_BINARY="$cubicle_binary" "$test_binary" --gtest_filter="$filter" "$@"
fi

uid=${ROOTLESS_UID:-4242}
gid=${ROOTLESS_GID:-4242}
if ! command -v setpriv >/dev/null 2>&1; then
  skip "setpriv (util-linux) is needed to drop to uid $uid and is not installed"
fi
require_user_namespaces "uid $uid" setpriv --reuid="$uid" --regid="$gid" --clear-groups --inh-caps=-all

workdir=$(mktemp -d "${TMPDIR:-/tmp}/itest-rootless.XXXXXX")
cleanup() { rm -rf "$workdir"; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

cp "$test_binary" "$workdir/cubicle_integration_tests"
cp "$cubicle_binary" "$workdir/cubicle"
chmod 755 "$workdir" "$workdir/cubicle_integration_tests" "$workdir/cubicle"
# The tests' own temporary files go here too, so the cleanup above removes
# anything a failing test could not.
mkdir "$workdir/tmp"
chown "$uid:$gid" "$workdir/tmp"
chmod 700 "$workdir/tmp"

status=0
(
  cd "$workdir"
  setpriv --reuid="$uid" --regid="$gid" --clear-groups --inh-caps=-all \
    env CUBICLE_BINARY="$workdir/cubicle" HOME="$workdir/tmp" TMPDIR="$workdir/tmp" \
    "$workdir/cubicle_integration_tests" --gtest_filter="$filter" "$@"
) || status=$?
exit "$status"
