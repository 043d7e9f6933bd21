#!/usr/bin/env bash
# What a file costs (issue 14): CPU per file and per MB, side by side in one run.
#
# Serves SMALL_FILES files of ~110 KB (10 class dirs) and one LARGE_MB file
# from a perch-devfed XRootD origin on loopback and reads them
#   - straight from the origin with curl (keep-alive, READERS transfers in
#     parallel): the CPU a plain HTTP client spends on the same GETs;
#   - through perch: cold (new cache, page cache dropped), from its disk cache
#     (remounted, page cache dropped) and from the page cache (read again); cold
#     once more by the other reader, and once with the directories listed first
#     (as a data loader's dataset scan: no LOOKUP per file);
#   - the large file also from local disk (page cache dropped), and once more
#     with the disk taken out: perch's cache dir and a local copy on tmpfs.
# For each pass: wall time, perchd's CPU (utime+stime of all its threads from
# /proc/PID/stat, before/after), the same per thread by name (perch-net,
# perch-disk, perch-fuse, ...: the busiest one thread bounds one perchd's rate
# however many cores a node has), the reader's CPU (its children's rusage), the
# FUSE requests perchd answered (perchctl stats --json: fuse_ops counts), and
# the machine's load. Then one more cold pass of the small files under
# `strace -c -f` gives perchd's system calls per cold file (strace slows it:
# its time is not reported).
# Writes bench/results/cost-<date>[-TAG].txt.
#
# Needs root (FUSE, drop_caches). Run after a build:  sudo bench/cost.sh
# Env: SMALL_FILES (2000), LARGE_MB (1024), READERS (32), TAG (file suffix),
# PERCH_BIN (build/bin), STRACE (1: the strace pass; 0: skip it), ENDPOINT (1: the
# same reads through perchd's HTTP endpoint with curl; 0: skip them), PERF (1: one
# more cold pass, cache on tmpfs, under `perf record -g`, summarized (also by
# subsystem: bench/tools/perf-subsystems.py) into
# cost-<date>[-TAG]-profile.txt; 0: skip it), SWEEP (1: cold passes with 1, 4, 16,
# 64 readers and with 4, 16, 64 FUSE threads), XROOTDFS (1: a cold pass through
# XRootD's own FUSE client, its CPU per file), READER (threads: perch-bench-read;
# cat: xargs cat; see SMALL_READER).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
bench_setup cost curl bc strace xrootd-fuse
SHM=$WORK/shm
cost_cleanup() {  # the tmpfs (after the perch mount on it), then what bench_setup made
  fusermount3 -u -z "$WORK/perch" 2>/dev/null || true
  mountpoint -q "$WORK/ext4" && umount -l "$WORK/ext4"
  mountpoint -q "$SHM" && umount -l "$SHM"
  bench_cleanup
}
trap cost_cleanup EXIT INT TERM

SMALL_FILES=${SMALL_FILES:-2000}
LARGE_MB=${LARGE_MB:-1024}
READERS=${READERS:-32}
STRACE=${STRACE:-1}
bench_data "$SMALL_FILES" "$LARGE_MB"
(cd "$DATA" && find imagenet -type f -name '*.JPEG' | sort) > "$WORK/files.txt"
bench_devfed devfed
CTL=$WORK/ctl.sock
M=$WORK/perch
TCK=$(getconf CLK_TCK)
OUT=$WORK/report.txt

