#!/usr/bin/env bash
# Cold reads and prefetch, side by side in one run (issue: "Prefetch and
# throughput").
#
# Serves an ImageNet-like tree (SMALL_FILES files of ~110 KB in 10 class
# dirs) and one LARGE_MB file from a perch-devfed XRootD origin on loopback and
# measures, every reader starting cold:
#   small files, 8 readers:  the raw HTTP ceiling of the same XRootD (curl,
#     keep-alive, 64 transfers in parallel), perch without prefetch, perch
#     with directory prefetch, perch with the epoch's order hinted
#     (perchctl hint), xrootdfs and rclone;
#   the large file, one sequential reader: perch cold vs one curl download;
#   4 concurrent readers of the small files through one perch mount: bytes the
#     origin served / dataset size;
#   the small files again behind an emulated WAN link (perch-devfed --wan-rtt
#     WAN_RTT ms --wan-rate WAN_MBIT Mbit/s; this kernel has no netem): perch
#     without prefetch, with directory prefetch, with hints, warmed with
#     perchctl warm, and xrootdfs, each against the link rate.
# Writes bench/results/prefetch-<date>.md and .png.
#
# Needs root (FUSE, drop_caches). Run after a build:  sudo bench/prefetch.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
bench_setup prefetch rclone xrootd-fuse gnuplot-nox curl bc

SMALL_FILES=${SMALL_FILES:-2000}
LARGE_MB=${LARGE_MB:-2048}
READERS=${READERS:-8}
WAN_RTT=${WAN_RTT:-20}
WAN_MBIT=${WAN_MBIT:-1000}
bench_data "$SMALL_FILES" "$LARGE_MB"
(cd "$DATA" && find imagenet -type f -name '*.JPEG' | shuf --random-source=<(yes)) > "$WORK/order.txt"

bench_devfed devfed

# read_list DIR LIST -> seconds to read the files of LIST (relative to DIR) in
# that order with $READERS readers.
read_list() {
  local t0; t0=$(now)
  (cd "$1" && tr '\n' '\0' < "$2" | xargs -0 -P "$READERS" -n 25 cat > /dev/null)
  echo "$(now) - $t0" | bc -l
}
RESULTS=$WORK/small.tsv
record() {  # name seconds
  printf '%s\t%.3f\n' "$1" "$2" >> "$RESULTS"
  printf '%-34s %7.2f s  %6.0f files/s\n' "$1" "$2" "$(echo "$SMALL_FILES / $2" | bc -l)" >&2
}

CTL=$WORK/ctl.sock
stats() { "$BIN/perchctl" --socket "$CTL" stats --json; }
json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
# mount_perch MOUNTPOINT [perchd flags...]: a new, empty cache unless KEEP_CACHE=1.
mount_perch() {
  [[ ${KEEP_CACHE:-0} == 1 ]] || rm -rf "$WORK/cache"
  bench_mount "$WORK/cache" "$@"
}

echo "== raw HTTP ceiling: curl, keep-alive, 64 parallel transfers" >&2
awk -v o="$ORIGIN/bench/" '{ print "url = \"" o $0 "\"\noutput = \"/dev/null\"" }' "$WORK/order.txt" > "$WORK/curl.cfg"
drop
t0=$(now)
curl -s --no-progress-meter --parallel --parallel-max 64 -K "$WORK/curl.cfg"
record "HTTP ceiling (curl, 64 parallel)" "$(since "$t0")"

M=$WORK/perch
echo "== perch, no prefetch" >&2
mount_perch "$M" --no-prefetch
drop; record "perch cold, no prefetch" "$(read_list "$M" "$WORK/order.txt")"
bench_umount "$M"

echo "== perch, directory prefetch" >&2
mount_perch "$M"
drop; record "perch cold, prefetch" "$(read_list "$M" "$WORK/order.txt")"
bench_umount "$M"

