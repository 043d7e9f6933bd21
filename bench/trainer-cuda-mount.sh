#!/usr/bin/env bash
# perch-train on a GPU, reading through perch (issue 33), in one device call: builds perch-train
# against the machine's PyTorch (as bench/trainer-cuda.sh), unpacks perch's runtime from the
# bundle (bench/perch-bundle.sh), synthesizes an ImageNet-like tree, serves it with perch-devfed
# behind an emulated WAN (--wan-rtt), mounts it with perchd and trains ResNet-50 at 224 px for two
# epochs through the mount (epoch 0 cold, its order hinted to perchd by perch-train; epoch 1 warm),
# then two epochs from the local tree in the page cache; meanwhile nvidia-smi dmon samples the GPU
# and perchd's and perch-train's CPU time is read from /proc at every epoch's end. Then the loader
# alone (images per CPU-second) and SIGTERM at 1, 2, 3, 5 and 8 s after start (exit 85 or 0).
#
#   bench/trainer-cuda-mount.sh                # on the GPU machine (root), from the repository root
#   bench/trainer-cuda-mount.sh --device cpu   # dry run on a Debian 12 machine: small counts,
#                                              # ResNet-18 at 64 px, TRAIN_BIN (no build)
#
# Env: BUNDLE (default .bundle), OUT (default ./trainer-cuda-mount-out), WORK (default
# /tmp/perch-gpu, removed at the end), TRAIN_BIN (a built perch-train: no build), CLASSES,
# PER_CLASS, ARCH, IMAGE_SIZE, BATCH, EPOCHS (2), WAN_RTT (ms, default 20), SIGTERM_AT.
# $OUT gets log.txt (everything), results.txt (the table), summary.json (all figures), build.txt,
# dmon.txt, servers.txt (perch-devfed's and perchd's logs), perchd-stats.json.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
DEVICE=cuda
[[ ${1:-} == --device ]] && DEVICE=${2:?cpu or cuda}
if [[ $DEVICE == cpu ]]; then
  : "${CLASSES:=4}" "${PER_CLASS:=48}" "${ARCH:=resnet18}" "${IMAGE_SIZE:=64}" "${BATCH:=32}"
  : "${SIGTERM_AT:=1 3}" "${LOG_EVERY:=2}"
else
  # 51,200 images of ~105 KB (5.3 GB): an epoch of ~15 s at an H100's ~3,500 images/s, and 200
  # whole batches (a smaller last batch is a new shape: cuDNN's benchmark runs again, seconds).
  : "${CLASSES:=100}" "${PER_CLASS:=512}" "${ARCH:=resnet50}" "${IMAGE_SIZE:=224}" "${BATCH:=256}"
  : "${SIGTERM_AT:=1 2 3 5 8}" "${LOG_EVERY:=20}"
fi
: "${EPOCHS:=2}" "${WAN_RTT:=20}" "${MAX_RUNTIME:=120}" "${DEADLINE:=420}"
BUNDLE=$(readlink -f "${BUNDLE:-.bundle}")
OUT=${OUT:-$PWD/trainer-cuda-mount-out}
WORK=${WORK:-/tmp/perch-gpu}
mkdir -p "$OUT"
rm -rf "$WORK"
mkdir -p "$WORK"
chmod 755 "$WORK"
exec > >(tee -a "$OUT/log.txt") 2>&1
T0=$(date +%s)
step() { echo; echo "== $(date -u +%T) (+$(($(date +%s) - T0)) s) $*"; }
HZ=$(getconf CLK_TCK)
ticks() { awk '{print $14 + $15}' "/proc/$1/stat" 2>/dev/null || echo 0; }
# Seconds left before DEADLINE (s after the start): the steps after training are skipped when the
# device call's limit is near, so that the results are still written.
left() { echo $((DEADLINE - $(date +%s) + T0)); }

