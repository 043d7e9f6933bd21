#!/usr/bin/env bash
# Fault economy (issue #11, Hardening, "Also build").
#
# Serves a mixed data set (SMALL_FILES files of ~110 KB in 10 class dirs,
# LARGE_FILES files of LARGE_MB and one of LARGE2_MB) from a perch-devfed federation with two
# XCaches, whose origin and cache answers pass perch-devfed's fault proxy, and
# reads every file through a cold perch mount with READERS parallel readers,
# comparing each byte with the source tree. Cases:
#   base      no faults (the overhead of headers and listings)
#   cut       FAULT % of response bodies end early on a clean close (short body)
#   reset     FAULT % of response bodies end in a TCP reset mid-body
#   stall     STALL % of response bodies stop mid-body on an open connection
#   kill      no faults; the cache that has served the most is SIGKILLed when
#             40 % of the files are read
#   stop      the same with SIGSTOP (a hung cache: connections open, no answer)
#   kill2     no faults; both caches SIGKILLed when 40 % are read (the origin
#             stays: perch-devfed's director names it once no cache is left)
#   digests   no faults; perchd with --no-verify-digests (against base, with
#             the defaults: what checking every object costs)
#   corrupt1  1 % of the caches' bodies have one byte flipped (--fault-corrupt),
#             perchd with its defaults (digests checked): 0 wrong reads is the target
#   corrupt20 the same with 20 %
#   nostored  no faults, perchd with its defaults, perch-devfed --no-stored-digests:
#             the exports hold no stored checksum, so every digest request makes
#             XRootD compute one (the worst case for its checksum jobs); run it
#             with SMALL_FILES=10000 LARGE_FILES=8 LARGE_MB=1024 READERS=64
#   curl      FAULT % cut, each file fetched by curl through the director
#             (-L) with --retry-all-errors: a client that restarts, not resumes
# For each: bytes the origin and caches delivered to perch (tcpdump on the
# fault proxies' ports: per connection perch's last ACK less its first) /
# bytes read, perch's own counters (bytes_from_network, failovers, resumes),
# failed and wrong reads, wall time, read latency (p50/p99/max; for kill/stop:
# reads in flight at the signal or started within 5 s after it) and perchd CPU
# seconds per GB delivered.
# Targets: cut with 2 caches, fetched/delivered <= 1.02 and no failed read;
# kill/stop: no failed read. Writes bench/results/faults-<date>.txt (and .png).
#
# Needs root (FUSE, tcpdump). Run from the repository root after a build
# (perchd, perchctl, perch-devfed):  sudo bench/faults.sh
# CASES="base cut" SEEDS="1 2 3" CACHES=2 select what runs; LOGDIR=DIR keeps
# each run's perchd log, devfed stderr, per-file reads and capture.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
bench_setup faults tcpdump curl gnuplot-nox bc

SMALL_FILES=${SMALL_FILES:-1000}
LARGE_MB=${LARGE_MB:-64}
LARGE2_MB=${LARGE2_MB:-32}
LARGE_FILES=${LARGE_FILES:-1}
READERS=${READERS:-8}
FAULT=${FAULT:-0.05}
STALL=${STALL:-0.01}
CASES=${CASES:-base cut reset stall kill stop curl}
SEEDS=${SEEDS:-1}
CACHES=${CACHES:-2}
trap 'bench_tcpcount_stop; bench_cleanup' EXIT INT TERM
# Without faults, perch-devfed puts no proxy in front of the servers; a link of
# 2 µs RTT and no rate limit adds one, so that every case counts the same way.
NOFAULT="--wan-rtt 0.002"

bench_data "$SMALL_FILES" "$LARGE_MB"
head -c $((LARGE2_MB << 20)) /dev/urandom > "$DATA/large2.bin"
for i in $(seq 2 "$LARGE_FILES"); do
  head -c $((LARGE_MB << 20)) /dev/urandom > "$DATA/large-$i.bin"
done
chmod a+r "$DATA"/large*.bin
(cd "$DATA" && find . -type f | sed 's|^\./||' | shuf --random-source=<(yes)) > "$WORK/order.txt"
DELIVERED=$(find "$DATA" -type f -printf '%s\n' | awk '{ s += $1 } END { printf "%.0f\n", s }')
echo "== $(wc -l < "$WORK/order.txt") files, $DELIVERED bytes" >&2

