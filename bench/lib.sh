# Shared by the bench/ scripts (source it after `cd` to the repository root):
# tool installation, a work directory with cleanup, the ImageNet-like data set,
# perch-devfed, and small timing helpers. Needs root (FUSE, drop_caches).

ROOT=$PWD
BIN=${PERCH_BIN:-$ROOT/build/bin}

# bench_setup TAG PACKAGE... : checks the build, installs missing Debian
# packages, makes $WORK (removed on exit with everything mounted or started).
bench_setup() {
  local tag=$1; shift
  [[ -x $BIN/perchd && -x $BIN/perchctl && -x $BIN/perch-devfed && -x $BIN/perch-bench-read ]] || {
    echo "build first: cmake --build --preset release" >&2
    exit 1
  }
  local need=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || need+=("$p")
  done
  if ((${#need[@]})); then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
  fi
  WORK=$(mktemp -d "/tmp/perch-$tag-XXXXXX")
  chmod 755 "$WORK"
  MOUNTS=()
  PIDS=()
  trap bench_cleanup EXIT INT TERM
}

bench_cleanup() {
  for m in "${MOUNTS[@]}"; do fusermount3 -u -z "$m" 2>/dev/null || true; done
  pkill -f "perchd --foreground --cache-dir $WORK" 2>/dev/null || true
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}

# bench_data SMALL_FILES LARGE_MB: $DATA/imagenet (files of 90-130 KB in 10
# class directories) and $DATA/large.bin; sets DATA and SMALL_BYTES.
bench_data() {
  echo "== data: $1 files of ~110 KB, one $2 MiB file" >&2
  DATA=$WORK/data
  mkdir -p "$DATA/imagenet"
  python3 - "$DATA/imagenet" "$1" <<'PY'
import os, random, sys
root, n = sys.argv[1], int(sys.argv[2])
rng = random.Random(1)
for i in range(n):
    d = os.path.join(root, "n%08d" % (i % 10))
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "img_%06d.JPEG" % i), "wb") as f:
        f.write(rng.randbytes(rng.randint(90_000, 130_000)))
PY
  head -c $(($2 << 20)) /dev/urandom > "$DATA/large.bin"
  chmod -R a+rX "$DATA"
  SMALL_BYTES=$(du -sb --apparent-size "$DATA/imagenet" | cut -f1)
}

# bench_devfed NAME [perch-devfed flags...]: serves $DATA at /bench; sets
# FED (the federation URL) and ORIGIN (the origin's URL as clients see it).
bench_devfed() {
  local name=$1; shift
  "$BIN/perch-devfed" --export /bench="$DATA" "$@" > "$WORK/$name.out" 2> "$WORK/$name.err" &
  PIDS+=($!)
  for _ in $(seq 300); do grep -q '^ready' "$WORK/$name.out" 2>/dev/null && break; sleep 0.1; done
  FED=$(sed -n 's/^federation: //p' "$WORK/$name.out")
  ORIGIN=$(sed -n 's/^origin \/bench: \([^ ]*\).*/\1/p' "$WORK/$name.out")
  [[ -n $FED && -n $ORIGIN ]] || { cat "$WORK/$name.err" >&2; exit 1; }
}

# bench_mount CACHE_DIR MOUNTPOINT [perchd flags...]; the quota is $CACHE_SIZE (20G).: mounts $FED/bench with
# perchd (control socket $WORK/ctl.sock) and waits until it serves.
bench_mount() {
  local cache=$1 mp=$2; shift 2
  mkdir -p "$mp"
  # shellcheck disable=SC2086  # PERCHD_ARGS: extra flags for every bench mount, split on spaces
  "$BIN/perchd" --foreground --cache-dir "$cache" --cache-size "${CACHE_SIZE:-20G}" --control "unix:$WORK/ctl.sock" "$@" ${PERCHD_ARGS:-} \
    "$FED/bench" "$mp" 2>> "$WORK/perchd.log" &
  PERCHD_PID=$!
  for _ in $(seq 200); do mountpoint -q "$mp" && break; sleep 0.05; done
  MOUNTS+=("$mp")
}

# bench_umount MOUNTPOINT: unmounts and waits for that perchd to exit.
bench_umount() {
  fusermount3 -u "$1"
  wait "$PERCHD_PID" 2>/dev/null || true
}

# bench_xrootdfs MOUNTPOINT ORIGIN_URL: mounts the origin's /bench with XRootD's own FUSE client.
bench_xrootdfs() {
  mkdir -p "$1"
  xrootdfs "$1" -o "rdr=root://127.0.0.1:${2##*:}//bench,nworkers=8" 2>> "$WORK/xrootdfs.log"
  MOUNTS+=("$1")
  for _ in $(seq 100); do mountpoint -q "$1" && break; sleep 0.05; done
}

# bench_rclone MOUNTPOINT ORIGIN_URL: mounts the origin's /bench with rclone (webdav, full VFS cache).
bench_rclone() {
  mkdir -p "$1" "$WORK/rclone-cache"
  rclone mount ":webdav:" "$1" --webdav-url "$2/bench/" --read-only --vfs-cache-mode full \
    --cache-dir "$WORK/rclone-cache" --dir-cache-time 1h --attr-timeout 1h --daemon 2>> "$WORK/rclone.log"
  MOUNTS+=("$1")
  for _ in $(seq 100); do mountpoint -q "$1" && break; sleep 0.05; done
}

drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
now() { date +%s.%N; }
since() { echo "$(now) - $1" | bc -l; }

# bench_tcpcount_start NAME:PORT...: captures, with tcpdump on loopback, the
# TCP headers of what clients send to each local PORT; bench_tcpcount_read then
# tells how many bytes each server's answers delivered to its clients: per
# connection, the last acknowledgement number less the first, so bytes
# retransmitted (loopback drops them under load) are counted once and
# bytes sent but never received not at all. HTTP headers are included.
bench_tcpcount_start() {
  TCPCOUNT_NAMES=("$@")
  local filter="" np
  for np in "$@"; do filter+="${filter:+ or }dst port ${np#*:}"; done
  tcpdump -i lo -n -U --immediate-mode -s 96 -B 16384 -Z root -w "$WORK/tcpcount.pcap" "tcp and ($filter)" \
    2> "$WORK/tcpcount.err" &
  TCPCOUNT_PID=$!
  for _ in $(seq 100); do grep -q listening "$WORK/tcpcount.err" && break; sleep 0.05; done
}

# bench_tcpcount_read -> "NAME BYTES CONNECTIONS" per port given to
# bench_tcpcount_start; stops the capture (and says if it missed packets: on
# lo the filter sees each packet twice, going out and coming in). bench_tcpcount_peek: the same so
# far, the capture going on.
bench_tcpcount_read() {
  bench_tcpcount_stop
  awk '/captured/ { c = $1 } /received by filter/ { r = $1 } /dropped by kernel/ { d = $1 }
    END { if (2 * c < r || d) printf "tcpcount: %d of %d packets captured, %d dropped\n", c, r / 2, d }' \
    "$WORK/tcpcount.err" >&2
  bench_tcpcount_peek
}
bench_tcpcount_peek() {
  python3 - "$WORK/tcpcount.pcap" "${TCPCOUNT_NAMES[@]}" <<'PY2'
import struct, sys
path, names = sys.argv[1], dict(a.split(":")[::-1] for a in sys.argv[2:])
data = open(path, "rb").read()
end = "<" if data[:4] in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1") else ">"
link = {1: 14, 113: 16, 276: 20, 0: 4}[struct.unpack(end + "I", data[20:24])[0]]
conns, done, off = {}, [], 24  # (sport, dport) -> [first ack, furthest ack]
while off + 16 <= len(data):
    incl = struct.unpack(end + "I", data[off + 8:off + 12])[0]
    if off + 16 + incl > len(data): break  # being written
    pkt, off = data[off + 16 + link:off + 16 + incl], off + 16 + incl
    ihl = (pkt[0] & 15) * 4
    sport, dport, _, ack, _, flags = struct.unpack(">HHIIBB", pkt[ihl:ihl + 14])
    key = (sport, dport)
    if flags & 0x02:  # a new connection on this pair of ports
        if key in conns: done.append((dport, conns.pop(key)))
        continue
    if not flags & 0x10: continue
    c = conns.setdefault(key, [ack, 0])
    c[1] = max(c[1], (ack - c[0]) % (1 << 32))
done += [(k[1], c) for k, c in conns.items()]
total = {p: [0, 0] for p in names}
for port, c in done:
    t = total[str(port)]
    t[0] += c[1]
    t[1] += 1
for port, name in names.items():
    print(name, *total[port])
PY2
}

bench_tcpcount_stop() {
  [[ -n ${TCPCOUNT_PID:-} ]] || return 0
  sleep 1.5  # what the kernel holds for tcpdump is lost when it stops
  kill -INT "$TCPCOUNT_PID" 2>/dev/null || true
  # wait only works in the shell that started it, not in $(...)
  for _ in $(seq 200); do kill -0 "$TCPCOUNT_PID" 2>/dev/null || break; sleep 0.05; done
  wait "$TCPCOUNT_PID" 2>/dev/null || true
  TCPCOUNT_PID=
}

# bench_cpu_ticks PID... -> utime + stime of those processes in clock ticks (getconf CLK_TCK).
bench_cpu_ticks() {
  local p
  for p in "$@"; do cat "/proc/$p/stat"; done | awk '{ t += $14 + $15 } END { print t }'
}

# bench_cpu_ns PID -> the time PID's live threads have spent on a CPU, in ns
# (schedstat: exact, where bench_cpu_ticks counts 10 ms ticks).
bench_cpu_ns() {
  cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{ t += $1 } END { printf "%d\n", t }'
}

# bench_threads PID -> "tid comm ns" for each live thread of PID: its time on a CPU in ns
# (/proc/.../schedstat: exact, where utime and stime come in 10 ms ticks that a thread
# busy for less than one shows as 0); comm as the threads named themselves (perch-net,
# perch-disk, perch-fuse, ...).
bench_threads() {
  local t
  for t in /proc/"$1"/task/*; do
    echo "${t##*/} $(tr ' ' _ < "$t/comm" 2>/dev/null) $(cut -d' ' -f1 "$t/schedstat" 2>/dev/null)"
  done
}