# perchd_cpu -> "user_ticks sys_ticks" of perchd (all threads)
perchd_cpu() { awk '{ print $14, $15 }' "/proc/$PERCHD_PID/stat"; }
load() { cut -d' ' -f1 /proc/loadavg; }
# under_tracer CACHE_DIR TRACER...: one cold pass of the small files while
# `TRACER... -p <perchd>` watches perchd (stopped with SIGINT once the blocks are stored).
under_tracer() {
  local cache=$1 tracer
  shift
  bench_mount "$cache" "$M"
  drop
  "$@" -p "$PERCHD_PID" &
  tracer=$!
  PIDS+=("$tracer")
  sleep 1
  "${SMALL_READER[@]}" "$M" "$WORK/files.txt" "$READERS"
  bench_settle "$SMALL_FILES"
  kill -INT "$tracer"
  wait "$tracer" 2>/dev/null || true
  bench_umount "$M"
}
# SMALL_READER DIR LIST N: reads every small file under DIR with N readers
# (bench/lib.sh): READER=threads (one process, N threads, as a data loader and
# as curl --parallel) or cat (xargs cat, a process per 25 files: the reader of
# the results before the sixth round of "Cost per file", 2026-11-25); the other
# one reads one more cold pass, for comparison.
bench_reader "${READER:-threads}" SMALL_READER
OTHER=$([[ ${READER:-threads} == cat ]] && echo threads || echo cat)
bench_reader "$OTHER" OTHER_READER

# pass NAME UNITS UNIT_NAME MB READER_CMD...: runs READER_CMD, with perchd's CPU
# and FUSE requests before and after (after SETTLE blocks are stored, if set);
# appends a line to the report.
pass() {
  local name=$1 units=$2 uname=$3 mb=$4; shift 4
  local l0 u0 s0 f0 t0 rc u1 s1 f1 t1
  l0=$(load)
  read -r u0 s0 < <(perchd_cpu)
  f0=$([[ ${DAEMON:-perchd} == perchd ]] && bench_fuse_counts "$CTL" || true)
  t0=$(bench_threads "$PERCHD_PID")
  rc=$(bench_run_cpu "$@")
  [[ -z ${SETTLE:-} ]] || bench_settle "$SETTLE"
  read -r u1 s1 < <(perchd_cpu)
  f1=$([[ ${DAEMON:-perchd} == perchd ]] && bench_fuse_counts "$CTL" || true)
  t1=$(bench_threads "$PERCHD_PID")
  python3 - "$name" "$units" "$uname" "$mb" "$rc" "$u0" "$s0" "$u1" "$s1" "$TCK" "$l0" "$f0" "$f1" "${DAEMON:-perchd}" "$t0" "$t1" <<'PY' | tee -a "$OUT"
import sys
name, units, uname, mb, rc, u0, s0, u1, s1, tck, load, f0, f1, daemon, t0, t1 = sys.argv[1:]
units, mb, tck = float(units), float(mb), int(tck)
w, ru, rs = map(float, rc.split())
pu, ps = (int(u1) - int(u0)) / tck, (int(s1) - int(s0)) / tck
per = 1e6 / units
c0 = dict(x.split("=") for x in f0.split())
c1 = dict(x.split("=") for x in f1.split())
ops = {k: int(v) - int(c0.get(k, 0)) for k, v in c1.items() if int(v) - int(c0.get(k, 0)) > 0}
ops_s = " ".join(f"{k} {v / units:.2f}" for k, v in sorted(ops.items()))
rate = f"{units / w:6.0f} {uname}/s" if uname == "file" else " " * 13
print(f"{name:<28} {w:7.2f} s {rate} {mb / w:7.0f} MB/s | "
      f"{daemon:<8} {(pu + ps) * per:5.0f} us/{uname} (usr {pu * per:.0f} sys {ps * per:.0f}) "
      f"{(pu + ps) * 1e6 / mb:6.0f} us/MB | reader {(ru + rs) * per:6.0f} us/{uname} "
      f"{(ru + rs) * 1e6 / mb:6.0f} us/MB | load {load}")
if ops_s:
    print(f"{'':<28} FUSE requests per {uname}: {ops_s}")
# Per thread, by name (time on a CPU): the busiest one thread bounds one perchd's rate on any
# number of cores.
def threads(text):
    out = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) == 3:
            out[f[0]] = (f[1], int(f[2]))
    return out