# The reader: lists the mount and compares its names with the source, then
# reads every file of ORDER with READERS threads (1 MiB reads) and compares
# it with the source. At --at N files done it runs CMD once (the kill/stop
# cases). Writes one line per file (start end bytes status path, seconds from
# the first read) and prints a JSON summary.
cat > "$WORK/reader.py" <<'PY'
import concurrent.futures, json, os, subprocess, sys, threading, time
mount, src, order, readers, out, at, cmd = sys.argv[1:8]
readers, at = int(readers), int(at)
files = open(order).read().split()
t0 = time.monotonic()
listing_errors = []
def names(root):
    found = set()
    for d, _, fs in os.walk(root, onerror=lambda e: listing_errors.append(str(e))):
        found.update(os.path.relpath(os.path.join(d, f), root) for f in fs)
    return found
missing = names(src) - names(mount)
list_s = time.monotonic() - t0
lock, done, event = threading.Lock(), [0], [None]
def one(path):
    start, n, status = time.monotonic() - t0, 0, "ok"
    try:
        with open(os.path.join(mount, path), "rb", buffering=0) as m, \
             open(os.path.join(src, path), "rb") as s:
            while True:
                a = m.read(1 << 20)
                if a != s.read(len(a)) or (not a and s.read(1)):
                    status = "mismatch"
                    break
                if not a:
                    break
                n += len(a)
    except OSError as e:
        status = "error:" + (os.strerror(e.errno) if e.errno else str(e))
    end = time.monotonic() - t0
    with lock:
        done[0] += 1
        fire = done[0] == at
    if fire:
        event[0] = time.monotonic() - t0
        subprocess.run(["bash", "-c", cmd], check=False)
    return start, end, n, status, path
read_t0 = time.monotonic() - t0
with concurrent.futures.ThreadPoolExecutor(readers) as pool:
    rows = list(pool.map(one, files))
wall = time.monotonic() - t0 - read_t0
with open(out, "w") as f:
    for r in rows:
        f.write("%.3f\t%.3f\t%d\t%s\t%s\n" % r)
lat = sorted(r[1] - r[0] for r in rows)
q = lambda p: lat[min(len(lat) - 1, int(p * len(lat)))]
summary = {"files": len(rows), "bytes": sum(r[2] for r in rows),
           "failed": sum(r[3].startswith("error") for r in rows),
           "mismatched": sum(r[3] == "mismatch" for r in rows),
           "missing_in_listing": len(missing), "listing_errors": len(listing_errors),
           "list_s": list_s, "read_s": wall, "p50_s": q(0.5), "p99_s": q(0.99), "max_s": lat[-1]}
if event[0] is not None:
    e = event[0]
    near = [r[1] - r[0] for r in rows if r[0] <= e + 5 and r[1] >= e]
    summary.update({"event_s": e - read_t0, "near_reads": len(near),
                    "near_max_s": max(near, default=0),
                    "near_over_1s": sum(x > 1 for x in near),
                    "after_event_s": max(r[1] for r in rows) - e})
json.dump(summary, sys.stdout)
PY

json() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
stats() { "$BIN/perchctl" --socket "$WORK/ctl.sock" stats --json; }
TICK=$(getconf CLK_TCK)
RESULTS=$WORK/results.tsv
DETAIL=$WORK/detail.txt
M=$WORK/perch

# start_fed CASE SEED [devfed flags]: a federation with two caches, and a
# capture of what perch sends to its origin and cache ports; sets DEVFED_PID.
start_fed() {
  local name=$1 seed=$2; shift 2
  bench_devfed "$name-$seed" --caches "$CACHES" --fault-seed "$seed" \
    --work-dir "$WORK/fed-$name-$seed" "$@"
  DEVFED_PID=${PIDS[-1]}
  local ports=()
  ports+=("origin:$(sed -n 's|^origin /bench: http://127.0.0.1:\([0-9]*\).*|\1|p' "$WORK/$name-$seed.out")")
  while read -r i port; do ports+=("cache$i:$port"); done < <(
    sed -n 's|^cache /bench \([0-9]\): http://127.0.0.1:\([0-9]*\).*|\1 \2|p' "$WORK/$name-$seed.out")
  bench_tcpcount_start "${ports[@]}"
}
stop_fed() {
  bench_tcpcount_stop
  kill -CONT $(sed -n 's/.* pid=//p' "$WORK/$CASE-$SEED.out") 2>/dev/null || true
  kill "$DEVFED_PID" 2>/dev/null || true
  wait "$DEVFED_PID" 2>/dev/null || true
}
# wire -> "TOTAL_BYTES per-server-list": what the origin and caches delivered
wire() {
  bench_tcpcount_read | awk '{ t += $2; s = s sprintf("%s=%.1fMB/%d ", $1, $2 / 1e6, $3) }
    END { printf "%d %s\n", t, s }'
}
# The stop command for kill/stop: signal the cache whose proxy has sent the most
# (kill2: every cache).
signal_cmd() {
  if [[ $1 == KILL2 ]]; then
    echo "echo \"\$(date +%T.%N) SIGKILL every cache\" >> $WORK/events.log"
    echo "kill -KILL $(sed -n 's|^cache /bench .* pid=||p' "$WORK/$CASE-$SEED.out" | tr '\n' ' ')"
    return
  fi
  cat <<EOF
busiest=\$(source bench/lib.sh; WORK=$WORK TCPCOUNT_NAMES=(${TCPCOUNT_NAMES[*]}); bench_tcpcount_peek | grep '^cache' | sort -k2 -n | tail -1 | cut -d' ' -f1)
pid=\$(sed -n "s|^cache /bench \${busiest#cache}: .* pid=||p" "$WORK/$CASE-$SEED.out")
echo "\$(date +%T.%N) SIG$1 \$busiest pid \$pid" >> "$WORK/events.log"
kill -$1 "\$pid"
EOF
}

