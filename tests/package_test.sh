#!/usr/bin/env bash
# The Debian packages of this build tree (packaging/CMakeLists.txt): made
# with CPack into a scratch directory, their control data and contents
# checked, installed with `dpkg --root` into a scratch root (unpacked with
# dpkg-deb -x when not root), the installed cubicle run on the installed
# configuration, then lintian: any error fails. Nothing is installed on
# this machine, and everything made is removed.
#
#   package_test.sh BUILD_DIR CMAKE CPACK MAN_PAGES(0|1)
# Exit 77 (skipped) where the host lacks dpkg-deb or dpkg-shlibdeps.
set -euo pipefail
build=$1 cmake=$2 cpack=$3 man_pages=$4

skip() { echo "package_test: skipped: $*"; exit 77; }
fail() { echo "package_test: FAILED: $*" >&2; exit 1; }
for tool in dpkg dpkg-deb dpkg-shlibdeps readelf; do
  command -v "$tool" >/dev/null || skip "no $tool on this host (scripts/install-deps.sh installs dpkg-dev)"
done

# CPack makes the packages' directories with mkdir, which the umask narrows.
umask 022
scratch=$(mktemp -d /tmp/itest-package-test.XXXXXX)
# CPack's staging install writes its manifests into the build directory.
made=()
for manifest in install_manifest_cubicle.txt install_manifest_bwrap.txt; do
  [[ -e $build/$manifest ]] || made+=("$build/$manifest")
done
cleanup() { rm -rf "$scratch" "${made[@]}"; }
trap cleanup EXIT

# What CPack packages is what the build made: bring it up to date (nothing
# to do after a full build).
"$cmake" --build "$build" --target cubicle cubicle_install_files >"$scratch/build.log" 2>&1 ||
  { cat "$scratch/build.log"; fail "building cubicle and its installed files"; }
(cd "$build" && "$cpack" -G DEB -B "$scratch/out") >"$scratch/cpack.log" 2>&1 ||
  { cat "$scratch/cpack.log"; fail "cpack -G DEB"; }
version=$("$build/cli/cubicle" --version | awk '{print $2}')
deb=$scratch/out/cubicle_${version}-1_$(dpkg --print-architecture).deb
bwrap_deb=$scratch/out/cubicle-bwrap_${version}-1_all.deb
[[ -f $deb && -f $bwrap_deb ]] || { ls -l "$scratch/out"; fail "expected $deb and $bwrap_deb"; }
echo "package_test: $(basename "$deb"): $(stat -c %s "$deb") bytes"

field() { dpkg-deb --field "$1" "$2"; }
expect() { # expect WHAT HAYSTACK NEEDLE: fixed-string match
  grep -qF -- "$3" <<<"$2" || fail "$1: no '$3' in: $2"
}
# Computed by dpkg-shlibdeps (libc6, versioned), plus libssl3 by hand.
expect Depends "$(field "$deb" Depends)" "libc6 (>="
expect Depends "$(field "$deb" Depends)" "libssl3"
expect Version "$(field "$deb" Version)" "${version}-1"
expect conffiles "$(dpkg-deb --ctrl-tarfile "$deb" | tar -xOf - ./conffiles)" "/etc/cubicle/config.json"
expect Conflicts "$(field "$bwrap_deb" Conflicts)" "bubblewrap"
expect Depends "$(field "$bwrap_deb" Depends)" "cubicle (= ${version}-1)"

contents=$(dpkg-deb --contents "$deb")
for path in ./usr/bin/cubicle ./etc/cubicle/config.json ./usr/share/doc/cubicle/copyright \
    ./usr/share/doc/cubicle/changelog.Debian.gz ./usr/share/doc/cubicle/README.md \
    ./usr/share/doc/cubicle/docs/cli.md ./usr/share/doc/cubicle/docs/config.md \
    ./usr/share/doc/cubicle/examples/run_examples.py ./usr/share/doc/cubicle/examples/skills/word-stats/1.0.0/skill.yaml; do
  expect contents "$contents" " $path"
done
if [[ $man_pages == 1 ]]; then
  for page in cubicle cubicle-run cubicle-serve cubicle-bwrap; do
    expect contents "$contents" " ./usr/share/man/man1/$page.1.gz"
  done
fi
expect contents "$(dpkg-deb --contents "$bwrap_deb")" " ./usr/bin/bwrap -> cubicle"

# Installed, as dpkg would: the conffile registered; then the installed
# binary accepts the installed configuration, which is its built-in one.
root=$scratch/root
if [[ $(id -u) -eq 0 ]]; then
  mkdir -p "$root/var/lib/dpkg/info" "$root/var/lib/dpkg/updates"
  touch "$root/var/lib/dpkg/status"
  # --force-depends: the scratch root has no libc6; --log: dpkg logs to the
  # host's /var/log/dpkg.log otherwise.
  dpkg --root="$root" --log="$scratch/dpkg.log" --force-depends -i "$deb" "$bwrap_deb" >"$scratch/dpkg.out" 2>&1 ||
    { cat "$scratch/dpkg.out"; fail "dpkg --root -i"; }
  expect "dpkg -s" "$(dpkg --root="$root" -s cubicle)" "/etc/cubicle/config.json"
else
  echo "package_test: not root: unpacking with dpkg-deb -x instead of dpkg -i"
  dpkg-deb -x "$deb" "$root"
  dpkg-deb -x "$bwrap_deb" "$root"
fi
installed=$root/usr/bin/cubicle
sections=$(readelf -S --wide "$installed")
for section in .debug_info .symtab; do
  ! grep -qF -- " $section " <<<"$sections" || fail "usr/bin/cubicle is not stripped: it has $section"
done
check=$("$installed" serve --check-config --config "$root/etc/cubicle/config.json" 2>&1) ||
  fail "cubicle serve --check-config --config /etc/cubicle/config.json: $check"
# The built-in configuration has an r profile where the host has R.
profiles=2
[[ -x /usr/bin/Rscript && -d /etc/R ]] && profiles=3
expect "--check-config" "$check" "configuration OK: $profiles profile(s)"
cmp -s "$root/etc/cubicle/config.json" <("$installed" serve --print-default-config) ||
  fail "/etc/cubicle/config.json is not the binary's built-in configuration"
# Under the name bwrap, cubicle is bubblewrap's command line.
expect "bwrap --version" "$("$root/usr/bin/bwrap" --version)" "bubblewrap"
if [[ $(id -u) -eq 0 ]]; then
  dpkg --root="$root" --log="$scratch/dpkg.log" -P cubicle-bwrap cubicle >"$scratch/dpkg.out" 2>&1 ||
    { cat "$scratch/dpkg.out"; fail "dpkg --root -P"; }
  [[ ! -e $root/etc/cubicle/config.json ]] || fail "purge left /etc/cubicle/config.json"
fi

if command -v lintian >/dev/null; then
  # Its temporary files and any cache in the scratch directory. Without
  # --show-overrides: with it, lintian counts an overridden error
  # (packaging/lintian-overrides says why each is there) towards --fail-on.
  status=0
  HOME=$scratch TMPDIR=$scratch lintian --fail-on error --display-info "$deb" "$bwrap_deb" \
    >"$scratch/lintian.out" 2>&1 || status=$?
  grep -v "running with root privileges" "$scratch/lintian.out" || true
  ((status == 0)) || fail "lintian: exit status $status (errors above)"
else
  echo "package_test: lintian not installed: its checks skipped"
fi
echo "package_test: ok"
