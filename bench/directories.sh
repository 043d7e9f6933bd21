#!/usr/bin/env bash
# Directories at ImageNet's scale (issue 28): CLASSES class directories of
# PER_CLASS empty files (train/n00000123/n00000123_4567.JPEG) and one flat
# directory of VAL files (val/ILSVRC2012_val_00000001.JPEG, as ImageNet's
# validation set is distributed), served by a perch-devfed XRootD origin on
# loopback. Side by side, on the same tree:
#   - perch (a fresh cache): `find` over everything cold, then warm; `ls -l`
#     of the flat directory cold (a fresh perchd) and warm; perchd's RSS
#     before, its peak (VmHWM), and after;
#   - xrootdfs (XRootD's own FUSE client, root:// to the same origin): the same.
# Every run checks the entry counts against the tree on disk. Writes
# bench/results/directories-<date>[-TAG].txt with the CPU model.
#
# Needs root (FUSE). Run after a build:  sudo bench/directories.sh
# Env: CLASSES (1000), PER_CLASS (1300), VAL (50000), TAG.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
bench_setup directories xrootd-fuse

CLASSES=${CLASSES:-1000}
PER_CLASS=${PER_CLASS:-1300}
VAL=${VAL:-50000}
DATA=$WORK/data
OUT=$WORK/report.txt
mkdir -p "$DATA"

echo "== tree: $CLASSES x $PER_CLASS + $VAL empty files" >&2
python3 - "$DATA" "$CLASSES" "$PER_CLASS" "$VAL" <<'PY'
import os, sys
root, classes, per, val = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for c in range(classes):
    d = os.path.join(root, "train", "n%08d" % c)
    os.makedirs(d)
    for i in range(per):
        os.close(os.open(os.path.join(d, "n%08d_%d.JPEG" % (c, i)), os.O_CREAT | os.O_WRONLY, 0o644))
d = os.path.join(root, "val")
os.makedirs(d)
for i in range(val):
    os.close(os.open(os.path.join(d, "ILSVRC2012_val_%08d.JPEG" % (i + 1)), os.O_CREAT | os.O_WRONLY, 0o644))
PY
chmod -R a+rX "$DATA"
TRAIN_ENTRIES=$((CLASSES * PER_CLASS + CLASSES + 1))
bench_devfed fed

kib() { awk -v f="$2:" '$1 == f { print $2 }' "/proc/$1/status"; }
# timed LABEL EXPECTED COMMAND...: wall seconds of COMMAND, whose output has EXPECTED lines.
timed() {
  local label=$1 want=$2; shift 2
  local t0 n
  t0=$(now)
  n=$("$@" | wc -l)
  local s
  s=$(since "$t0")
  printf '  %-34s %8.2f s  %8d entries%s\n' "$label" "$s" "$n" \
    "$([[ $n -eq $want ]] || echo "  (expected $want)")" | tee -a "$OUT"
}

{
  echo "# directories at ImageNet's scale, $(date -u +%F) $(date -u +%H:%M) UTC"
  echo "# CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; loopback origin (XRootD $(xrootd -v 2>&1 | head -1))"
  echo "# tree: train $CLASSES x $PER_CLASS, val $VAL (empty files)"
} | tee "$OUT"

echo "perch ($(git rev-parse --short HEAD))" | tee -a "$OUT"
M=$WORK/perch
bench_mount "$WORK/cache" "$M" --no-prefetch
rss0=$(kib "$PERCHD_PID" VmRSS)
drop
timed "find train, cold" "$TRAIN_ENTRIES" find "$M/train"
timed "find train, warm" "$TRAIN_ENTRIES" find "$M/train"
rss1=$(kib "$PERCHD_PID" VmRSS)
bench_umount "$M"
bench_mount "$WORK/cache" "$M" --no-prefetch
rss2=$(kib "$PERCHD_PID" VmRSS)
timed "ls -l val, cold (fresh perchd)" "$((VAL + 1))" ls -l "$M/val"
timed "ls -l val, warm" "$((VAL + 1))" ls -l "$M/val"
rss3=$(kib "$PERCHD_PID" VmRSS)
hwm=$(kib "$PERCHD_PID" VmHWM)
printf '  perchd RSS: %d KiB empty -> %d after find; fresh %d -> %d after ls -l val (peak %d KiB, +%d KiB)\n' \
  "$rss0" "$rss1" "$rss2" "$rss3" "$hwm" $((hwm - rss2)) | tee -a "$OUT"
bench_umount "$M"

echo "xrootdfs (root:// to the same origin, nworkers=8)" | tee -a "$OUT"
X=$WORK/xrootdfs
bench_xrootdfs "$X" "$ORIGIN"
drop
timed "find train, cold" "$TRAIN_ENTRIES" find "$X/train"
timed "find train, warm" "$TRAIN_ENTRIES" find "$X/train"
timed "ls -l val, cold" "$((VAL + 1))" ls -l "$X/val"
timed "ls -l val, warm" "$((VAL + 1))" ls -l "$X/val"
xpid=$(pgrep -n xrootdfs || true)
[[ -n $xpid ]] && printf '  xrootdfs RSS: %d KiB (peak %d KiB)\n' "$(kib "$xpid" VmRSS)" "$(kib "$xpid" VmHWM)" | tee -a "$OUT"

mkdir -p bench/results
cp "$OUT" "bench/results/directories-$(date -u +%F)${TAG:+-$TAG}.txt"
echo "written: bench/results/directories-$(date -u +%F)${TAG:+-$TAG}.txt" >&2
