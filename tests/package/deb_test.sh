#!/usr/bin/env bash
# The Debian packages, end to end: cpack builds them from an existing build directory, their
# contents are exactly what packaging/ installs, Depends names the shared libraries, lintian finds
# no error or warning, and dpkg installs them into a scratch root where the installed programs run
# (`perchd --version`) with the host's libraries; purging removes them again.
#
#   deb_test.sh BUILD_DIR VERSION TRANSFER TRAINER
#
# TRANSFER and TRAINER (0 or 1) say whether the build has perch-transfer and the trainer, i.e.
# whether perch must hold /usr/libexec/perch/perch-transfer and perch-trainer_*.deb must exist.
#
# The scratch root's dpkg database starts as a copy of the host's status (scratch_root.sh), so
# that dpkg checks each Depends against the packages installed here (no --force-depends): those
# provide the libraries the installed binaries load. --force-script-chrootless runs the
# maintainer scripts without a chroot (the scratch root has no shell) and with DPKG_ROOT set,
# which makes them leave the host alone. Needs root (dpkg writes files owned by root); exits 77 (skipped) otherwise.
set -euo pipefail

build=$(realpath "$1")
version=$2
with_transfer=$3
with_trainer=$4
[[ $(id -u) -eq 0 ]] || { echo "deb_test: needs root; skipped"; exit 77; }

tmp=$(mktemp -d /tmp/perch-deb-test-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "deb_test: FAILED: $*" >&2; exit 1; }

# --- build --------------------------------------------------------------------------------------
start=$(date +%s%N)
cpack --config "$build/CPackConfig.cmake" -B "$tmp/out" >"$tmp/cpack.log" 2>&1 \
  || { cat "$tmp/cpack.log" >&2; fail "cpack"; }
echo "cpack: $((($(date +%s%N) - start) / 1000000)) ms"
deb=$tmp/out/perch_${version}_amd64.deb
[[ -f $deb ]] || fail "no $deb; cpack made: $(ls "$tmp/out")"
debs=("$deb")

# --- contents -----------------------------------------------------------------------------------
# Every file (not directory) each package must hold, and nothing else.
perch_files=(
  ./etc/perch/perchd.toml
  ./lib/systemd/system/perchd.service
  ./usr/bin/perchctl
  ./usr/lib/tmpfiles.d/perch.conf
  ./usr/sbin/perchd
  ./usr/share/doc/perch/README.md.gz
  ./usr/share/doc/perch/changelog.gz
  ./usr/share/doc/perch/copyright
  ./usr/share/doc/perch/examples/perchd.toml
  ./usr/share/man/man1/perchctl.1.gz
  ./usr/share/man/man8/perchd.8.gz
)
if ((with_transfer)); then
  perch_files+=(./usr/libexec/perch/perch-transfer)
fi
trainer_files=(
  ./usr/bin/perch-synth-imagenet
  ./usr/bin/perch-train
  ./usr/share/doc/perch-trainer/README.md.gz
  ./usr/share/doc/perch-trainer/changelog.gz
  ./usr/share/doc/perch-trainer/copyright
  ./usr/share/man/man1/perch-synth-imagenet.1.gz
  ./usr/share/man/man1/perch-train.1.gz
)

# check_contents DEB FILE...: the package's files are exactly FILE...
check_contents() {
  local deb=$1
  shift
  dpkg-deb --fsys-tarfile "$deb" | tar -t | grep -v '/$' | sort >"$tmp/have"
  printf '%s\n' "$@" | sort >"$tmp/want"
  diff -u "$tmp/want" "$tmp/have" >&2 ||
    fail "$(basename "$deb"): files differ (- missing, + extra)"
}
check_contents "$deb" "${perch_files[@]}"
if ((with_trainer)); then
  trainer_deb=$tmp/out/perch-trainer_${version}_amd64.deb
  [[ -f $trainer_deb ]] || fail "the build has perch-train but cpack made no $trainer_deb"
  check_contents "$trainer_deb" "${trainer_files[@]}"
  debs+=("$trainer_deb")
  installed_files=("${perch_files[@]}" "${trainer_files[@]}")
else
  installed_files=("${perch_files[@]}")
