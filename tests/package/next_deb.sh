#!/usr/bin/env bash
# The next version of the perch package, for the upgrade test (issue 31): the package DEB that
# cpack built, rebuilt as version VERSION with PERCHD as its /usr/sbin/perchd (perchd's objects
# linked again with another version, reporting VERSION; tests/integration/CMakeLists.txt,
# perchd_next) and a changelog entry for it. Everything else (unit, maintainer scripts, conffile, perchctl) is the
# cpack package's, as in a rebuild of the next release.
#
#   next_deb.sh DEB PERCHD VERSION OUT
set -euo pipefail

deb=$1
perchd=$2
version=$3
out=$4
tmp=$(mktemp -d /tmp/perch-next-deb-XXXXXX)
trap 'rm -rf "$tmp"' EXIT
pkg=$tmp/pkg

dpkg-deb --raw-extract "$deb" "$pkg"
# Stripped, as cpack strips what it packages (CPACK_STRIP_FILES).
strip -o "$pkg/usr/sbin/perchd" "$perchd"
chmod 0755 "$pkg/usr/sbin/perchd"
old=$(dpkg-deb --field "$deb" Version)
maintainer=$(dpkg-deb --field "$deb" Maintainer)
dpkg --compare-versions "$version" gt "$old" || { echo "next_deb: $version <= $old" >&2; exit 1; }
sed -i "s/^Version: .*/Version: $version/" "$pkg/DEBIAN/control"
changelog=$pkg/usr/share/doc/perch/changelog.gz
{
  printf 'perch (%s) bookworm; urgency=medium\n\n' "$version"
  printf '  * Rebuilt as the next version of perch %s, to test the upgrade.\n\n' "$old"
  printf ' -- %s  %s\n\n' "$maintainer" "$(date -R -u)"
  zcat "$changelog"
} | gzip -9n >"$tmp/changelog.gz"
mv "$tmp/changelog.gz" "$changelog"
chmod 0644 "$changelog"
# What dpkg-deb does not redo: the installed size (KiB) and the files' checksums.
size=$(du -sk --exclude=DEBIAN "$pkg" | cut -f1)
sed -i "s/^Installed-Size: .*/Installed-Size: $size/" "$pkg/DEBIAN/control"
(cd "$pkg" && find . -path ./DEBIAN -prune -o -type f -printf '%P\0' | sort -z |
  xargs -0 md5sum) >"$tmp/md5sums"
mv "$tmp/md5sums" "$pkg/DEBIAN/md5sums"
chmod 0644 "$pkg/DEBIAN/md5sums"
# gzip: quicker than the default xz, and any dpkg reads it.
dpkg-deb --root-owner-group -Zgzip --build "$pkg" "$out" >/dev/null
