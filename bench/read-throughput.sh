#!/usr/bin/env bash
# Read throughput, side by side in one run (issue: Spine 2, item 5).
#
# Serves an ImageNet-like tree (2,000 files of ~110 KB in 10 class dirs) and
# one 1 GiB file from a perch-devfed origin on loopback, then reads all of it
# through: a direct local read, perch cold, perch from its disk cache (page
# cache dropped), perch page-cache warm, xrootdfs (XRootD's own FUSE client)
# and rclone (webdav, full VFS cache), cold. Small files are read by 8
# parallel readers (a DataLoader's workers); the large file by one sequential
# reader with 1 MiB reads. Writes bench/results/read-<date>.md and .png.
#
# Needs root (FUSE, drop_caches). Run from the repository root after a build:
#   ./scripts/test -L unit   (or cmake --build --preset release)
#   sudo bench/read-throughput.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
bench_setup bench rclone xrootd-fuse gnuplot-nox bc

SMALL_FILES=${SMALL_FILES:-2000}
LARGE_MB=${LARGE_MB:-1024}
READERS=${READERS:-8}
bench_data "$SMALL_FILES" "$LARGE_MB"
bench_devfed devfed

# read_small DIR -> seconds to read every small file with $READERS readers
read_small() {
  local t0; t0=$(now)
  find "$1" -type f -name '*.JPEG' -print0 | xargs -0 -P "$READERS" -n 50 cat > /dev/null
  since "$t0"
}
read_large() {
  local t0; t0=$(now)
  dd if="$1" of=/dev/null bs=1M status=none
  since "$t0"
}
RESULTS=$WORK/results.tsv
record() {  # name small_seconds large_seconds
  printf '%s\t%.3f\t%.3f\n' "$1" "$2" "$3" >> "$RESULTS"
  printf '%-26s small %7.2f s  large %7.2f s\n' "$1" "$2" "$3" >&2
}

echo "== local" >&2
drop; s=$(read_small "$DATA/imagenet"); drop; l=$(read_large "$DATA/large.bin"); record "local (cold page cache)" "$s" "$l"


echo "== perch" >&2
bench_mount "$WORK/cache" "$WORK/perch"
drop; s=$(read_small "$WORK/perch/imagenet"); l=$(read_large "$WORK/perch/large.bin"); record "perch cold" "$s" "$l"
bench_umount "$WORK/perch"; bench_mount "$WORK/cache" "$WORK/perch"
drop; s=$(read_small "$WORK/perch/imagenet"); drop; l=$(read_large "$WORK/perch/large.bin"); record "perch disk cache" "$s" "$l"
# Warm: each read once more first (the disk-cache pass dropped the small files' pages before its
# large read), then measured.
read_small "$WORK/perch/imagenet" >/dev/null; s=$(read_small "$WORK/perch/imagenet")
read_large "$WORK/perch/large.bin" >/dev/null; l=$(read_large "$WORK/perch/large.bin")
record "perch page-cache warm" "$s" "$l"
bench_umount "$WORK/perch"

echo "== xrootdfs" >&2
bench_xrootdfs "$WORK/xrootdfs" "$ORIGIN"
drop; s=$(read_small "$WORK/xrootdfs/imagenet"); l=$(read_large "$WORK/xrootdfs/large.bin"); record "xrootdfs cold" "$s" "$l"
fusermount3 -u "$WORK/xrootdfs" || true

echo "== rclone" >&2
bench_rclone "$WORK/rclone" "$ORIGIN"
drop; s=$(read_small "$WORK/rclone/imagenet"); l=$(read_large "$WORK/rclone/large.bin"); record "rclone cold" "$s" "$l"
fusermount3 -u "$WORK/rclone" || true

# Report: files/s and MB/s, and each as a ratio of the local read.
STAMP=$(date -u +%Y-%m-%d)
OUTDIR=${OUTDIR:-$ROOT/bench/results}
mkdir -p "$OUTDIR"
MD=$OUTDIR/read-$STAMP.md
CPU=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
{
  echo "Read throughput, $STAMP, $(nproc) cores ($CPU), $(free -g | awk '/Mem:/{print $2}') GiB RAM, loopback."
  echo "$SMALL_FILES files ($((SMALL_BYTES >> 20)) MiB) with $READERS readers; one $LARGE_MB MiB file, one reader."
  echo
  echo "| reader | small files/s | small MB/s | × local | large MB/s | × local |"
  echo "|---|---:|---:|---:|---:|---:|"
  read -r _ ls ll < <(head -1 "$RESULTS" | tr '\t' ' ' | awk '{print "x", $(NF-1), $NF}')
  while IFS=$'\t' read -r name s l; do
    awk -v n="$name" -v s="$s" -v l="$l" -v ls="$ls" -v ll="$ll" -v f="$SMALL_FILES" -v b="$SMALL_BYTES" -v L="$LARGE_MB" \
      'BEGIN { printf "| %s | %.0f | %.0f | %.2f | %.0f | %.2f |\n", n, f/s, b/s/1e6, ls/s, L*1.048576/l, ll/l }'
  done < "$RESULTS"
} > "$MD"
cat "$MD"
awk -F'\t' -v f="$SMALL_FILES" -v L="$LARGE_MB" '{ printf "\"%s\" %.1f %.1f\n", $1, f/$2, L*1.048576/$3 }' "$RESULTS" > "$WORK/plot.dat"
gnuplot <<GP
set terminal pngcairo size 900,500 font ",10"
set output "$OUTDIR/read-$STAMP.png"
set title "Read throughput ($STAMP, $(nproc) cores, loopback)"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set ylabel "small files/s"
set y2label "large file MB/s"
set ytics nomirror
set y2tics
set xtics rotate by -20
set key top right
plot "$WORK/plot.dat" using 2:xtic(1) title "small files/s" axes x1y1, '' using 3 title "large MB/s" axes x1y2
GP
echo "wrote $MD and $OUTDIR/read-$STAMP.png" >&2
