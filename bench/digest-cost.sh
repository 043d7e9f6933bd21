#!/usr/bin/env bash
# What the whole-object digest check costs (issues 30, 41): perchd's CPU per GB
# and the time of a cold read of one large file to its end, with the defaults
# (the copy is checked against the digest a server other than the sender
# states before the last read is answered: one Want-Digest request and one
# pass over the cached copy, the claim's checksums only) and with
# --no-verify-digests, side by side (A B A B), through one XCache. Needs root.
#
#   bench/digest-cost.sh [LARGE_MB] [ROUNDS]     (default 512 MiB, 3 rounds)
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh

MB=${1:-512}
ROUNDS=${2:-3}
bench_setup digest-cost bc
bench_data 0 "$MB"
bench_devfed fed --caches 1

cpu_of() {  # utime + stime of pid $1, in seconds
  awk -v hz="$(getconf CLK_TCK)" '{ printf "%.3f", ($14 + $15) / hz }' "/proc/$1/stat"
}

run() {  # run NAME [perchd flags...]: one cold read of large.bin to its end
  local name=$1; shift
  local cache=$WORK/cache-$name-$RANDOM
  bench_mount "$cache" "$WORK/mnt" --no-prefetch "$@"
  local c0 t0 secs cpu
  c0=$(cpu_of "$PERCHD_PID")
  t0=$(now)
  cat "$WORK/mnt/large.bin" > /dev/null
  secs=$(since "$t0")
  cpu=$(echo "$(cpu_of "$PERCHD_PID") - $c0" | bc -l)
  printf '%-8s read %6.2f s   perchd CPU %6.2f s   CPU/GB %5.2f s\n' "$name" "$secs" "$cpu" \
    "$(echo "$cpu * 1024 / $MB" | bc -l)"
  bench_umount "$WORK/mnt"
  rm -rf "$cache"
}

echo "== $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) CPUs; ${MB} MiB, cold, 1 XCache"
for _ in $(seq "$ROUNDS"); do
  run plain --no-verify-digests
  run verify
done
