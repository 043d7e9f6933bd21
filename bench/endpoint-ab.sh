#!/usr/bin/env bash
# Cost of the HTTP endpoint's cache hits, two perchd builds side by side
# (A B A B ...): a LARGE_MB file, cached whole, fetched ROUNDS times per turn
# with curl through perchd's endpoint. Reported per build: the median wall
# rate and perchd's CPU per GB (utime + stime of /proc/PID/stat over the
# fetches), with the CPU model. Made for issue 28's change of cache hits
# from sendfile to a copy per block.
#
#   sudo bench/endpoint-ab.sh OLD_PERCHD NEW_PERCHD
# Env: LARGE_MB (1024), ROUNDS (5), TURNS (3), TAG.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
A=$1 B=$2
bench_setup endpoint-ab curl
LARGE_MB=${LARGE_MB:-1024}
ROUNDS=${ROUNDS:-5}
TURNS=${TURNS:-3}
bench_data 10 "$LARGE_MB"
bench_devfed fed
TICK=$(getconf CLK_TCK)
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }

# turn BINARY LABEL: mounts with BINARY, caches the file, times ROUNDS fetches.
turn() {
  local bin=$1 label=$2
  local mp=$WORK/mnt-$label cache=$WORK/cache-$label
  mkdir -p "$mp"
  "$bin" --foreground --cache-dir "$cache" --cache-size 20G --control "unix:$WORK/ctl-$label.sock" \
    --http 127.0.0.1:0 "$FED/bench" "$mp" 2>> "$WORK/perchd-$label.log" &
  local pid=$!
  for _ in $(seq 200); do mountpoint -q "$mp" && break; sleep 0.05; done
  MOUNTS+=("$mp")
  local addr
  addr=$("$BIN/perchctl" --socket "$WORK/ctl-$label.sock" health --json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["http_address"])')
  cat "$mp/large.bin" > /dev/null  # cached whole
  local t0 c0 c1 s
  c0=$(cpu_ticks "$pid")
  t0=$(now)
  for _ in $(seq "$ROUNDS"); do
    curl -sS -o /dev/null "http://$addr/bench/large.bin"
  done
  s=$(since "$t0")
  c1=$(cpu_ticks "$pid")
  local gb
  gb=$(echo "$ROUNDS * $LARGE_MB / 1024" | bc -l)
  printf '%-4s %7.2f GB/s  perchd %6.3f CPU-s per GB\n' "$label" "$(echo "$gb / $s" | bc -l)" \
    "$(echo "($c1 - $c0) / $TICK / $gb" | bc -l)" | tee -a "$WORK/report.txt"
  fusermount3 -u "$mp"
  wait "$pid" 2>/dev/null || true
}

{
  echo "# endpoint cache hits, $(date -u +%F) $(date -u +%H:%M) UTC: A = $A, B = $B"
  echo "# CPU: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; ${LARGE_MB} MiB file x $ROUNDS per turn"
} | tee "$WORK/report.txt"
for _ in $(seq "$TURNS"); do
  turn "$A" A
  turn "$B" B
done
mkdir -p bench/results
cp "$WORK/report.txt" "bench/results/endpoint-ab-$(date -u +%F)${TAG:+-$TAG}.txt"
