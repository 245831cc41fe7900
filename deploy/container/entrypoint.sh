#!/bin/sh
# The image's entrypoint (under tini): prepares what a container does not
# give the daemon as a host would, then execs `cubicle "$@"`.
set -eu

# A keys file still holding the placeholder of deploy/kubernetes/base/secret.yaml
# would open the daemon to anyone who read that file: refuse to start.
keys=${CUBICLE_API_KEYS_FILE:-}
prev=
for arg in "$@"; do
  case $prev in --keys-file) keys=$arg ;; esac
  case $arg in --keys-file=*) keys=${arg#--keys-file=} ;; esac
  prev=$arg
done
if [ -n "$keys" ] && [ -r "$keys" ] && grep -q 'REPLACE-WITH-' "$keys"; then
  echo "entrypoint: $keys still holds a placeholder key (REPLACE-WITH-...); generate real ones (docs/operations.md, \"Keys\")" >&2
  exit 2
fi

# The socket's and the host cache's directory (docs/config.md, `socket`).
mkdir -p -m 0700 /run/cubicle

# cgroup v2 with a private cgroup namespace, as a container gets it: our
# cgroup is the namespace's root and holds our processes, and v2 lets a
# cgroup that holds processes enable no controller for its children
# (EBUSY), so no sandbox could have a memory or pids limit. Move every
# process of the container into a leaf, /daemon, and let cubicle make its
# sandboxes' groups under /sandboxes, beside it (docs/security.md,
# CUBICLE_CGROUP_PARENT). cgroup v1 and hybrid hosts need none of this.
cg=/sys/fs/cgroup
if [ -z "${CUBICLE_CGROUP_PARENT:-}" ] && [ -f $cg/cgroup.controllers ] && [ "$(cat /proc/self/cgroup)" = "0::/" ]; then
  if mkdir -p $cg/daemon 2>/dev/null; then
    # Bounded: the container's processes are tini, this shell and the
    # short-lived `cat`; a process that ended meanwhile cannot be moved.
    for pid in $(cat $cg/cgroup.procs); do
      echo "$pid" > $cg/daemon/cgroup.procs 2>/dev/null || true
    done
    export CUBICLE_CGROUP_PARENT=/sandboxes
  else
    echo "entrypoint: $cg is read-only: sandboxes get no cgroup limits (the container must be privileged; docs/operations.md)" >&2
  fi
fi

exec /usr/local/bin/cubicle "$@"