# run_perch CASE SEED AT SIGNAL [devfed flags]: one cold perch run.
run_perch() {
  CASE=$1 SEED=$2; local at=$3 sig=$4; shift 4
  echo "== $CASE (seed $SEED)" >&2
  start_fed "$CASE" "$SEED" "$@"
  rm -rf "$WORK/cache"
  touch "$WORK/perchd.log"
  local log0; log0=$(wc -l < "$WORK/perchd.log")
  # shellcheck disable=SC2086  # CASE_PERCHD_ARGS: this case's perchd flags, split on spaces
  bench_mount "$WORK/cache" "$M" ${CASE_PERCHD_ARGS:-}
  local cpu0; cpu0=$(bench_cpu_ticks "$PERCHD_PID")
  nstat -n
  local cmd=true
  [[ $sig != - ]] && cmd=$(signal_cmd "$sig")
  local sum; sum=$(python3 "$WORK/reader.py" "$M" "$DATA" "$WORK/order.txt" "$READERS" \
    "$WORK/reads-$CASE-$SEED.tsv" "$at" "$cmd")
  local cpu1; cpu1=$(bench_cpu_ticks "$PERCHD_PID")
  local retrans; retrans=$(nstat -az TcpRetransSegs | awk '/TcpRetransSegs/ { print $2 }')
  echo "$CASE seed $SEED: TCP segments retransmitted (whole machine) during the reads: $retrans" >> "$DETAIL"
  local st; st=$(stats)
  python3 -c 'import json, sys; s = json.loads(sys.argv[1]); print("%s seed %s: digests verified %d, mismatches %d, origin fallbacks %d" % (sys.argv[2], sys.argv[3], s.get("digests_verified", 0), s.get("digest_mismatches", 0), s.get("origin_fallbacks", 0)))' \
    "$st" "$CASE" "$SEED" >> "$DETAIL"
  bench_tcpcount_stop
  local w; w=$(wire)
  # What the servers logged: errors and crashes in each xrootd.log.
  local xlog
  # (xrootd -n NAME writes DIR/NAME/xrootd.log for -l DIR/xrootd.log)
  for xlog in $(find "$WORK/fed-$CASE-$SEED" -name xrootd.log 2>/dev/null); do
    echo "$CASE seed $SEED: $(basename "$(dirname "$xlog")") xrootd.log: $(wc -l < "$xlog") lines," \
      "$(grep -ciE 'segv|signal|abort|crash|core dump' "$xlog" || true) crash lines," \
      "$(grep -ciE 'error|fail' "$xlog" || true) error lines" >> "$DETAIL"
  done
  bench_umount "$M"
  stop_fed
  tail -n +"$((log0 + 1))" "$WORK/perchd.log" > "$WORK/perchd-$CASE-$SEED.log"
  [[ -n ${LOGDIR:-} ]] && mkdir -p "$LOGDIR" && cp "$WORK/perchd-$CASE-$SEED.log" "$WORK/$CASE-$SEED.err" \
    "$WORK/reads-$CASE-$SEED.tsv" "$LOGDIR/" && cp "$WORK/tcpcount.pcap" "$LOGDIR/$CASE-$SEED.pcap" && cp "$WORK/tcpcount.err" "$LOGDIR/$CASE-$SEED.tcpdump.err"
  local warns; warns=$(grep -ciE 'warn|error' "$WORK/perchd-$CASE-$SEED.log" || true)
  # XCache can crash on its own under load (docs/quirks.md): say so.
  sed -n 's/^perch-devfed: \(.*\) died (\(.*\)).*/\1 died (\2)/p' "$WORK/$CASE-$SEED.err" |
    while read -r line; do echo "$CASE seed $SEED: $line" >> "$DETAIL"; done
  local row
  row=$(python3 - "$CASE" "$SEED" "$DELIVERED" "$sum" "$st" "$w" "$cpu0" "$cpu1" "$TICK" "$warns" <<'PY'
import json, sys
case, seed, delivered, s, st, w, c0, c1, tick, warns = sys.argv[1:]
s, st, delivered = json.loads(s), json.loads(st), int(delivered)
wire = int(w.split()[0])
cpu = (int(c1) - int(c0)) / int(tick)
ev = ""
if "event_s" in s:
    ev = " | signal at %.1f s: %d reads in flight or started within 5 s, max %.2f s, %d over 1 s; the rest took %.1f s" % (
        s["event_s"], s["near_reads"], s["near_max_s"], s["near_over_1s"], s["after_event_s"])
print("\t".join(str(x) for x in [case, seed, "%.4f" % (wire / delivered),
    "%.4f" % (st["bytes_from_network"] / delivered), st["failovers"], st["resumes"],
    st["range_gets"], s["failed"] + s["mismatched"] + s["missing_in_listing"] + s["listing_errors"],
    "%.2f" % s["read_s"], "%.3f" % s["p50_s"], "%.2f" % s["p99_s"], "%.2f" % s["max_s"],
    "%.2f" % cpu, "%.2f" % (cpu / (delivered / 1e9)), warns, " ".join(w.split()[1:]) + ev]))
PY
)
  echo "$row" >> "$RESULTS"
  echo "$CASE seed $SEED: $sum" >> "$DETAIL"
  echo "$CASE seed $SEED: prefetch $(json 'd["prefetch"]' <<< "$st")" >> "$DETAIL"
  echo "$row" >&2
  if ! awk -F'\t' '{ exit !($8 == 0) }' <<< "$row"; then
    echo "!! $CASE seed $SEED: failed reads; perchd log kept" >&2
    cp "$WORK/perchd-$CASE-$SEED.log" "$OUTDIR/faults-$STAMP-$CASE-$SEED.perchd.log"
    grep -v $'\tok\t' "$WORK/reads-$CASE-$SEED.tsv" > "$OUTDIR/faults-$STAMP-$CASE-$SEED.failed.tsv" || true
  fi
}

