#!/usr/bin/env bash
# A dataset larger than the cache (issue 43, item 5).
#
# For each ratio D/C in RATIOS: files of FILE_KB KiB making D = ratio x C,
# served by a perch-devfed XRootD origin on loopback, read through a cold
# perch mount with a cache of C (CACHE_MB) in EPOCHS shuffled epochs by
# READERS threads, each file's pages dropped after it is read (a dataset
# larger than the node's memory), every byte compared with the source.
# Cases: "hints" announces each epoch's order first (perchctl hint, as
# perch-train does); "nohints" does not (the cache is then least recently
# used). Reported per epoch: bytes perch fetched from the network, and that
# over D - C (what a cache that keeps what it can must fetch; 1.0 is the
# optimum for epochs after the first). Writes
# bench/results/larger-than-cache-<date>.txt and .png.
#
# Needs root (FUSE). Run after a build:  sudo bench/larger-than-cache.sh
# Env: RATIOS ("1.5 3 10"), CACHE_MB (16), FILE_KB (128), EPOCHS (3),
# READERS (4), CASES ("hints nohints").
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
bench_setup ltc gnuplot-nox bc

RATIOS=${RATIOS:-1.5 3 10}
CACHE_MB=${CACHE_MB:-16}
FILE_KB=${FILE_KB:-128}
EPOCHS=${EPOCHS:-3}
READERS=${READERS:-4}
CASES=${CASES:-hints nohints}
M=$WORK/perch
RESULTS=$WORK/results.tsv
: > "$RESULTS"

net() {
  "$BIN/perchctl" --socket "$WORK/ctl.sock" stats --json |
    python3 -c 'import json, sys; print(json.load(sys.stdin)["bytes_from_network"])'
}

cat > "$WORK/epoch.py" <<'PY'
import concurrent.futures, os, sys
mount, src, order, readers = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
files = open(order).read().split()
def one(rel):
    fd = os.open(os.path.join(mount, rel), os.O_RDONLY)
    got = b""
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            break
        got += b
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    return got == open(os.path.join(src, rel), "rb").read()
with concurrent.futures.ThreadPoolExecutor(readers) as ex:
    bad = sum(not ok for ok in ex.map(one, files))
print(bad)
PY

for ratio in $RATIOS; do
  n=$(echo "$ratio * $CACHE_MB * 1024 / $FILE_KB" | bc)
  DATA=$WORK/data-$ratio
  mkdir -p "$DATA/ds"
  python3 - "$DATA/ds" "$n" "$FILE_KB" <<'PY'
import os, random, sys
root, n, kb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = random.Random(43)
for i in range(n):
    with open(os.path.join(root, "f%06d" % i), "wb") as f:
        f.write(rng.randbytes(kb << 10))
PY
  chmod -R a+rX "$DATA"
  D=$((n * FILE_KB * 1024))
  OPT=$((D - (CACHE_MB << 20)))
  bench_devfed "fed-$ratio"
  for c in $CASES; do
    echo "== D/C $ratio ($n files), $c" >&2
    rm -rf "$WORK/cache"
    CACHE_SIZE=${CACHE_MB}M bench_mount "$WORK/cache" "$M"
    for e in $(seq "$EPOCHS"); do
      (cd "$DATA" && ls ds | sed 's|^|ds/|' | shuf --random-source=<(yes "$e")) > "$WORK/order"
      if [[ $c == hints ]]; then
        sed "s|^|$M/|" "$WORK/order" > "$WORK/order.abs"
        "$BIN/perchctl" --socket "$WORK/ctl.sock" hint --job bench --file "$WORK/order.abs" >/dev/null
      fi
      n0=$(net)
      bad=$(python3 "$WORK/epoch.py" "$M" "$DATA" "$WORK/order" "$READERS")
      n1=$(net)
      row=$(printf '%s\t%s\t%s\t%d\t%.3f\t%.3f\t%s' "$ratio" "$c" "$e" $(((n1 - n0) >> 20)) \
        "$(echo "($n1 - $n0) / $D" | bc -l)" "$(echo "($n1 - $n0) / $OPT" | bc -l)" "$bad")
      echo "$row" >> "$RESULTS"
      echo "$row" >&2
    done
    bench_umount "$M"
  done
  kill "${PIDS[-1]}" 2>/dev/null && wait "${PIDS[-1]}" 2>/dev/null || true
  rm -rf "$DATA"
done

STAMP=$(date -u +%Y-%m-%d)
OUTDIR=${OUTDIR:-$ROOT/bench/results}
mkdir -p "$OUTDIR"
TXT=$OUTDIR/larger-than-cache-$STAMP.txt
CPU=$(lscpu | sed -n 's/^Model name: *//p' | head -1)
{
  echo "A dataset larger than the cache, $STAMP, $(nproc) cores ($CPU), loopback XRootD origin."
  echo "Cache ${CACHE_MB} MiB, files of ${FILE_KB} KiB, $EPOCHS shuffled epochs, $READERS readers,"
  echo "pages dropped after each file; fetched: perch's bytes_from_network in the epoch."
  echo "x D: fetched / dataset; x (D-C): fetched / (dataset - cache), 1.0 the optimum after epoch 1."
  echo
  printf '%-5s %-8s %5s %12s %7s %9s %6s\n' D/C case epoch fetched_MiB "x D" "x (D-C)" wrong
  while IFS=$'\t' read -r -a f; do
    printf '%-5s %-8s %5s %12s %7s %9s %6s\n' "${f[@]}"
  done < "$RESULTS"
} > "$TXT"
cat "$TXT"
awk -F'\t' '$3 > 1 { key = $1 " " $2; s[key] += $6; n[key]++ }
  END { for (k in s) { split(k, a, " "); print a[1], a[2], s[k] / n[k] } }' "$RESULTS" |
  sort -n > "$WORK/plot.dat"
awk '$2 == "hints" { print $1, $3 }' "$WORK/plot.dat" > "$WORK/hints.dat"
awk '$2 == "nohints" { print $1, $3 }' "$WORK/plot.dat" > "$WORK/nohints.dat"
gnuplot <<GP
set terminal pngcairo size 900,500 font ",10"
set output "$OUTDIR/larger-than-cache-$STAMP.png"
set title "Dataset larger than the cache ($STAMP, $(nproc) cores): network bytes per epoch after the first"
set xlabel "dataset / cache"
set ylabel "fetched / (dataset - cache)"
set logscale x
set yrange [0.9:*]
set key top right
set arrow from graph 0, first 1 to graph 1, first 1 nohead dt 2 lc rgb "gray"
plot "$WORK/hints.dat" using 1:2 with linespoints title "order announced (hints)", \
     "$WORK/nohints.dat" using 1:2 with linespoints title "no hints (least recently used)"
GP
echo "wrote $TXT and $OUTDIR/larger-than-cache-$STAMP.png" >&2