a, b = threads(t0), threads(t1)
if uname == "file" and b:
    by_name, busiest = {}, ("", 0)
    for tid, (comm, ns) in b.items():
        d = ns - a.get(tid, (comm, 0))[1]
        by_name[comm] = by_name.get(comm, 0) + d
        busiest = max(busiest, (comm, d), key=lambda x: x[1])
    parts = [f"{c} {d / 1e3 / units:.0f}" for c, d in sorted(by_name.items(), key=lambda x: -x[1])
             if d / 1e3 / units >= 0.5]
    top = busiest[1] / 1e3 / units
    ceiling = f" (one {daemon}: at most {1e6 / top:,.0f} files/s on any number of cores)" if top > 0 else ""
    print(f"{'':<28} {daemon} by thread, us per file: {', '.join(parts)}; busiest one thread: "
          f"{busiest[0]} {top:.0f} us{ceiling}")
PY
}
# plain NAME UNITS UNIT_NAME MB CMD...: a reader with no perchd (curl, local disk).
plain() {
  local name=$1 units=$2 uname=$3 mb=$4 l0 rc; shift 4
  l0=$(load)
  rc=$(bench_run_cpu "$@")
  python3 - "$name" "$units" "$uname" "$mb" "$rc" "$l0" <<'PY' | tee -a "$OUT"
import sys
name, units, uname, mb, rc, load = sys.argv[1:]
units, mb = float(units), float(mb)
w, ru, rs = map(float, rc.split())
per = 1e6 / units
rate = f"{units / w:6.0f} {uname}/s" if uname == "file" else " " * 13
print(f"{name:<28} {w:7.2f} s {rate} {mb / w:7.0f} MB/s | "
      f"{'':>46} | reader {(ru + rs) * per:6.0f} us/{uname} {(ru + rs) * 1e6 / mb:6.0f} us/MB "
      f"(usr {ru * per:.0f} sys {rs * per:.0f}) | load {load}")
PY
}

SMB=$(echo "$SMALL_BYTES / 1000000" | bc -l)
LMB=$(echo "$LARGE_MB * 1.048576" | bc -l)
LGB=$(echo "$LMB / 1000" | bc -l)
{
  echo "What a file costs, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores ($(lscpu | sed -n 's/^Model name: *//p' | head -1)), $(free -g | awk '/Mem:/{print $2}') GiB RAM, loopback."
  echo "Binaries: $BIN (worktree at $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- daemon fuse || echo ', with changes'))."
  echo "$SMALL_FILES files ($(printf %.0f "$SMB") MB) read by $READERS parallel readers (${READER:-threads}: $([[ ${READER:-threads} == threads ]] && echo "perch-bench-read, one process with $READERS threads" || echo "xargs -n 25 cat") / curl --parallel); one $LARGE_MB MiB file read by dd bs=1M."
  echo "CPU: perchd = utime+stime of all its threads; reader = the reader processes' rusage (perch-bench-read/cat/dd/curl, their kernel time included)."
  echo "load = 1-minute load average at the start of the pass (other work on the machine)."
  echo
} > "$OUT"

echo "== curl straight from the origin" >&2
awk -v o="$ORIGIN/bench/" '{ print "url = \"" o $0 "\"\noutput = \"/dev/null\"" }' "$WORK/files.txt" > "$WORK/curl.cfg"
drop
plain "curl, origin (cold disk)" "$SMALL_FILES" file "$SMB" \
  curl -s --no-progress-meter --parallel --parallel-max "$READERS" -K "$WORK/curl.cfg"
plain "curl, origin (page cache)" "$SMALL_FILES" file "$SMB" \
  curl -s --no-progress-meter --parallel --parallel-max "$READERS" -K "$WORK/curl.cfg"
# What the reader itself costs: the same files from local page cache, no FUSE.
plain "local page cache, small" "$SMALL_FILES" file "$SMB" "${SMALL_READER[@]}" "$DATA" "$WORK/files.txt" "$READERS"
plain "local page cache, small ($OTHER)" "$SMALL_FILES" file "$SMB" "${OTHER_READER[@]}" "$DATA" "$WORK/files.txt" "$READERS"

