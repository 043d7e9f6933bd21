#!/usr/bin/env bash
# perch-train's loader alone (--loader-only): decode + RandomResizedCrop(224) + flip + normalize
# into float batches, on an ImageNet-like tree of JPEGs (perch-synth-imagenet: long side
# 400-600 px, ~105 KB at q90), read from
#   local       the local directory;
#   perch       the same tree through a perch mount (perch-devfed origin on loopback) whose disk
#               cache holds every file (one full pass before measuring);
# each in two states:
#   page cache  files already in the kernel's page cache (steady state of a multi-epoch run
#               whose data fits in RAM): PASSES epochs per run;
#   dropped     page cache dropped before each run, one epoch: every byte comes from the local
#               disk, or through FUSE from perchd's disk cache;
# with 1 worker thread and with one per core; best of RUNS runs; images per CPU-second (the
# cost, which other work on the machine disturbs less than the rate) and a perf profile (PERF=0
# skips it).
# Writes bench/results/trainer-loader-<date>.md.
#
# Needs root for the perch rows (FUSE, drop_caches); without root, or without perchd and
# perch-devfed, only the local rows are measured. Run from the repository root after a build:
#   cmake --build --preset release && sudo bench/trainer-loader.sh
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${PERCH_BIN:-$PWD/build/bin}
CLASSES=${CLASSES:-10}
PER_CLASS=${PER_CLASS:-200}
PASSES=${PASSES:-3}
RUNS=${RUNS:-3}
BATCH=${BATCH:-64}
CORES=$(nproc)
[[ -x $BIN/perch-train && -x $BIN/perch-synth-imagenet ]] || { echo "build first: cmake --build --preset release" >&2; exit 1; }

