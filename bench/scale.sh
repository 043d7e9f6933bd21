#!/usr/bin/env bash
# Cost per cached object at ImageNet's scale (issue 14, item 4).
#
# For each N in SCALES: N tiny files (SMALL_BYTES bytes each) in 1,000 class
# directories named like ImageNet's (train/n00000123/n00000123_4567.JPEG),
# served by a perch-devfed XRootD origin on loopback; a new perchd cache
# (--no-prefetch) is filled with `perchctl warm --wait`, then perchd is
# restarted on it. Reported per N:
#   - warm: wall time and files/s of `perchctl warm --wait`;
#   - perchd RSS (VmRSS of /proc/PID/status) empty, after the warm, and its
#     peak (VmHWM) during the warm;
#   - index size on disk (du of CACHE/index) after the unmount, per object;
#   - restart: perchd start to the mount serving (mountpoint answers), and
#     until its start-up walk of the block store has finished;
#   - RSS after the restart (the catalog loaded from the index, namespace
#     empty) and after a `find` over the mount (namespace in memory too), and
#     the find's wall time;
#   - bytes per object: (RSS after restart - RSS of an empty cache) / N, and
#     the same for the find.
# Writes bench/results/scale-<date>[-TAG].txt.
#
# Needs root (FUSE). Run after a build:  sudo bench/scale.sh
# Env: SCALES ("10000 100000 1000000"; the 1 M step needs ~9 GB of disk and
# ~2.5 M inodes, data and cache), SMALL_BYTES (200), TAG (file suffix),
# PERCH_BIN (build/bin), KEEP_LOG (a path: perchd's log is copied there).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
bench_setup scale bc

SCALES=${SCALES:-10000 100000 1000000}
SMALL_BYTES=${SMALL_BYTES:-200}
CTL=$WORK/ctl.sock
M=$WORK/perch
OUT=$WORK/report.txt
DATA=$WORK/data
mkdir -p "$DATA"

