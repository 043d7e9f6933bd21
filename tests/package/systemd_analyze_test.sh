#!/usr/bin/env bash
# The systemd unit, offline (no running systemd needed), issue #29 item 3:
#   - `systemd-analyze security --offline=yes` rates its exposure at most MAX (6.0);
#   - `systemd-analyze verify` loads it without a warning. verify insists that
#     ExecStart= names an executable, so it reads a copy of the unit whose
#     /usr/sbin/perchd is the perchd of this build; nothing else is changed.
# That the capability set is enough, and each capability in it needed, is
# tests/integration/systemd_unit_test.cc (it runs perchd).
#
#   systemd_analyze_test.sh UNIT PERCHD [MAX]
#
# Exits 77 (skipped) where systemd-analyze is missing.
set -euo pipefail

unit=$1
perchd=$2
max=${3:-6.0}
command -v systemd-analyze >/dev/null || { echo "systemd_analyze_test: no systemd-analyze; skipped"; exit 77; }

tmp=$(mktemp -d /tmp/perch-unit-test-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "systemd_analyze_test: FAILED: $*" >&2; exit 1; }

# --- exposure -------------------------------------------------------------------------------------
systemd-analyze security --offline=yes --no-pager "$unit" >"$tmp/security" 2>&1 ||
  { cat "$tmp/security" >&2; fail "systemd-analyze security"; }
score=$(sed -n 's/.*Overall exposure level for [^:]*: \([0-9][0-9.]*\) .*/\1/p' "$tmp/security")
[[ -n $score ]] || { cat "$tmp/security" >&2; fail "no overall exposure level in the output"; }
echo "exposure: $score (at most $max)"
if ! awk -v s="$score" -v m="$max" 'BEGIN { exit !(s <= m) }'; then
  grep '✗' "$tmp/security" >&2 || cat "$tmp/security" >&2
  fail "exposure $score is above $max"
fi

# --- verify ---------------------------------------------------------------------------------------
# verify exits 0 on unknown keys and bad values (it ignores them, as systemd would): any output fails.
copy=$tmp/$(basename "$unit")
sed "s|/usr/sbin/perchd|$(realpath "$perchd")|g" "$unit" >"$copy"
systemd-analyze verify --man=no "$copy" >"$tmp/verify" 2>&1 || { cat "$tmp/verify" >&2; fail "verify"; }
[[ ! -s $tmp/verify ]] || { cat "$tmp/verify" >&2; fail "verify warns"; }
echo "verify: no warnings"
