#!/usr/bin/env bash
# One large file from perch's cache after a restart (issue 14, third round):
# LARGE_MB (1024) served by a perch-devfed origin, read cold through perch with
# its cache on a tmpfs, perchd restarted, the page cache dropped, then read
# with dd bs=1M from the cache and twice more from the page cache; beside it,
# in each of ROUNDS (2) rounds, the same file read from a local tmpfs and from
# local disk (page cache dropped, then warm). Prints, per read: wall time,
# MB/s, the reader's CPU per GB (dd and its kernel time) and perchd's (utime +
# stime from /proc). Extra arguments go to perchd.
# Needs root (FUSE, drop_caches, mount). Run after a build:  sudo bench/large-restart.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
bench_setup large-restart curl bc
SHM=$WORK/shm
mkdir -p "$SHM"
large_cleanup() {  # the mount on the tmpfs, the tmpfs, then what bench_setup made
  fusermount3 -u -z "$WORK/perch" 2>/dev/null || true
  if mountpoint -q "$SHM"; then umount -l "$SHM" || true; fi
  bench_cleanup
}
trap large_cleanup EXIT INT TERM
LARGE_MB=${LARGE_MB:-1024}
ROUNDS=${ROUNDS:-2}
bench_data 10 "$LARGE_MB"
bench_devfed devfed
mount -t tmpfs -o size=$((LARGE_MB * 3))m perch-large "$SHM"
cp "$DATA/large.bin" "$SHM/large.bin"
M=$WORK/perch
TCK=$(getconf CLK_TCK)
ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
# rd LABEL FILE: one dd of FILE, with its CPU and perchd's (if one runs).
rd() {
  local p0=0 p1=0 r w c
  [[ -n ${PERCHD_PID:-} ]] && p0=$(ticks "$PERCHD_PID")
  r=$(python3 - "$2" <<'PY'
import resource, subprocess, sys, time
t0 = time.monotonic()
subprocess.run(["dd", "if=" + sys.argv[1], "of=/dev/null", "bs=1M", "status=none"], check=True)
w = time.monotonic() - t0
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"{w:.3f} {r.ru_utime + r.ru_stime:.3f}")
PY
  )
  [[ -n ${PERCHD_PID:-} ]] && p1=$(ticks "$PERCHD_PID")
  read -r w c <<< "$r"
  python3 - "$1" "$w" "$c" "$p0" "$p1" "$TCK" "$LARGE_MB" <<'PY'
import sys
label, w, c, p0, p1, tck, mb = sys.argv[1], *map(float, sys.argv[2:])
gb = mb / 1024
p = (p1 - p0) / tck
print(f"{label:<24} {w:6.3f} s {mb * 1.048576 / w:6.0f} MB/s  reader {c / gb:.3f} s/GB  "
      f"perchd {p / gb:.3f} s/GB  total {(c + p) / gb:.3f} s/GB")
PY
}
echo "large file from perch's cache after a restart, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, load $(cut -d' ' -f1 /proc/loadavg), ${LARGE_MB} MiB"
for _ in $(seq "$ROUNDS"); do
  PERCHD_PID=
  rd "local tmpfs" "$SHM/large.bin"
  rd "local tmpfs, again" "$SHM/large.bin"
  drop; rd "local disk (dropped)" "$DATA/large.bin"
  rd "local disk page cache" "$DATA/large.bin"
  rm -rf "$SHM/cache"
  bench_mount "$SHM/cache" "$M" "$@"
  dd if="$M/large.bin" of=/dev/null bs=1M status=none
  sleep 2
  bench_umount "$M"
  bench_mount "$SHM/cache" "$M" "$@"
  drop
  rd "perch tmpfs cache" "$M/large.bin"
  rd "perch page cache" "$M/large.bin"
  rd "perch page cache, again" "$M/large.bin"
  bench_umount "$M"
done