echo "== perch, small files" >&2
rm -rf "$WORK/cache"
bench_mount "$WORK/cache" "$M"
drop
SETTLE=$SMALL_FILES pass "perch cold" "$SMALL_FILES" file "$SMB" "${SMALL_READER[@]}" "$M" "$WORK/files.txt" "$READERS"
bench_umount "$M"
bench_mount "$WORK/cache" "$M"
drop
pass "perch disk cache" "$SMALL_FILES" file "$SMB" "${SMALL_READER[@]}" "$M" "$WORK/files.txt" "$READERS"
pass "perch page cache" "$SMALL_FILES" file "$SMB" "${SMALL_READER[@]}" "$M" "$WORK/files.txt" "$READERS"
bench_umount "$M"
rm -rf "$WORK/cache"
bench_mount "$WORK/cache" "$M"
drop
SETTLE=$SMALL_FILES pass "perch cold ($OTHER)" "$SMALL_FILES" file "$SMB" "${OTHER_READER[@]}" "$M" "$WORK/files.txt" "$READERS"
bench_umount "$M"
# A data loader's way: the dataset's directories listed first (readdirplus brings the names'
# attributes, so the opens need no LOOKUP), the listing inside the pass.
bench_reader listed LISTED_READER
rm -rf "$WORK/cache"
bench_mount "$WORK/cache" "$M"
drop
SETTLE=$SMALL_FILES pass "perch cold (listed first)" "$SMALL_FILES" file "$SMB" "${LISTED_READER[@]}" "$M" "$WORK/files.txt" "$READERS"
bench_umount "$M"

# The same files through perch's HTTP endpoint (curl, as from the origin
# above): cold, from the disk cache, from the page cache; then the large file.
# endpoint_mount: mounts with the endpoint on a free port; sets EP_CFG (curl's
# list of the small files' URLs) and EP (the endpoint's base URL).
endpoint_mount() {
  bench_mount "$WORK/cache" "$M" --http 127.0.0.1:0
  EP=http://$("$BIN/perchctl" --socket "$CTL" health --json |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["http_address"])')
  EP_CFG=$WORK/curl-endpoint.cfg
  awk -v o="$EP/bench/" '{ print "url = \"" o $0 "\"\noutput = \"/dev/null\"" }' "$WORK/files.txt" > "$EP_CFG"
}
if [[ ${ENDPOINT:-1} == 1 ]]; then
  echo "== perch's HTTP endpoint, small files" >&2
  rm -rf "$WORK/cache"
  endpoint_mount
  drop
  SETTLE=$SMALL_FILES pass "endpoint cold" "$SMALL_FILES" file "$SMB" \
    curl -s --no-progress-meter --parallel --parallel-max "$READERS" -K "$EP_CFG"
  bench_umount "$M"
  endpoint_mount
  drop
  pass "endpoint disk cache" "$SMALL_FILES" file "$SMB" \
    curl -s --no-progress-meter --parallel --parallel-max "$READERS" -K "$EP_CFG"
  pass "endpoint page cache" "$SMALL_FILES" file "$SMB" \
    curl -s --no-progress-meter --parallel --parallel-max "$READERS" -K "$EP_CFG"
  bench_umount "$M"
fi

# The same cold pass with perch's cache on tmpfs: takes out what the cache's
# filesystem charges per new file (on an ext4 without a journal, inode
# allocation checks every candidate inode for a recent delete).
mkdir -p "$SHM"
mount -t tmpfs -o size=$((LARGE_MB * 2 + SMALL_BYTES / 1000000 * 2 + 512))m perch-cost "$SHM"
bench_mount "$SHM/cache" "$M"
drop
SETTLE=$SMALL_FILES pass "perch cold, tmpfs cache" "$SMALL_FILES" file "$SMB" "${SMALL_READER[@]}" "$M" "$WORK/files.txt" "$READERS"
bench_umount "$M"
rm -rf "$SHM/cache"