# run_curl SEED: each file by curl through the director, retrying from byte 0.
run_curl() {
  CASE=curl SEED=$1
  echo "== curl, cut $FAULT (seed $SEED)" >&2
  start_fed curl "$SEED" --fault-cut "$FAULT"
  local director; director=$(sed -n 's/^director: //p' "$WORK/curl-$SEED.out")
  rm -rf "$WORK/curl-out"; mkdir -p "$WORK/curl-out"
  awk -v d="$director/bench/" -v o="$WORK/curl-out/" \
    '{ f = $0; gsub("/", "_", f); print "url = \"" d $0 "\"\noutput = \"" o f "\"" }' \
    "$WORK/order.txt" > "$WORK/curl.cfg"
  local t0; t0=$(now)
  curl -sL --parallel --parallel-max "$READERS" --retry 5 --retry-all-errors --retry-delay 0 \
    -K "$WORK/curl.cfg" 2> "$WORK/curl.err" || true
  local s; s=$(since "$t0")
  local bad=0
  while read -r f; do
    cmp -s "$DATA/$f" "$WORK/curl-out/${f//\//_}" || bad=$((bad + 1))
  done < "$WORK/order.txt"
  bench_tcpcount_stop
  local w; w=$(wire)
  stop_fed
  local row
  row=$(printf 'curl\t%s\t%.4f\t-\t-\t-\t-\t%d\t%.2f\t-\t-\t-\t-\t-\t-\t%s' "$SEED" \
    "$(echo "${w%% *} / $DELIVERED" | bc -l)" "$bad" "$s" "${w#* }")
  echo "$row" >> "$RESULTS"
  echo "$row" >&2
}

