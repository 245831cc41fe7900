#!/usr/bin/env bash
# Installs what building and testing cubicle needs on Debian 12, and nothing
# when it is all there already. Needs root (apt-get). CUBICLE_WITH_R=1 adds
# R (r-base-core, and jsonlite for its skills): the built-in "r" profile,
# the R example skill and the R tests are there only where R is.
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
  libyaml-dev      # skill manifests in YAML (skills/yaml_document.h); libyaml.a linked statically
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
if [[ ${CUBICLE_WITH_R:-0} == 1 ]]; then
  packages+=(r-base-core r-cran-jsonlite)
elif ! command -v Rscript >/dev/null 2>&1; then
  echo "install-deps: no R on this host: the r profile, the R example skill and the R tests are left out" \
    "(CUBICLE_WITH_R=1 $0 installs r-base-core)" >&2
fi

# The official MCP clients the tests in tests/mcp drive (exact versions,
# from its package-lock.json), where npm is installed; without them those
# tests skip.
install_mcp_clients() {
  command -v npm >/dev/null 2>&1 || return 0
  "$(dirname "$0")/../tests/mcp/install.sh" >/dev/null ||
    echo "install-deps: the MCP clients of tests/mcp could not be installed; their tests will skip" >&2
}

# promtool, which lints the metrics text (tests/integration/metrics_test.cc),
# comes only in Debian's prometheus package, whose installation would also
# start a Prometheus server: its .deb is fetched and promtool alone (a
# static Go binary) is unpacked to /usr/local/bin. Without it that check
# skips.
install_promtool() {
  command -v promtool >/dev/null 2>&1 && return 0
  [[ $(id -u) -eq 0 ]] || return 0
  local tmp
  tmp=$(mktemp -d)
  if (cd "$tmp" && apt-get download -qq prometheus >/dev/null 2>&1 && dpkg-deb -x prometheus_*.deb x &&
      install -m 0755 x/usr/bin/promtool /usr/local/bin/promtool); then
    :
  else
    echo "install-deps: promtool could not be unpacked from the prometheus package; the metrics lint will skip" >&2
  fi
  rm -rf "$tmp"
}

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]} == 0)); then
  install_mcp_clients
  install_promtool
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
install_mcp_clients
install_promtool