# And on a fresh ext4 with a journal (a loop device on a file in the tmpfs), as
# a node's local disk is usually formatted: the filesystem's own cost per new
# file without this VM's journal-less root.
if command -v mkfs.ext4 >/dev/null; then
  EXT4=$WORK/ext4
  truncate -s $((SMALL_BYTES / 1000000 * 3 + 256))M "$SHM/ext4.img"
  mkfs.ext4 -q -F "$SHM/ext4.img"
  mkdir -p "$EXT4"
  mount -o loop "$SHM/ext4.img" "$EXT4"
  bench_mount "$EXT4/cache" "$M"
  drop
  SETTLE=$SMALL_FILES pass "perch cold, ext4 cache" "$SMALL_FILES" file "$SMB" "${SMALL_READER[@]}" "$M" "$WORK/files.txt" "$READERS"
  bench_umount "$M"
  umount "$EXT4"
  rm -f "$SHM/ext4.img"
fi

# Where a cold small file's CPU goes: perf over one more cold pass (cache on
# tmpfs, so that perch's own work is not hidden under the filesystem's).
if [[ ${PERF:-1} == 1 ]] && command -v perf >/dev/null; then
  echo "== perch cold under perf record" >&2
  under_tracer "$SHM/cache" perf record -q -F 1999 --call-graph dwarf,16384 -o "$WORK/perf.data"
  rm -rf "$SHM/cache"
  PROFILE=$WORK/profile.txt
  {
    echo "perf record -F 1999 --call-graph dwarf -p <perchd> over one cold pass of $SMALL_FILES files ($READERS readers), cache on tmpfs, $(date -u '+%Y-%m-%d %H:%M UTC'), load $(load)."
    echo "Self time by shared object:"
    perf report -i "$WORK/perf.data" --no-children -g none --sort dso --stdio 2>/dev/null | grep -E '^ +[0-9]' | head -12 || true
    echo
    echo "Self time by symbol (top 40; [k] kernel, [.] user):"
    perf report -i "$WORK/perf.data" --no-children -g none --sort sym --stdio 2>/dev/null | grep -E '^ +[0-9]' | head -40 || true
    echo
    echo "Time including callees, by system call and by perch function (top 40):"
    perf report -i "$WORK/perf.data" --children -g none --sort sym --stdio 2>/dev/null |
      grep -E '^ +[0-9].*(__x64_sys_|perch::)' | head -40 || true
    echo
    echo "By subsystem (bench/tools/perf-subsystems.py):"
    perf script -i "$WORK/perf.data" -F ip,sym,dso 2>/dev/null | python3 bench/tools/perf-subsystems.py || true
  } > "$PROFILE"
fi

# Throughput and cost against the number of readers, then against perchd's
# FUSE threads (cold each time, cache on the tmpfs).
if [[ ${SWEEP:-1} == 1 ]]; then
  echo "== readers and FUSE threads" >&2
  for r in 1 4 16 64; do
    bench_mount "$SHM/cache" "$M"
    drop
    SETTLE=$SMALL_FILES pass "perch cold, $r readers" "$SMALL_FILES" file "$SMB" "${SMALL_READER[@]}" "$M" "$WORK/files.txt" "$r"
    bench_umount "$M"
    rm -rf "$SHM/cache"
  done
  for t in 4 16 64; do
    echo "fuse_threads = $t" > "$WORK/threads.toml"
    bench_mount "$SHM/cache" "$M" --config "$WORK/threads.toml"
    drop
    SETTLE=$SMALL_FILES pass "perch cold, $t FUSE threads" "$SMALL_FILES" file "$SMB" "${SMALL_READER[@]}" "$M" "$WORK/files.txt" "$READERS"
    bench_umount "$M"
    rm -rf "$SHM/cache"
  done
fi

# XRootD's own FUSE client over the same origin, cold: its CPU per file.
if [[ ${XROOTDFS:-1} == 1 ]]; then
  echo "== xrootdfs" >&2
  bench_xrootdfs "$WORK/xrootdfs" "$ORIGIN"
  saved_pid=$PERCHD_PID
  PERCHD_PID=$(pgrep -n -f "xrootdfs $WORK/xrootdfs")
  drop
  DAEMON=xrootdfs pass "xrootdfs cold" "$SMALL_FILES" file "$SMB" "${SMALL_READER[@]}" "$WORK/xrootdfs" "$WORK/files.txt" "$READERS"
  fusermount3 -u "$WORK/xrootdfs" || true
  PERCHD_PID=$saved_pid