# make_tree N: $DATA/sN/train/<1,000 class dirs>/N/1000 files of SMALL_BYTES.
make_tree() {
  python3 - "$DATA/s$1/train" "$1" "$SMALL_BYTES" <<'PY'
import os, sys
os.umask(0o022)  # dirs 0755, files 0644: readable by user xrootd, no x on files
root, n, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
body = bytes(range(256)) * (size // 256 + 1)
for c in range(1000):
    os.makedirs(os.path.join(root, "n%08d" % c), exist_ok=True)
for i in range(n):
    c = i % 1000
    with open(os.path.join(root, "n%08d" % c, "n%08d_%d.JPEG" % (c, i)), "wb") as f:
        f.write(body[i % 256:i % 256 + size])
PY
}

rss_kib() { awk '/^VmRSS/ { print $2 }' "/proc/$PERCHD_PID/status"; }
hwm_kib() { awk '/^VmHWM/ { print $2 }' "/proc/$PERCHD_PID/status"; }
mib() { echo "scale=1; $1 / 1024" | bc -l; }
per_obj() { echo "scale=0; ($1 - $2) * 1024 / $3" | bc -l; }  # KiB delta -> B/object
# walked: true once this perchd's log says its start-up walk has finished.
walked() { [[ $(grep -c 'start-up walk of' "$WORK/perchd.log") -ge $1 ]]; }

declare -A GEN_S
for n in $SCALES; do
  echo "== $n objects: data" >&2
  t0=$(now)
  make_tree "$n"
  GEN_S[$n]=$(since "$t0")
done
bench_devfed devfed

{
  echo "bench/scale.sh, $(date -u +%Y-%m-%dT%H:%MZ), $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), $(free -g | awk '/Mem:/ { print $2 }') GiB RAM"
  echo "perchd: $BIN/perchd ($("$BIN/perchd" --version 2>&1 | head -1)); tree at $(git rev-parse --short HEAD)$(git diff --quiet || echo ', modified')"
  echo "files of $SMALL_BYTES bytes in 1,000 directories; perchd --no-prefetch; load at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo
  printf '%9s %8s %8s %8s %8s %9s %8s %9s %8s %9s %8s %8s %8s %9s %8s\n' objects warm_s files/s \
    rss0_MiB warm_MiB warmpk_MiB idx_MiB idx_B/obj mount_s walk_s rst_MiB rst_B/ob find_s find_MiB find_B/ob
} > "$OUT"

walks=0
for n in $SCALES; do
  cache=$WORK/cache-$n
  echo "== $n objects: warm" >&2
  bench_mount "$cache" "$M" --no-prefetch
  walks=$((walks + 1))
  for _ in $(seq 600); do walked $walks && break; sleep 0.1; done
  rss0=$(rss_kib)
  t0=$(now)
  "$BIN/perchctl" --socket "$CTL" warm "$M/s$n/train" --wait > "$WORK/warm-$n.out" 2>&1 ||
    { tail -5 "$WORK/warm-$n.out" >&2; exit 1; }
  warm_s=$(since "$t0")
  rss_warm=$(rss_kib)
  hwm=$(hwm_kib)
  blocks=$("$BIN/perchctl" --socket "$CTL" stats --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["cached_blocks"])' 2>/dev/null || echo "?")
  bench_umount "$M"

  echo "== $n objects: restart" >&2
  t0=$(now)
  bench_mount "$cache" "$M" --no-prefetch
  mount_s=$(since "$t0")
  walks=$((walks + 1))
  for _ in $(seq 6000); do walked $walks && break; sleep 0.05; done
  walk_s=$(since "$t0")
  sleep 1
  rss_rst=$(rss_kib)
  echo "== $n objects: find" >&2
  t0=$(now)
  found=$(find "$M/s$n/train" -type f | wc -l)
  find_s=$(since "$t0")
  rss_find=$(rss_kib)
  bench_umount "$M"
  # After the second run: the first run's WAL has been replayed into tables
  # (the size right after the warm swings with when RocksDB last flushed).
  idx_kib=$(du -sk "$cache/index" | cut -f1)
  sst_kib=$(($(find "$cache/index" -name '*.sst' -printf '%s\n' | awk '{ s += $1 } END { print s + 0 }') / 1024))
  [[ $found == "$n" ]] || echo "warning: find saw $found files of $n" >&2
  printf '%9d %8.1f %8.0f %8s %8s %9s %8s %9s %8.2f %9.2f %8s %8s %8.1f %9s %8s\n' "$n" "$warm_s" \
    "$(echo "$n / $warm_s" | bc -l)" "$(mib "$rss0")" "$(mib "$rss_warm")" "$(mib "$hwm")" \
    "$(mib "$idx_kib")" "$(per_obj "$idx_kib" 0 "$n")" "$mount_s" "$walk_s" "$(mib "$rss_rst")" \
    "$(per_obj "$rss_rst" "$rss0" "$n")" "$find_s" "$(mib "$rss_find")" \
    "$(per_obj "$rss_find" "$rss0" "$n")" >> "$OUT"
  echo "   ($n: index $(mib "$idx_kib") MiB, of which SST files $(mib "$sst_kib") MiB; catalog blocks after warm $blocks, find saw $found files, data generated in ${GEN_S[$n]%.*} s)" |
    tee -a "$WORK/notes" >&2
  rm -rf "$cache"
done
{
  echo
  echo "rss0: an empty cache, mounted; warm/warmpk: VmRSS after and VmHWM during the warm;"
  echo "idx: du of cache/index after the second unmount (the WAL replayed); mount_s: perchd start to the mount serving;"
  echo "walk_s: to the end of its start-up walk of the block store; rst: VmRSS 1 s after the walk"
  echo "(catalog loaded, namespace not); find: \`find -type f\` over the mount after the restart and"
  echo "VmRSS after it; B/ob: (that RSS - rss0) / objects. Load at end: $(cut -d' ' -f1-3 /proc/loadavg)"
  cat "$WORK/notes"
} >> "$OUT"
mkdir -p bench/results
dest=bench/results/scale-$(date +%F)${TAG:+-$TAG}.txt
cp "$OUT" "$dest"
[[ -z ${KEEP_LOG:-} ]] || cp "$WORK/perchd.log" "$KEEP_LOG"
cat "$dest"
