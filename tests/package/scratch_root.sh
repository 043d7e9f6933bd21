#!/usr/bin/env bash
# A scratch root for `dpkg --root=ROOT` (deb_test.sh, tests/integration/issue_31_upgrade_test):
# an empty tree whose dpkg database holds the host's installed packages, less any perch, so that
# dpkg checks each Depends against the packages installed here (no --force-depends): those provide
# the libraries the binaries installed into ROOT load when they run from there.
#
#   scratch_root.sh ROOT
set -euo pipefail

root=$1
db=$root/var/lib/dpkg
mkdir -p "$db/info" "$db/updates" "$db/triggers"
touch "$db/available"
# The host's installed packages, less any perch already installed here.
awk -v RS= -v ORS='\n\n' '!/^Package: perch(-trainer)?\n/' /var/lib/dpkg/status >"$db/status"
# Their (empty) file lists, so that dpkg does not warn about each one missing.
dpkg-query -W -f '${db:Status-Abbrev} ${binary:Package}\n' |
  awk '$1 !~ /^.n/ && $2 !~ /^perch(-trainer)?(:|$)/ { print $2 }' |
  while read -r p; do : >"$db/info/$p.list"; done