fi
made=("$tmp"/out/*.deb)
((${#made[@]} == ${#debs[@]})) || fail "cpack made ${made[*]}, expected ${debs[*]}"
ls -l "${debs[@]}"

# --- control fields -----------------------------------------------------------------------------
depends=$(dpkg-deb -f "$deb" Depends)
echo "Depends: $depends"
# fuse3 and ca-certificates by hand; the libraries through dpkg-shlibdeps.
for want in fuse3 ca-certificates libc6 'libstdc++6' libfuse3-3 libcurl4 'libgrpc++1.51' \
    libsystemd0 libxml2; do
  grep -Eq "(^|, )${want//+/\\+}( |,|$)" <<<"$depends" || fail "Depends lacks $want"
done
[[ $(dpkg-deb -f "$deb" Package Version Architecture | tr '\n' ' ') == \
  "Package: perch Version: $version Architecture: amd64 " ]] || fail "control fields"
[[ $(dpkg-deb -I "$deb" conffiles) == /etc/perch/perchd.toml ]] || fail "conffiles"
# The unit runs the path the package installs perchd at.
exec_start=$(dpkg-deb --fsys-tarfile "$deb" | tar -xO ./lib/systemd/system/perchd.service |
  sed -n 's/^ExecStart=\([^ ]*\).*/\1/p')
[[ $exec_start == /usr/sbin/perchd ]] || fail "perchd.service runs '$exec_start'"
# A reload (and the upgrade, through the postinst) hands the mounts to the installed perchd
# (issue 31); tests/integration/issue_31_handoff_test.cc runs that command line.
exec_reload=$(dpkg-deb --fsys-tarfile "$deb" | tar -xO ./lib/systemd/system/perchd.service |
  sed -n 's/^ExecReload=//p')
[[ $exec_reload == "/usr/sbin/perchd --takeover --config /etc/perch/perchd.toml" ]] ||
  fail "perchd.service reloads with '$exec_reload'"
dpkg-deb --ctrl-tarfile "$deb" | tar -xO ./postinst | grep -q '^ *deb-systemd-invoke reload perchd.service' ||
  fail "the postinst does not hand over on upgrade"

# --- lintian ------------------------------------------------------------------------------------
# Only information-level tags remain (the build's hardening flags, an unneeded .comment section).
lintian --fail-on error,warning "${debs[@]}" 2>/dev/null || fail "lintian"

# --- install into a scratch root ----------------------------------------------------------------
root=$tmp/root
db=$root/var/lib/dpkg
"$(dirname "$0")/scratch_root.sh" "$root"
dpkg_root=(dpkg --root="$root" --force-script-chrootless)
"${dpkg_root[@]}" -i "${debs[@]}" >"$tmp/dpkg.log" 2>&1 ||
  { cat "$tmp/dpkg.log" >&2; fail "dpkg -i"; }
[[ $(dpkg-query --admindir="$db" -W -f '${db:Status-Abbrev}' perch) == "ii " ]] ||
  fail "perch is not installed in the scratch root"

for f in "${installed_files[@]}"; do [[ -f $root/${f#./} ]] || fail "installed: no ${f#.}"; done
out=$("$root/usr/sbin/perchd" --version)
[[ $out == "perchd $version" ]] || fail "installed perchd --version: '$out'"
echo "installed: $out"
out=$("$root/usr/bin/perchctl" --version)
[[ $out == "perchctl $version" ]] || fail "installed perchctl --version: '$out'"
# Man pages: gzip'd roff for each program, in its section.
if ((with_transfer)); then
  plugin=$root/usr/libexec/perch/perch-transfer
  out=$("$plugin" --version)
  [[ $out == "perch-transfer $version" ]] || fail "installed perch-transfer --version: '$out'"
  "$plugin" -classad | grep -qx 'SupportedMethods = "osdf, pelican, stash"' ||
    fail "installed perch-transfer -classad"
fi
zcat "$root/usr/share/man/man8/perchd.8.gz" | grep -q '^\.TH PERCHD "8"' || fail "perchd.8"
zcat "$root/usr/share/man/man1/perchctl.1.gz" | grep -q '^\.TH PERCHCTL "1"' || fail "perchctl.1"
grep -q '^Type=notify' "$root/lib/systemd/system/perchd.service" || fail "perchd.service"
if [[ -v trainer_deb ]]; then
  out=$("$root/usr/bin/perch-train" --version)
  [[ $out == "perch-train $version" ]] || fail "installed perch-train --version: '$out'"
  out=$("$root/usr/bin/perch-synth-imagenet" --version)
  [[ $out == "perch-synth-imagenet $version" ]] || fail "perch-synth-imagenet --version: '$out'"
fi

# --- purge --------------------------------------------------------------------------------------
# postrm removes the cache directory (inside DPKG_ROOT); dpkg removes the files and the conffile.
mkdir -p "$root/var/cache/perch/blocks"
packages=(perch)
if [[ -v trainer_deb ]]; then
  packages+=(perch-trainer)
fi
"${dpkg_root[@]}" --purge "${packages[@]}" >"$tmp/dpkg.log" 2>&1 ||
  { cat "$tmp/dpkg.log" >&2; fail "dpkg --purge"; }
for f in "${installed_files[@]}" ./var/cache/perch; do
  [[ ! -e $root/${f#./} ]] || fail "left after purge: ${f#.}"
done
echo "deb_test: ok"
