# Shared by the bench/ scripts (source it after `cd` to the repository root):
# tool installation, a work directory with cleanup, the ImageNet-like data set,
# perch-devfed, and small timing helpers. Needs root (FUSE, drop_caches).

ROOT=$PWD
BIN=$ROOT/build/bin

# bench_setup TAG PACKAGE... : checks the build, installs missing Debian
# packages, makes $WORK (removed on exit with everything mounted or started).
bench_setup() {
  local tag=$1; shift
  [[ -x $BIN/perchd && -x $BIN/perchctl && -x $BIN/perch-devfed ]] || {
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

# bench_mount CACHE_DIR MOUNTPOINT [perchd flags...]: mounts $FED/bench with
# perchd (control socket $WORK/ctl.sock) and waits until it serves.
bench_mount() {
  local cache=$1 mp=$2; shift 2
  mkdir -p "$mp"
  "$BIN/perchd" --foreground --cache-dir "$cache" --cache-size 20G --control "unix:$WORK/ctl.sock" "$@" \
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