echo "== perch, hinted order" >&2
mount_perch "$M"
drop
t0=$(now)
(cd "$M" && "$BIN/perchctl" --socket "$CTL" hint --job bench --file "$WORK/order.txt" > /dev/null)
read_list "$M" "$WORK/order.txt" > /dev/null
record "perch cold, hints" "$(since "$t0")"
bench_umount "$M"

echo "== perch, from its disk cache (what a cold read can at best approach here)" >&2
KEEP_CACHE=1 mount_perch "$M" --no-prefetch
drop; record "perch disk cache (not cold)" "$(read_list "$M" "$WORK/order.txt")"
bench_umount "$M"

echo "== xrootdfs" >&2
bench_xrootdfs "$WORK/xrootdfs" "$ORIGIN"
drop; record "xrootdfs cold" "$(read_list "$WORK/xrootdfs" "$WORK/order.txt")"
fusermount3 -u "$WORK/xrootdfs" || true

echo "== rclone" >&2
bench_rclone "$WORK/rclone" "$ORIGIN"
drop; record "rclone cold" "$(read_list "$WORK/rclone" "$WORK/order.txt")"
fusermount3 -u "$WORK/rclone" || true

echo "== large file: curl vs perch cold" >&2
drop
t0=$(now); curl -s -o /dev/null "$ORIGIN/bench/large.bin"; CURL_S=$(since "$t0")
mount_perch "$M"
drop
t0=$(now); dd if="$M/large.bin" of=/dev/null bs=1M status=none; PERCH_L=$(since "$t0")
bench_umount "$M"
mount_perch "$M" --no-prefetch
drop
t0=$(now); dd if="$M/large.bin" of=/dev/null bs=1M status=none; PERCH_L0=$(since "$t0")
bench_umount "$M"
printf 'large: curl %.2f s, perch %.2f s, perch without read-ahead %.2f s\n' "$CURL_S" "$PERCH_L" "$PERCH_L0" >&2

echo "== 4 concurrent readers" >&2
mount_perch "$M"
drop
for r in 1 2 3 4; do shuf --random-source=<(yes "$r") "$WORK/order.txt" > "$WORK/order.$r"; done
t0=$(now)
READER_PIDS=()
for r in 1 2 3 4; do
  read_list "$M" "$WORK/order.$r" > /dev/null &
  READER_PIDS+=($!)
done
wait "${READER_PIDS[@]}"
FOUR_S=$(since "$t0")
sleep 1
FOUR_NET=$(stats | json 'd["bytes_from_network"]')
bench_umount "$M"

echo "== behind an emulated WAN: rtt $WAN_RTT ms, $WAN_MBIT Mbit/s" >&2
LAN_FED=$FED
LAN_ORIGIN=$ORIGIN
bench_devfed wan --wan-rtt "$WAN_RTT" --wan-rate "$WAN_MBIT"
WAN_FED=$FED
WAN_ORIGIN=$ORIGIN
FED=$WAN_FED
LAN_RESULTS=$RESULTS
RESULTS=$WORK/wan.tsv
mount_perch "$M" --no-prefetch
drop; record "WAN perch cold, no prefetch" "$(read_list "$M" "$WORK/order.txt")"
bench_umount "$M"
mount_perch "$M"
drop; record "WAN perch cold, prefetch" "$(read_list "$M" "$WORK/order.txt")"
bench_umount "$M"
mount_perch "$M"
drop
t0=$(now)
(cd "$M" && "$BIN/perchctl" --socket "$CTL" hint --job bench --file "$WORK/order.txt" > /dev/null)
read_list "$M" "$WORK/order.txt" > /dev/null
record "WAN perch cold, hints" "$(since "$t0")"
bench_umount "$M"
mount_perch "$M"
drop
t0=$(now)
"$BIN/perchctl" --socket "$CTL" warm "$M/imagenet" --wait > /dev/null 2>&1
t1=$(now)
read_list "$M" "$WORK/order.txt" > /dev/null
record "WAN perchctl warm (fetch only)" "$(echo "$t1 - $t0" | bc -l)"
record "WAN perch warm, then read" "$(since "$t0")"
bench_umount "$M"
bench_xrootdfs "$WORK/xrootdfs" "$WAN_ORIGIN"
drop; record "WAN xrootdfs cold" "$(read_list "$WORK/xrootdfs" "$WORK/order.txt")"
fusermount3 -u "$WORK/xrootdfs" || true
FED=$LAN_FED
ORIGIN=$LAN_ORIGIN
WAN_RESULTS=$RESULTS
RESULTS=$LAN_RESULTS

