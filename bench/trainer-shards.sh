#!/usr/bin/env bash
# perch-train's loader (--loader-only) reading the same images as an ImageFolder tree and as
# WebDataset tar shards, cold through a perch mount behind an emulated WAN link (perch-devfed
# --wan-rtt WAN_RTT ms --wan-rate WAN_MBIT Mbit/s; this kernel has no netem). Every run starts
# with an empty perch cache and a dropped page cache; perch-train hints each epoch's files (the
# tree's images in sample order, or the shards in the order the streams read them), as it does
# by itself on a perch mount. Tree and shards alternate (A B A B ...), RUNS runs each; reports
# images/s, perch-train's CPU per image and perchd's CPU per image (utime + stime), and the
# load average. Writes bench/results/trainer-shards-<date>-rtt<RTT>-<RATE>mbit.md.
#
# Needs root (FUSE, drop_caches). Run after a build:  sudo bench/trainer-shards.sh
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
bench_setup trainer-shards bc
[[ -x $BIN/perch-train && -x $BIN/perch-synth-imagenet ]] || { echo "build the trainer first" >&2; exit 1; }

CLASSES=${CLASSES:-10}
PER_CLASS=${PER_CLASS:-200}
SHARDS=${SHARDS:-16}
RUNS=${RUNS:-2}
WORKERS=${WORKERS:-$(nproc)}
BATCH=${BATCH:-64}
WAN_RTT=${WAN_RTT:-20}
WAN_MBIT=${WAN_MBIT:-1000}
SHARD_STREAMS=${SHARD_STREAMS:-4}
SHUFFLE_BUFFER=${SHUFFLE_BUFFER:-1000}
HINTS=${HINTS:-1}  # 0: --hint-command '' (perch's read-ahead and directory prefetch only)
N=$((CLASSES * PER_CLASS))

DATA=$WORK/data
"$BIN/perch-synth-imagenet" --out "$DATA" --classes "$CLASSES" --per-class "$PER_CLASS" \
  --shards "$SHARDS" | tee "$WORK/synth.txt" >&2
chmod -R a+rX "$DATA"
bench_devfed wan --wan-rtt "$WAN_RTT" --wan-rate "$WAN_MBIT"
M=$WORK/mnt
last=$(printf '%06d' $((SHARDS - 1)))

# run KIND -> "images/s train_cpu_ms_per_image perchd_cpu_ms_per_image"
run() {
  local kind=$1 args
  rm -rf "$WORK/cache"
  drop
  bench_mount "$WORK/cache" "$M"
  if [[ $kind == tree ]]; then
    args=(--data-dir "$M/train")
  else
    args=(--data-dir "$M/shards" --data-shards "train-{000000..$last}.tar" --epoch-samples "$N"
          --classes "$CLASSES" --shard-streams "$SHARD_STREAMS"
          --shuffle-buffer "$SHUFFLE_BUFFER")
  fi
  [[ $HINTS == 1 ]] || args+=(--hint-command "")
  local t0; t0=$(bench_cpu_ticks "$PERCHD_PID")
  PERCH_SOCKET=$WORK/ctl.sock "$BIN/perch-train" "${args[@]}" --loader-only --workers "$WORKERS" \
    --batch-size "$BATCH" --log-level warn --summary-json "$WORK/s.json" >/dev/null
  local t1; t1=$(bench_cpu_ticks "$PERCHD_PID")
  bench_umount "$M"
  python3 - "$WORK/s.json" "$t0" "$t1" "$(getconf CLK_TCK)" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
d = (int(sys.argv[3]) - int(sys.argv[2])) / int(sys.argv[4])
print("%.0f %.2f %.2f %d" % (s["images_per_second"], s["cpu_ms_per_image"],
                             1e3 * d / max(s["images"], 1), s["skipped_images"]))
PY
}

RESULTS=$WORK/results.txt
for i in $(seq "$RUNS"); do
  for kind in tree shards; do
    r=$(run "$kind")
    echo "$kind $r" >> "$RESULTS"
    echo "run $i $kind: images/s, train CPU ms/image, perchd CPU ms/image, skipped: $r" >&2
  done
done
load=$(cut -d' ' -f1-3 /proc/loadavg)

out=bench/results/trainer-shards-$(date -u +%F)-$SHARDS-rtt$WAN_RTT-${WAN_MBIT}mbit-streams$SHARD_STREAMS-buffer$SHUFFLE_BUFFER$([[ $HINTS == 1 ]] || echo -nohints).md
{
  echo "# perch-train --loader-only: ImageFolder tree vs tar shards, cold through perch behind a WAN, $(date -u +%F)"
  echo
  echo "Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')), load average after the runs $load."
  echo "Data: $(sed -n 's/^wrote \([0-9]* JPEGs, [0-9.]* MB\).*/\1/p' "$WORK/synth.txt" | head -n 1) (perch-synth-imagenet, $CLASSES classes x $PER_CLASS), and the same training images as $SHARDS WebDataset shards."
  echo "Link: perch-devfed --wan-rtt $WAN_RTT --wan-rate $WAN_MBIT (ms, Mbit/s). perch cache empty and page cache dropped before every run; hints $([[ $HINTS == 1 ]] && echo "on (perch-train's default on a mount)" || echo off); $WORKERS loader workers, batch $BATCH, one epoch; runs alternate tree, shards."
  echo
  echo "| data | run | images/s | perch-train CPU ms/image | perchd CPU ms/image | skipped |"
  echo "|---|---|---|---|---|---|"
  awk '{ k[$1]++; printf "| %s | %d | %s | %s | %s | %s |\n", $1, k[$1], $2, $3, $4, $5 }' "$RESULTS"
  echo
  echo "Command: \`sudo bench/trainer-shards.sh\` (CLASSES=$CLASSES PER_CLASS=$PER_CLASS SHARDS=$SHARDS SHARD_STREAMS=$SHARD_STREAMS SHUFFLE_BUFFER=$SHUFFLE_BUFFER HINTS=$HINTS RUNS=$RUNS WAN_RTT=$WAN_RTT WAN_MBIT=$WAN_MBIT)."
} > "$out"
cat "$out"