STAMP=$(date -u +%Y-%m-%d)
OUTDIR=${OUTDIR:-$ROOT/bench/results}
mkdir -p "$OUTDIR"
NFILES=$(wc -l < "$WORK/order.txt")
AT=$((NFILES * 4 / 10))
for SEED in $SEEDS; do
  for c in $CASES; do
    case $c in
      base) run_perch base "$SEED" 0 - $NOFAULT ;;
      cut) run_perch cut "$SEED" 0 - --fault-cut "$FAULT" ;;
      reset) run_perch reset "$SEED" 0 - --fault-reset "$FAULT" ;;
      stall) run_perch stall "$SEED" 0 - --fault-stall "$STALL" ;;
      kill) run_perch kill "$SEED" "$AT" KILL $NOFAULT ;;
      stop) run_perch stop "$SEED" "$AT" STOP $NOFAULT ;;
      kill2) run_perch kill2 "$SEED" "$AT" KILL2 $NOFAULT ;;
      digests) CASE_PERCHD_ARGS=--no-verify-digests run_perch digests "$SEED" 0 - $NOFAULT ;;
      corrupt1) run_perch corrupt1 "$SEED" 0 - --fault-corrupt 0.01 ;;
      corrupt20) run_perch corrupt20 "$SEED" 0 - --fault-corrupt 0.2 ;;
      nostored) run_perch nostored "$SEED" 0 - --no-stored-digests $NOFAULT ;;
      curl) run_curl "$SEED" ;;
      *) echo "unknown case $c" >&2; exit 2 ;;
    esac
  done
done

# Report
TXT=$OUTDIR/faults-$STAMP.txt
CPU=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
{
  echo "Fault economy, $STAMP, $(nproc) cores ($CPU), $(free -g | awk '/Mem:/{print $2}') GiB RAM, loopback."
  echo "$NFILES files, $DELIVERED bytes ($SMALL_FILES of ~110 KB, $LARGE_FILES of $LARGE_MB MiB, $LARGE2_MB MiB), one shuffled"
  echo "order, $READERS readers, each file compared byte-exact; perch-devfed --caches $CACHES; cold perch per run."
  echo "cut/reset: $FAULT of origin+cache response bodies; stall: $STALL; kill/stop: the busiest cache"
  echo "signalled after $AT files. wire/deliv: bytes the origin and caches delivered to perch's sockets"
  echo "(tcpdump: last ACK less first, per connection; HTTP headers and listings included) / bytes read;"
  echo "net/deliv: perch's bytes_from_network / bytes read. servers: MB/connections per server."
  echo "Targets: cut -> wire/deliv <= 1.02 (less the base run's overhead) and no failed read; kill/stop -> no failed read."
  echo
  printf '%-6s %4s %9s %9s %5s %5s %6s %6s %7s %6s %6s %6s %6s %8s %5s  %s\n' case seed wire/deliv \
    net/deliv fovers resume gets failed read_s p50_s p99_s max_s cpu_s cpu_s/GB warns servers
  while IFS=$'\t' read -r -a f; do
    printf '%-6s %4s %9s %9s %5s %5s %6s %6s %7s %6s %6s %6s %6s %8s %5s  %s\n' "${f[@]:0:15}" "${f[15]:-}"
  done < "$RESULTS"
  echo
  cat "$DETAIL"
  echo
  [[ -s $WORK/events.log ]] && { echo "signals:"; cat "$WORK/events.log"; }
} > "$TXT"
cat "$TXT"
echo "wrote $TXT" >&2
awk -F'\t' '$3 != "-" { printf "\"%s/%s\" %s %s\n", $1, $2, $3, ($12 == "-" ? 0 : $12) }' "$RESULTS" \
  > "$WORK/plot.dat"
gnuplot <<GP
set terminal pngcairo size 1100,500 font ",10"
set output "$OUTDIR/faults-$STAMP.png"
set title "Fault economy ($STAMP, $(nproc) cores, loopback, $CACHES caches): bytes fetched / delivered and slowest read"
set style data histograms
set style fill solid 0.8 border -1
set ylabel "fetched / delivered"
set yrange [0.95:1.05]
set y2label "slowest read (s)"
set y2range [0:35]
set ytics nomirror
set y2tics
set xtics rotate by -30
set key top left
set arrow from graph 0, first 1.02 to graph 1, first 1.02 nohead dt 2 lc rgb "red"
plot "$WORK/plot.dat" using 2:xtic(1) title "fetched/delivered (target <= 1.02, dashed)" axes x1y1, \
  '' using 3 title "slowest read, s" axes x1y2
GP
echo "wrote $OUTDIR/faults-$STAMP.png" >&2