# Report
STAMP=$(date -u +%Y-%m-%d)
OUTDIR=${OUTDIR:-$ROOT/bench/results}
mkdir -p "$OUTDIR"
MD=$OUTDIR/prefetch-$STAMP.md
CPU=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
CEIL=$(head -1 "$RESULTS" | cut -f2)
# table RESULTS TITLE RATIO: a row per reader; RATIO is an awk expression of s (seconds),
# b (bytes), c (the HTTP ceiling's seconds) and r (the WAN rate in Mbit/s).
table() {
  echo "| reader | s | files/s | MB/s | × $2 |"
  echo "|---|---:|---:|---:|---:|"
  while IFS=$'\t' read -r name s; do
    awk -v n="$name" -v s="$s" -v c="$CEIL" -v f="$SMALL_FILES" -v b="$SMALL_BYTES" -v r="$WAN_MBIT" \
      "BEGIN { printf \"| %s | %.2f | %.0f | %.0f | %.2f |\\n\", n, s, f/s, b/s/1e6, $3 }"
  done < "$1"
}
{
  echo "Cold reads, $STAMP, $(nproc) cores ($CPU), $(free -g | awk '/Mem:/{print $2}') GiB RAM, loopback."
  echo "$SMALL_FILES files ($((SMALL_BYTES >> 20)) MiB, 10 directories) read in one shuffled order with $READERS readers;"
  echo "every reader starts cold (new cache, page cache dropped)."
  echo
  table "$RESULTS" "HTTP ceiling" 'c/s'
  echo
  awk -v c="$CURL_S" -v p="$PERCH_L" -v p0="$PERCH_L0" -v L="$LARGE_MB" 'BEGIN {
    printf "Large file (%d MiB), one sequential reader: curl %.2f s (%.0f MB/s); perch cold %.2f s (%.0f MB/s, %.2f× curl); ", L, c, L*1.048576/c, p, L*1.048576/p, c/p
    printf "perch without read-ahead %.2f s (%.2f× curl).\n", p0, c/p0 }'
  echo
  awk -v s="$FOUR_S" -v n="$FOUR_NET" -v b="$SMALL_BYTES" 'BEGIN {
    printf "4 concurrent readers of the small files (each in its own order, one mount, cold): %.2f s; the origin served %.0f bytes = %.3f× the dataset.\n", s, n, n/b }'
  echo
  echo "Behind an emulated WAN link (RTT $WAN_RTT ms, $WAN_MBIT Mbit/s each way; perch-devfed --wan-rtt/--wan-rate), same files, order and readers:"
  echo
  table "$WAN_RESULTS" "link rate" '(b*8/(r*1e6))/s'
} > "$MD"
cat "$MD"
cat "$RESULTS" "$WAN_RESULTS" | awk -F'\t' -v f="$SMALL_FILES" '{ printf "\"%s\" %.1f\n", $1, f/$2 }' > "$WORK/plot.dat"
gnuplot <<GP
set terminal pngcairo size 1200,600 font ",10"
set output "$OUTDIR/prefetch-$STAMP.png"
set logscale y
set grid ytics
set title "Cold small files, $READERS readers ($STAMP, $(nproc) cores; loopback, then WAN $WAN_RTT ms / $WAN_MBIT Mbit/s)"
set style data histograms
set style fill solid 0.8 border -1
set ylabel "files/s"
set xtics rotate by -30
set key off
set yrange [50:*]
set bmargin 9
plot "$WORK/plot.dat" using 2:xtic(1)
GP
echo "wrote $MD and $OUTDIR/prefetch-$STAMP.png" >&2