# bench_run_cpu CMD... -> "wall_s user_s sys_s" of CMD and everything it waited for.
bench_run_cpu() {
  python3 - "$@" <<'PY'
import resource, subprocess, sys, time
t0 = time.monotonic()
subprocess.run(sys.argv[1:], check=True)
w = time.monotonic() - t0
r = resource.getrusage(resource.RUSAGE_CHILDREN)
print(f"{w:.4f} {r.ru_utime:.4f} {r.ru_stime:.4f}")
PY
}

# Small-file readers, run as CMD... DIR LIST READERS (LIST: one path a line, under DIR):
# BENCH_READ_CAT: `xargs -P READERS -n 25 cat`, a process for every 25 files, whose fork
#   and exec cost more CPU than a local read of a 100 KB file (kept: earlier results used it);
# BENCH_READ_THREADS: perch-bench-read, one process with READERS threads that open, read and
#   close, as a data loader's workers do (and as curl --parallel is one process).
BENCH_READ_CAT=(bash -c 'cd "$1" && tr "\n" "\0" < "$2" | xargs -0 -P "$3" -n 25 cat > /dev/null' small)
BENCH_READ_THREADS=(bash -c 'exec "$0" -C "$1" -j "$3" "$2" > /dev/null' "$BIN/perch-bench-read")
# BENCH_READ_LISTED: the same after listing the files' directories, as a data loader's dataset
# scan does (on the mount, readdirplus then gives the names' attributes: no LOOKUP per file).
BENCH_READ_LISTED=(bash -c 'exec "$0" --list-dirs -C "$1" -j "$3" "$2" > /dev/null' "$BIN/perch-bench-read")
# bench_reader KIND VAR: sets array VAR to the reader KIND names (threads, listed or cat).
bench_reader() {
  local -n reader_cmd=$2
  case $1 in
    threads) reader_cmd=("${BENCH_READ_THREADS[@]}") ;;
    listed) reader_cmd=("${BENCH_READ_LISTED[@]}") ;;
    cat) reader_cmd=("${BENCH_READ_CAT[@]}") ;;
    *) echo "READER is threads, listed or cat, not '$1'" >&2; exit 2 ;;
  esac
}

# bench_fuse_counts SOCKET -> "op=count ..." of the FUSE requests the perchd of SOCKET (run
# from $BIN) has answered so far.
bench_fuse_counts() {
  "$BIN/perchctl" --socket "$1" stats --json |
    python3 -c '
import json, sys
d = json.load(sys.stdin)["fuse_ops"]  # a list; a map before perchctl 0.1.0 of 2026-11-23 (PERCH_BIN)
ops = {o["op"]: o["latency"]["count"] for o in d} if isinstance(d, list) else {k: v["count"] for k, v in d.items()}
print(" ".join("%s=%d" % kv for kv in sorted(ops.items())))'
}

# bench_settle BLOCKS: waits (up to 60 s) until the perchd of $WORK/ctl.sock has
# stored BLOCKS blocks, so that the CPU of a cold pass includes writing what it fetched.
bench_settle() {
  for _ in $(seq 600); do
    (($("$BIN/perchctl" --socket "$WORK/ctl.sock" stats --json |
      python3 -c 'import json,sys; print(json.load(sys.stdin)["cached_blocks"])') >= $1)) && return
    sleep 0.1
  done
  echo "settle: fewer than $1 blocks stored after 60 s" >&2
}
