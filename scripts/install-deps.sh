#!/usr/bin/env bash
# Installs what building and testing cubicle needs on Debian 12, and nothing
# when it is all there already. Needs root (apt-get).
set -euo pipefail

packages=(
  g++ cmake ninja-build pkg-config
  libseccomp-dev
  libcgroup-dev
  libabsl-dev
  libboost1.81-dev libboost-json1.81-dev   # Boost.JSON: Debian's default 1.74 has none
  libspdlog-dev libcli11-dev
  libsqlite3-dev   # sessions' and executions' durable records (sessions/records.h)
  libarchive-dev   # workspace archives (sessions/archive.h)
  libzstd-dev      # libzstd.a: libarchive's zstd filter, linked statically (CUBICLE_STATIC_DEPS)
  libssl-dev       # SHA-256 of collected outputs (OpenSSL's EVP)
  libsystemd-dev   # sd_notify / sd_listen_fds' declarations (libsystemd itself is dlopen'ed, rpc/systemd.h)
  libgtest-dev libgmock-dev libbenchmark-dev
  python3        # the example skills and the in-sandbox syscall probes of the tests
  util-linux     # setpriv, for the rootless test run
  bubblewrap     # only the baseline of bench/ and the differential tests
  help2man       # the manual pages, made from each command's --help (packaging/)
  dpkg-dev       # dpkg-shlibdeps: the .deb's computed dependencies (cpack -G DEB; the package test)
  lintian        # the package test fails on lintian's errors
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  exit 0
fi
if [[ $(id -u) -ne 0 ]]; then
  echo "install-deps: missing packages: ${missing[*]}; run as root (or: sudo $0)" >&2
  exit 1
fi
echo "install-deps: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
