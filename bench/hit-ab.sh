#!/usr/bin/env bash
# Reads from perch's disk cache (the zero-copy hit path: block files spliced
# into FUSE replies), two or more builds side by side, A B A B (issue 32).
# Each build gets its own cache, filled once; each pass mounts it anew, drops
# the page cache, reads the small files (perch-bench-read, READERS threads; a
# small-file workload turns to FUSE no-open, so these are reads by path),
# then the large file (dd, 1 MiB reads), then the small files again in the
# same run (page cache dropped again: the first pass is each block's first
# read in the run, the second a repeat). Prints files/s and MB/s with
# perchd's CPU (its threads' time on a CPU, /proc/PID/task/*/schedstat, in
# ns) per file and per GB. For the large
# file to be read through perchd rather than by the kernel itself, turn
# passthrough off:
#   printf 'fuse_passthrough = false\n' > /tmp/nopass.toml
#   PERCHD_ARGS="--config /tmp/nopass.toml" BINS="/tmp/before/bin build/bin" bench/hit-ab.sh
# Env: BINS (default build/bin), ROUNDS (3), SMALL_FILES (2000), LARGE_MB
# (512), READERS (8). Needs root (FUSE, drop_caches). Prints to stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
bench_setup hit-ab bc
SMALL_FILES=${SMALL_FILES:-2000}
LARGE_MB=${LARGE_MB:-512}
READERS=${READERS:-8}
BINS=${BINS:-$BIN}
bench_data "$SMALL_FILES" "$LARGE_MB"
(cd "$DATA" && find imagenet -type f -name '*.JPEG' | sort) > "$WORK/files.txt"
bench_devfed devfed
M=$WORK/perch
i=0
for b in $BINS; do
  BIN=$b; bench_reader threads SMALL_READER
  bench_mount "$WORK/cache-$i" "$M"
  "${SMALL_READER[@]}" "$M" "$WORK/files.txt" "$READERS"; dd if="$M/large.bin" of=/dev/null bs=1M status=none
  sleep 2; bench_umount "$M"; i=$((i + 1))
done
echo "Disk-cache reads, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $(lscpu | sed -n 's/^Model name: *//p'); $SMALL_FILES small files ($READERS readers), ${LARGE_MB} MiB large"
for r in $(seq "${ROUNDS:-3}"); do
  i=0
  for b in $BINS; do
    BIN=$b; bench_reader threads SMALL_READER
    bench_mount "$WORK/cache-$i" "$M"
    drop
    p0=$(bench_cpu_ns "$PERCHD_PID")
    read -r w _ _ < <(bench_run_cpu "${SMALL_READER[@]}" "$M" "$WORK/files.txt" "$READERS")
    p1=$(bench_cpu_ns "$PERCHD_PID")
    drop
    t0=$(now); dd if="$M/large.bin" of=/dev/null bs=1M status=none; lw=$(since "$t0")
    p2=$(bench_cpu_ns "$PERCHD_PID")
    drop
    read -r w2 _ _ < <(bench_run_cpu "${SMALL_READER[@]}" "$M" "$WORK/files.txt" "$READERS")
    p3=$(bench_cpu_ns "$PERCHD_PID")
    awk -v n="$b" -v w="$w" -v f="$SMALL_FILES" -v ps=$((p1 - p0)) -v lw="$lw" -v mb="$LARGE_MB" -v pl=$((p2 - p1)) -v w2="$w2" -v ps2=$((p3 - p2)) 'BEGIN {
      printf "round %d %-28s small %6.0f files/s perchd %4.0f us/file | large %6.0f MB/s perchd %5.2f s/GB | small again %6.0f files/s perchd %4.0f us/file\n", '"$r"', n, f / w, ps / 1e3 / f, mb * 1.048576 / lw, pl / 1e9 / (mb / 1024), f / w2, ps2 / 1e3 / f }'
    bench_umount "$M"; i=$((i + 1))
  done
done