DEVFED_PID="" PERCHD_PID="" DMON_PID=""
cleanup() {
  [[ -n $DMON_PID ]] && kill "$DMON_PID" 2>/dev/null
  if [[ -n $PERCHD_PID ]]; then
    kill -TERM "$PERCHD_PID" 2>/dev/null  # perchd unmounts on SIGTERM
    for _ in $(seq 50); do kill -0 "$PERCHD_PID" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$PERCHD_PID" 2>/dev/null
  fi
  mountpoint -q "$WORK/mnt" 2>/dev/null && { fusermount3 -u -z "$WORK/mnt" || umount -l "$WORK/mnt"; }
  if [[ -n $DEVFED_PID ]]; then
    kill -TERM "$DEVFED_PID" 2>/dev/null  # stops its XRootD servers
    for _ in $(seq 50); do kill -0 "$DEVFED_PID" 2>/dev/null || break; sleep 0.2; done
    kill -KILL "$DEVFED_PID" 2>/dev/null
  fi
  cat "$WORK/devfed.err" "$WORK/perchd.log" 2>/dev/null | tail -n 5000 > "$OUT/servers.txt"
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

step "machine"
head -2 /etc/os-release; uname -r
lscpu | grep -E '^(Model name|CPU\(s\)|Thread|Socket)'
free -g | head -2
if [[ $DEVICE == cuda ]]; then
  nvidia-smi -L
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv,noheader
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
fi

step "perch's runtime from the bundle, FUSE, user xrootd"
tar -C "$WORK" -xJf "$BUNDLE/perch-runtime.tar.xz" || exit 1
export PATH=$WORK/perch/bin:$PATH
if ! id xrootd > /dev/null 2>&1; then
  useradd --system --no-create-home --shell /usr/sbin/nologin xrootd ||
    { echo "xrootd:x:990:" >> /etc/group
      echo "xrootd:x:990:990::/nonexistent:/usr/sbin/nologin" >> /etc/passwd; }
fi
id xrootd
echo "fuse in /proc/filesystems: $(grep -w fuse /proc/filesystems | tr -s '\t ' ' ' || echo no)"
if [[ ! -c /dev/fuse ]] && grep -qw fuse /proc/filesystems; then
  mknod -m 666 /dev/fuse c 10 229 && echo "created /dev/fuse"
fi
ls -l /dev/fuse 2>&1

step "perch-train"
if [[ -n ${TRAIN_BIN:-} ]]; then
  TRAIN=$TRAIN_BIN
  echo "given: $TRAIN"
else
  TD=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
  P=$WORK/debs
  mkdir -p "$P" "$WORK/gloo"
  for f in "$BUNDLE"/debs/*.deb; do dpkg -x "$f" "$P"; done
  tar -C "$WORK/gloo" -xJf "$BUNDLE/gloo-include.tar.xz"
  # Debian's libjpeg-turbo targets name /usr/lib files; its jconfig.h sits in the multiarch
  # directory, which must come before the system's (Ubuntu's is libjpeg 8's: another ABI).
  sed -i "s#\"/usr/lib/x86_64-linux-gnu/#\"$P/usr/lib/x86_64-linux-gnu/#g" \
    "$P"/usr/lib/x86_64-linux-gnu/cmake/libjpeg-turbo/*.cmake
  # What Debian's libarchive needs and this system lacks (libxml2 with ICU 72, ...) comes from
  # perch's bundle, linked into the trainer's library directory.
  L=$P/usr/lib/x86_64-linux-gnu
  LD_LIBRARY_PATH=$L ldd "$L/libarchive.so.13" | awk '/not found/ {print $1}' | while read -r m; do
    ln -sf "$WORK/perch/lib/$m" "$L/$m" && echo "from the bundle: $m"
  done
  export LD_LIBRARY_PATH=$L
  cmake -S trainer -B "$WORK/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPERCH_BUILD_TESTS=OFF \
    -DPERCH_TORCH_DIR="$TD/share/cmake/Torch" -DPERCH_GLOO_INCLUDE_DIR="$WORK/gloo" \
    -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" -DCMAKE_PREFIX_PATH="$P/usr" \
    -DCMAKE_CXX_FLAGS="-isystem $P/usr/include/x86_64-linux-gnu" > "$OUT/build.txt" 2>&1 ||
    { tail -30 "$OUT/build.txt"; exit 1; }
  grep -E "fmt|gloo|Found Torch" "$OUT/build.txt"
  ninja -C "$WORK/build" perch-train >> "$OUT/build.txt" 2>&1 ||
    { grep -E "error|FAILED" "$OUT/build.txt" | head -40; exit 1; }
  TRAIN=$WORK/build/bin/perch-train
  ldd "$TRAIN" | grep "not found" && exit 1
  echo "built $TRAIN"
fi
# perch-train finds perchctl (for its hints) on PATH; the control socket is this perchd's.
export PERCH_SOCKET=$WORK/ctl.sock

step "data: $CLASSES classes x $PER_CLASS JPEGs"
perch-synth-imagenet --out "$WORK/data" --classes "$CLASSES" --per-class "$PER_CLASS" || exit 1
chmod -R a+rX "$WORK/data"
IMAGES=$((CLASSES * PER_CLASS))
s=$(date +%s.%N)
find "$WORK/data/train" -type f -print0 | xargs -0 -P 8 cat > /dev/null  # in the page cache
echo "read once from the page cache: $(awk -v s="$s" -v e="$(date +%s.%N)" -v n=$IMAGES \
  'BEGIN {printf "%.0f files/s", n / (e - s)}')"

step "perch-devfed --wan-rtt $WAN_RTT, perchd"
perch-devfed --export "/imagenet=$WORK/data" --wan-rtt "$WAN_RTT" > "$WORK/devfed.out" \
  2> "$WORK/devfed.err" &
DEVFED_PID=$!
for _ in $(seq 300); do grep -qx ready "$WORK/devfed.out" 2>/dev/null && break; sleep 0.1; done
cat "$WORK/devfed.out"
grep -qx ready "$WORK/devfed.out" || { tail -20 "$WORK/devfed.err"; exit 1; }
FED=$(sed -n 's/^federation: //p' "$WORK/devfed.out")
mkdir -p "$WORK/mnt"
perchd --foreground --cache-dir "$WORK/cache" --cache-size 50G --control "unix:$WORK/ctl.sock" \
  "$FED/imagenet" "$WORK/mnt" > "$WORK/perchd.log" 2>&1 &
PERCHD_PID=$!
for _ in $(seq 300); do mountpoint -q "$WORK/mnt" && break
  kill -0 "$PERCHD_PID" 2>/dev/null || break; sleep 0.1; done
MOUNTED=0
if mountpoint -q "$WORK/mnt"; then
  MOUNTED=1
  echo "mounted $FED/imagenet at $WORK/mnt: $(ls "$WORK/mnt")"
else
  echo "NO MOUNT: perchd said:"; tail -5 "$WORK/perchd.log"
fi

if [[ $DEVICE == cuda ]]; then
  nvidia-smi dmon -s u -d 1 -o DT > "$OUT/dmon.txt" 2>&1 &
  DMON_PID=$!
fi

# train NAME DATA_DIR [perch-train flags]: $EPOCHS epochs; marks.NAME gets a line at the start and
# at every epoch's end: label, wall time, perchd's and perch-train's CPU ticks.
train() {
  local name=$1 data=$2; shift 2
  rm -rf "$WORK/ck-$name"
  "$TRAIN" --data-dir "$data" --arch "$ARCH" --device "$DEVICE" --epochs "$EPOCHS" \
    --batch-size "$BATCH" --image-size "$IMAGE_SIZE" --checkpoint-dir "$WORK/ck-$name" \
    --summary-json "$WORK/$name.json" --log-every "$LOG_EVERY" --max-runtime "$MAX_RUNTIME" "$@" \
    > "$WORK/$name.log" 2>&1 &
  local tpid=$! seen=0 n
  echo "start $(date +%s.%N) $(ticks "$PERCHD_PID") $(ticks $tpid)" > "$WORK/marks.$name"
  while kill -0 $tpid 2>/dev/null; do
    n=$(grep -c ' done: ' "$WORK/$name.log")
      if ((n > seen)); then
      seen=$n
      echo "epoch$((n - 1)) $(date +%s.%N) $(ticks "$PERCHD_PID") $(ticks $tpid)" >> "$WORK/marks.$name"
    fi
    sleep 0.2
  done
  wait $tpid
  local rc=$?
  cat "$WORK/$name.log"
  echo "exit $rc"
}

# The first CUDA run of the machine reads the CUDA libraries (GBs) from disk and the GPU's clocks
# ramp up: a few steps first, so that the mount's epoch 0 does not pay for that alone.
step "warm-up: 10 steps on the local tree (CUDA's libraries into the page cache)"
"$TRAIN" --data-dir "$WORK/data/train" --arch "$ARCH" --device "$DEVICE" --max-steps 10 \
  --batch-size "$BATCH" --image-size "$IMAGE_SIZE" --checkpoint-dir "$WORK/ck-warmup" \
  --log-every 5 --hint-command '' 2>&1 | grep -E "step|finished"

if ((MOUNTED)); then
  step "$ARCH on $DEVICE through the mount: epoch 0 cold (hinted), then warm"
  train mount "$WORK/mnt/train"
  perchctl stats --json > "$OUT/perchd-stats.json"
  perchctl stats
fi

step "$ARCH on $DEVICE from the local tree (page cache)"
train local "$WORK/data/train"

step "the loader alone on the local tree: images per CPU-second"
TIMEFORMAT='%U %S %R'
(($(left) > 40)) && { time "$TRAIN" --data-dir "$WORK/data/train" --loader-only --batch-size "$BATCH" \
    --image-size "$IMAGE_SIZE" --max-steps $((IMAGES / BATCH / 2)) \
    --summary-json "$WORK/loader.json" > "$WORK/loader.log" 2>&1; } 2> "$WORK/loader.time"
tail -2 "$WORK/loader.log"; echo "user sys wall: $(cat "$WORK/loader.time")"

step "SIGTERM at ${SIGTERM_AT// /, } s after start ($( ((MOUNTED)) && echo mount || echo local))"
SDATA=$WORK/data/train
((MOUNTED)) && SDATA=$WORK/mnt/train
: > "$WORK/sigterm.txt"
for d in $SIGTERM_AT; do
  (($(left) > d + 25)) || { echo "SIGTERM at $d s: skipped, $(left) s left"; continue; }
  rm -rf "$WORK/ck-term"
  "$TRAIN" --data-dir "$SDATA" --arch "$ARCH" --device "$DEVICE" --epochs "$EPOCHS" \
    --batch-size "$BATCH" --image-size "$IMAGE_SIZE" --checkpoint-dir "$WORK/ck-term" \
    --log-every 1 > "$WORK/term.log" 2>&1 &
  pid=$!
  sleep "$d"
  kill -TERM $pid
  s=$(date +%s.%N)
  wait $pid
  rc=$?
  echo "$d $rc $(awk -v s="$s" -v e="$(date +%s.%N)" 'BEGIN {printf "%.1f", e - s}') \
$(grep -c ' step ' "$WORK/term.log")" >> "$WORK/sigterm.txt"
  echo "SIGTERM at $d s: exit $rc (85: checkpointed), steps logged $(grep -c ' step ' "$WORK/term.log")"
  grep -E "checkpoint|rror|fault" "$WORK/term.log" | tail -2
done

step "results"
GPU=$( [[ $DEVICE == cuda ]] && nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
CPU="$(lscpu | sed -n 's/^Model name: *//p' | head -1), $(nproc) cores"
python3 - "$WORK" "$OUT" "$HZ" "$DEVICE" "$ARCH" "$IMAGE_SIZE" "$BATCH" "$IMAGES" "$WAN_RTT" \
  "${GPU:-none}" "$CPU" <<'PY' | tee "$OUT/results.txt"
import json, os, sys, datetime
work, out, hz, device, arch, size, batch, images, rtt, gpu_name, cpu_name = sys.argv[1:]
hz = float(hz)
def load(p):
    try:
        with open(p) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None
def marks(name):
    try:
        rows = [l.split() for l in open(os.path.join(work, "marks." + name))]
    except OSError:
        return []
    return [(r[0], float(r[1]), float(r[2]), float(r[3])) for r in rows]
dmon = []  # (epoch seconds, sm %)
try:
    col = None
    for line in open(os.path.join(out, "dmon.txt")):
        f = line.split()
        hdr = line.lstrip("#").split()
        if line.startswith("#") and "sm" in hdr:
            col = hdr.index("sm")  # Date Time gpu sm mem ...
            continue
        if line.startswith("#") or col is None or len(f) <= col:
            continue
        t = datetime.datetime.strptime(f[0] + f[1], "%Y%m%d%H:%M:%S").timestamp()
        if f[col].isdigit():
            dmon.append((t, int(f[col])))
except OSError:
    pass
import re
def steady(name):
    # Per epoch: images/s over its log windows after the first (which holds cuDNN's benchmark of
    # the run's first batches, or the previous epoch's end and checkpoint), from the log lines.
    out, prev = {}, 0
    try:
        lines = open(os.path.join(work, name + ".log")).read().splitlines()
    except OSError:
        return out
    for l in lines:
        m = re.match(r"epoch (\d+) step (\d+)/\d+ .* ([\d.]+) images/s data wait", l)
        if not m:
            continue
        e, st, rate = int(m[1]), int(m[2]), float(m[3])
        n = (st - prev) * int(batch)
        prev = st
        w = out.setdefault(e, [])
        w.append((n, n / rate if rate > 0 else 0.0))
    return {e: sum(n for n, _ in w[1:]) / max(sum(t for _, t in w[1:]), 1e-9)
            for e, w in out.items() if len(w) > 1}
def gpu(a, b):
    v = [u for t, u in dmon if a <= t <= b]
    return sum(v) / len(v) if v else float("nan")
res = {"device": device, "gpu": gpu_name, "cpu": cpu_name, "arch": arch, "image_size": int(size),
       "batch": int(batch), "images": int(images), "wan_rtt_ms": float(rtt), "runs": {}}
print(f"GPU {gpu_name}; CPU {cpu_name}")
print(f"{arch}, {size} px, batch {batch}, {device}; {images} training images; WAN RTT {rtt} ms")
print(f"{'run':<7}{'epoch':>6}{'images/s':>10}{'steady':>8}{'data wait':>11}{'GPU util':>10}"
      f"{'perchd CPU':>12}{'perchd ms/img':>14}{'trainer CPU':>13}{'loss':>8}")
for name in ("mount", "local"):
    s = load(os.path.join(work, name + ".json"))
    m = marks(name)
    sd = steady(name)
    if s is None:
        continue
    rows = []
    for i, e in enumerate(s["run"].get("epochs", [])):
        a, b = (m[i], m[i + 1]) if i + 1 < len(m) else (None, None)
        row = dict(e)
        if i in sd:
            row["steady_images_per_second"] = sd[i]
        if a:
            secs = b[1] - a[1]
            row["perchd_cores"] = (b[2] - a[2]) / hz / secs
            row["perchd_ms_per_image"] = 1000 * (b[2] - a[2]) / hz / max(e["images"], 1)
            row["trainer_cores"] = (b[3] - a[3]) / hz / secs
            row["gpu_util"] = gpu(a[1], b[1])
        rows.append(row)
        label = "cold" if name == "mount" and i == 0 else "warm" if name == "mount" else "page cache"
        f = lambda k, fmt: (fmt % row[k]) if k in row and row[k] == row[k] else "-"
        print(f"{name:<7}{i:>6}{e['images_per_second']:>10.0f}"
              f"{f('steady_images_per_second', '%.0f'):>8}"
              f"{100 * e['data_wait_fraction']:>10.1f}%{f('gpu_util', '%.0f%%'):>10}"
              f"{f('perchd_cores', '%.2f cores'):>12}{f('perchd_ms_per_image', '%.3f'):>14}"
              f"{f('trainer_cores', '%.2f cores'):>13}{e['loss']:>8.3f}  {label}")
    res["runs"][name] = {"summary": s, "epochs": rows}
lo = load(os.path.join(work, "loader.json"))
try:
    u, sy, wall = map(float, open(os.path.join(work, "loader.time")).read().split())
except (OSError, ValueError):
    u = sy = wall = float("nan")
if lo:
    ips = lo["images"] / max(lo["cpu_seconds"], 1e-9)
    res["loader"] = dict(lo, process_user_s=u, process_sys_s=sy, process_wall_s=wall,
                         images_per_cpu_second=ips)
    print(f"loader alone (local, page cache, {lo['workers']} workers): "
          f"{lo['images_per_second']:.0f} images/s, {ips:.0f} images per CPU-second while "
          f"loading ({lo['images']} images; the whole process, start-up and scan included: "
          f"{u:.1f} s user + {sy:.1f} s sys)")
try:
    res["sigterm"] = [dict(zip(("after_s", "exit", "exit_took_s", "steps"), l.split()))
                      for l in open(os.path.join(work, "sigterm.txt"))]
    print("SIGTERM (after s: exit code, s to exit, steps logged): " + ", ".join(
        f"{t['after_s']}: {t['exit']}, {t['exit_took_s']} s, {t['steps']}" for t in res["sigterm"]))
except OSError:
    pass
json.dump(res, open(os.path.join(out, "summary.json"), "w"), indent=1)
PY
ok=1
while read -r d rc _; do [[ $rc == 85 || $rc == 0 ]] || ok=0; done < "$WORK/sigterm.txt"
((ok)) || echo "FAIL: a SIGTERM run did not exit 85 or 0"
echo "total $(($(date +%s) - T0)) s"
((ok))