WORK=$(mktemp -d /tmp/perch-trainer-bench-XXXXXX)
chmod 755 "$WORK"
DEVFED_PID=""
PERCHD_PID=""
cleanup() {
  set +e
  [[ -n $PERCHD_PID ]] && kill -TERM "$PERCHD_PID" 2>/dev/null && wait "$PERCHD_PID" 2>/dev/null
  mountpoint -q "$WORK/mnt" 2>/dev/null && fusermount3 -u -z "$WORK/mnt"
  [[ -n $DEVFED_PID ]] && kill -TERM "$DEVFED_PID" 2>/dev/null && wait "$DEVFED_PID" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

"$BIN/perch-synth-imagenet" --out "$WORK/data" --classes "$CLASSES" --per-class "$PER_CLASS" | tee "$WORK/synth.txt"
chmod -R a+rX "$WORK/data"

# best_of DIR WORKERS DROP -> "images/s images_per_cpu_second cores_busy" of the fastest of RUNS
# runs. CPU: perch-train's user + system time while it loads (its summary's cpu_seconds: all
# threads, start-up excluded), over the loading's wall time for cores busy.
best_of() {
  local dir=$1 workers=$2 drop=$3 best=0 line="0 0 0" ips passes=$PASSES
  for _ in $(seq "$RUNS"); do
    if [[ $drop == 1 ]]; then sync; echo 1 >/proc/sys/vm/drop_caches; passes=1; fi
    "$BIN/perch-train" --data-dir "$dir" --loader-only --epochs "$passes" --workers "$workers" \
      --batch-size "$BATCH" --log-level warn --summary-json "$WORK/s.json" >/dev/null
    ips=$(sed -n 's/.*"images_per_second": \([0-9.]*\).*/\1/p' "$WORK/s.json" | head -n 1)
    if awk -v a="$best" -v b="$ips" 'BEGIN { exit !(b > a) }'; then
      best=$ips
      line=$(/usr/bin/python3 -c '
import json, sys
s = json.load(open(sys.argv[1]))
cpu = s.get("cpu_seconds", 0)
print("%.0f %s %s" % (s["images_per_second"], "%.0f" % (s["images"] / cpu) if cpu else "?",
                      "%.2f" % (cpu / s["seconds"]) if cpu else "?"))' "$WORK/s.json")
    fi
  done
  echo "$line"
}

declare -A R
root=0
[[ $(id -u) -eq 0 ]] && root=1
cat "$WORK/data/train"/*/* >/dev/null  # local files into the page cache
for w in 1 "$CORES"; do R[local,cached,$w]=$(best_of "$WORK/data/train" "$w" 0); done
if [[ $root == 1 ]]; then
  for w in 1 "$CORES"; do R[local,dropped,$w]=$(best_of "$WORK/data/train" "$w" 1); done
fi

perch=0
if [[ $root == 1 && -x $BIN/perchd && -x $BIN/perch-devfed ]]; then
  perch=1
  "$BIN/perch-devfed" --export "/imagenet=$WORK/data" >"$WORK/devfed.out" 2>"$WORK/devfed.log" &
  DEVFED_PID=$!
  for _ in $(seq 600); do grep -qx ready "$WORK/devfed.out" 2>/dev/null && break; sleep 0.1; done
  FED=$(sed -n 's/^federation: //p' "$WORK/devfed.out" | head -n 1)
  mkdir -p "$WORK/mnt" "$WORK/cache"
  "$BIN/perchd" --foreground --cache-dir "$WORK/cache" --cache-size 4G "$FED/imagenet" "$WORK/mnt" \
    >"$WORK/perchd.log" 2>&1 &
  PERCHD_PID=$!
  for _ in $(seq 300); do mountpoint -q "$WORK/mnt" && break; sleep 0.1; done
  cat "$WORK/mnt/train"/*/* >/dev/null  # fill perchd's disk cache (and the page cache)
  for w in 1 "$CORES"; do R[perch,cached,$w]=$(best_of "$WORK/mnt/train" "$w" 0); done
  for w in 1 "$CORES"; do R[perch,dropped,$w]=$(best_of "$WORK/mnt/train" "$w" 1); done
fi

# Reference: the same pipeline in Python (Pillow + torchvision transforms, what a DataLoader
# worker runs), one process, malloc tuned as the ML anchors note recommends, page cache warm.
py=""
if /usr/bin/python3 -c 'import torch, torchvision' 2>/dev/null; then
  cat >"$WORK/py.py" <<'PYEOF'
import sys, time, torch, torchvision.transforms as T
from torchvision.datasets import ImageFolder
torch.set_num_threads(1)
t = T.Compose([T.RandomResizedCrop(224), T.RandomHorizontalFlip(), T.ToTensor(),
               T.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])
ds = ImageFolder(sys.argv[1], transform=t)
for i in range(50):
    ds[i]
n = min(len(ds), 1000)
t0 = time.time()
for i in range(n):
    ds[i]
print(f"{n / (time.time() - t0):.0f}")
PYEOF
  py=0
  for _ in $(seq "$RUNS"); do
    v=$(MALLOC_MMAP_THRESHOLD_=268435456 MALLOC_TRIM_THRESHOLD_=1073741824 /usr/bin/python3 "$WORK/py.py" "$WORK/data/train")
    (( v > py )) && py=$v
  done
fi

# Where a loader's CPU goes: perf over one more local run with every core busy.
if [[ ${PERF:-1} == 1 && $root == 1 ]] && command -v perf >/dev/null; then
  perf record -q -F 999 -g -o "$WORK/perf.data" -- "$BIN/perch-train" --data-dir "$WORK/data/train" \
    --loader-only --epochs "$PASSES" --workers "$CORES" --batch-size "$BATCH" --log-level warn \
    >/dev/null 2>&1 || true
  {
    echo "Self time by shared object:"
    perf report -i "$WORK/perf.data" --no-children -g none --sort dso --stdio 2>/dev/null |
      grep -E '^ +[0-9]' | head -8 || true
    echo "Self time by symbol (top 12):"
    perf report -i "$WORK/perf.data" --no-children -g none --sort dso,sym --stdio 2>/dev/null |
      grep -E '^ +[0-9]' | head -12 || true
  } >"$WORK/profile.txt"
fi

out=bench/results/trainer-loader-$(date -u +%F).md
{
  echo "# perch-train --loader-only, $(date -u +%F)"
  echo
  echo "Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), $(. /etc/os-release; echo "$PRETTY_NAME")."
  echo "Data: $(sed -n 's/^wrote \([0-9]* JPEGs, [0-9.]* MB ([0-9]* KB each on average)\).*/\1/p' "$WORK/synth.txt"), perch-synth-imagenet (long side 400-600 px, q90)."
  echo "Pipeline: read file, libjpeg-turbo ROI decode (+ DCT scaling when the crop allows), RandomResizedCrop(224) + flip + normalize into float batches of $BATCH; best of $RUNS runs ($PASSES epochs per run with the page cache warm, 1 after dropping it)."
  echo
  echo "| source | page cache | workers | images/s | images/s per worker | images per CPU-second | cores busy |"
  echo "|---|---|---|---|---|---|---|"
  for state in cached dropped; do
    for src in local perch; do
      for w in 1 "$CORES"; do
        [[ -n ${R[$src,$state,$w]:-} ]] || continue
        read -r ips per_cpu busy <<<"${R[$src,$state,$w]}"
        echo "| $src | $state | $w | $ips | $(( ips / w )) | $per_cpu | $busy |"
      done
    done
  done
  if [[ -n $py ]]; then
    echo "| Python: Pillow + torchvision transforms, 1 process | cached | 1 | $py | $py | | |"
  fi
  echo
  echo "images per CPU-second: images over perch-train's user + system time while loading (all"
  echo "threads); cores busy: that CPU time over the loading's wall time. Other work on the machine"
  echo "(load $(cut -d' ' -f1-3 /proc/loadavg) at the end) lowers images/s more than images per CPU-second."
  if [[ -s $WORK/profile.txt ]]; then
    echo
    echo "Profile (perf, local, page cache warm, $CORES workers, $PASSES epochs):"
    echo
    echo '```'
    cat "$WORK/profile.txt"
    echo '```'
  fi
  echo
  echo "Command: \`sudo bench/trainer-loader.sh\` (CLASSES=$CLASSES PER_CLASS=$PER_CLASS PASSES=$PASSES RUNS=$RUNS BATCH=$BATCH)."
} >"$out"
cat "$out"