fi

echo "== large file" >&2
drop
plain "local disk, large" "$LGB" GB "$LMB" dd if="$DATA/large.bin" of=/dev/null bs=1M status=none
rm -rf "$WORK/cache"
bench_mount "$WORK/cache" "$M"
drop
SETTLE=$(((LARGE_MB + 3) / 4)) pass "perch cold, large" "$LGB" GB "$LMB" dd if="$M/large.bin" of=/dev/null bs=1M status=none
bench_umount "$M"
bench_mount "$WORK/cache" "$M"
drop
pass "perch disk cache, large" "$LGB" GB "$LMB" dd if="$M/large.bin" of=/dev/null bs=1M status=none
pass "perch page cache, large" "$LGB" GB "$LMB" dd if="$M/large.bin" of=/dev/null bs=1M status=none
if [[ ${ENDPOINT:-1} == 1 ]]; then
  bench_umount "$M"
  endpoint_mount
  drop
  pass "endpoint disk cache, large" "$LGB" GB "$LMB" curl -s -o /dev/null "$EP/bench/large.bin"
fi
bench_umount "$M"
drop
plain "local disk, large (again)" "$LGB" GB "$LMB" dd if="$DATA/large.bin" of=/dev/null bs=1M status=none

echo "== large file, disk taken out: perch's cache and the local copy on tmpfs" >&2
cp "$DATA/large.bin" "$SHM/large.bin"
plain "local tmpfs, large" "$LGB" GB "$LMB" dd if="$SHM/large.bin" of=/dev/null bs=1M status=none
bench_mount "$SHM/cache" "$M"
SETTLE=$(((LARGE_MB + 3) / 4)) pass "perch cold, tmpfs cache, large" "$LGB" GB "$LMB" dd if="$M/large.bin" of=/dev/null bs=1M status=none
bench_umount "$M"
bench_mount "$SHM/cache" "$M"
drop
pass "perch tmpfs cache, large" "$LGB" GB "$LMB" dd if="$M/large.bin" of=/dev/null bs=1M status=none
bench_umount "$M"
plain "local tmpfs, large (again)" "$LGB" GB "$LMB" dd if="$SHM/large.bin" of=/dev/null bs=1M status=none
rm -rf "$SHM/cache" "$SHM/large.bin"

if [[ $STRACE == 1 ]]; then
  echo "== perch cold under strace -c -f (system calls per cold file)" >&2
  rm -rf "$WORK/cache"
  under_tracer "$WORK/cache" strace -c -f -o "$WORK/strace.txt"
  {
    echo
    echo "perchd system calls per cold small file (strace -c -f over one cold pass of $SMALL_FILES files; calls, errors):"
    awk -v n="$SMALL_FILES" '$1 ~ /^[0-9.]+$/ && NF >= 5 {
        calls = $4; errs = (NF == 6 ? $5 : 0); name = $NF
        if (calls / n >= 0.01) printf "  %-18s %7.2f  %s\n", name, calls / n, (errs ? sprintf("(%.2f failed)", errs / n) : "")
      }' \
      "$WORK/strace.txt" | sort -k2 -n -r
  } | tee -a "$OUT"
fi

STAMP=$(date -u +%Y-%m-%d)
OUTDIR=${OUTDIR:-$ROOT/bench/results}
mkdir -p "$OUTDIR"
DEST=$OUTDIR/cost-$STAMP${TAG:+-$TAG}.txt
cp "$OUT" "$DEST"
echo "wrote $DEST" >&2
if [[ -n ${PROFILE:-} ]]; then
  cp "$PROFILE" "${DEST%.txt}-profile.txt"
  echo "wrote ${DEST%.txt}-profile.txt" >&2
fi
