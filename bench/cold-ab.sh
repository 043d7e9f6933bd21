#!/usr/bin/env bash
# Cold small files, two or more perch builds side by side (issue 14): rounds of
# one curl pass straight from the origin and one cold pass through each build,
# in turn (A B A B), over the same data and the same perch-devfed origin. Per
# pass: files/s, the reader's CPU per file (READER / curl), the XRootD
# origin's CPU per file and perchd's (utime+stime from /proc, counted until
# its blocks are stored). On these 2 noisy cores single runs swing by 20 %;
# alternating rounds show what a change does.
#
# READER: threads (default: perch-bench-read, one process with READERS threads, as a
# data loader), listed (the same after listing the files' directories, as a data
# loader's dataset scan does: on the mount the names come with their attributes through
# readdirplus, and the opens need no LOOKUP), or cat (xargs cat, a process per 25 files:
# the reader of the results before the sixth round of "Cost per file", 2026-11-25);
# several, separated by spaces, give each build one pass per reader in each round.
# Needs root (FUSE, drop_caches). Run after building the builds to compare:
#   BINS="/tmp/before/bin build/bin" bench/cold-ab.sh
# or one build with two sets of perchd flags (after a colon, commas for spaces):
#   BINS="build/bin build/bin:--no-verify-digests" bench/cold-ab.sh
# Env: BINS (directories with perchd, perchctl, perch-devfed, each with
# perchd flags after a colon; default build/bin), ROUNDS (3), SMALL_FILES (2000), READERS (32), CACHE_ROOT (where
# the caches go: default the work directory on this disk; a tmpfs takes the
# filesystem out), FRESH (1: the cache directory is removed and made again
# before each pass, as bench/cost.sh does, so that a filesystem's cost after
# deletes shows; 0: a new directory each pass), DEVFED_ARGS (more perch-devfed flags, e.g.
# "--caches 1": reads then go through an XCache; "origin" CPU is then every xrootd's). Prints
# to stdout.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
bench_setup cold-ab curl bc
SMALL_FILES=${SMALL_FILES:-2000}
READERS=${READERS:-32}
BINS=${BINS:-$BIN}
read -r -a KINDS <<< "${READER:-threads}"
for k in "${KINDS[@]}"; do bench_reader "$k" SMALL_READER; done  # checks the names
bench_data "$SMALL_FILES" 1
(cd "$DATA" && find imagenet -type f -name '*.JPEG' | sort) > "$WORK/files.txt"
# shellcheck disable=SC2086  # DEVFED_ARGS: flags, split on spaces
bench_devfed devfed ${DEVFED_ARGS:-}
M=$WORK/perch
TCK=$(getconf CLK_TCK)
mapfile -t ORIGIN_PIDS < <(pgrep -x xrootd)
awk -v o="$ORIGIN/bench/" '{ print "url = \"" o $0 "\"\noutput = \"/dev/null\"" }' "$WORK/files.txt" > "$WORK/curl.cfg"

# line NAME WALL READER_S ORIGIN_TICKS [PERCHD_TICKS LOOKUPS]: one pass, also kept in
# $WORK/passes (name, files/s, perchd us per file) for the summary.
line() {
  awk -v n="$1" -v w="$2" -v c="$3" -v x="$4" -v p="${5:-}" -v l="${6:-}" -v t="$TCK" -v f="$SMALL_FILES" \
    -v passes="$WORK/passes" 'BEGIN {
    perchd = p == "" ? "" : p * 1e6 / t / f
    printf "%-36s %6.0f files/s  reader %4.0f us  origin %4.0f us", n, f / w, c * 1e6 / f, x * 1e6 / t / f
    if (p != "") printf "  perchd %4.0f us  lookups %.2f per file", perchd, l / f
    printf "\n"
    printf "%s\t%.1f\t%s\n", n, f / w, perchd >> passes }'
}

# lookups -> FUSE LOOKUP requests perchd has answered so far.
lookups() { bench_fuse_counts "$WORK/ctl.sock" | tr ' ' '\n' | sed -n 's/^lookup=//p'; }

echo "Cold small files, $(date -u '+%Y-%m-%d %H:%M UTC'), $(nproc) cores, $SMALL_FILES files, $READERS readers (${READER:-threads}), cache in ${CACHE_ROOT:-$WORK} (FRESH=${FRESH:-1}); CPU per file."
for r in $(seq "${ROUNDS:-3}"); do
  drop
  x0=$(bench_cpu_ticks "${ORIGIN_PIDS[@]}")
  read -r w u s < <(bench_run_cpu curl -s --no-progress-meter --parallel --parallel-max "$READERS" -K "$WORK/curl.cfg")
  line "curl, origin" "$w" "$(echo "$u + $s" | bc -l)" $(($(bench_cpu_ticks "${ORIGIN_PIDS[@]}") - x0))
  for entry in $BINS; do
    b=${entry%%:*}
    flags=""
    [[ $entry == *:* ]] && flags=${entry#*:}
    for kind in "${KINDS[@]}"; do
      BIN=$b
      name=$entry
      ((${#KINDS[@]} > 1)) && name="$b, $kind"
      bench_reader "$kind" SMALL_READER
      cache=${CACHE_ROOT:-$WORK}/cache-$r-$RANDOM
      if [[ ${FRESH:-1} == 1 ]]; then
        cache=${CACHE_ROOT:-$WORK}/cache
        rm -rf "$cache"
      fi
      # shellcheck disable=SC2086  # flags: perchd flags, commas for spaces
      bench_mount "$cache" "$M" ${flags//,/ }
      drop
      p0=$(bench_cpu_ticks "$PERCHD_PID")
      x0=$(bench_cpu_ticks "${ORIGIN_PIDS[@]}")
      read -r w u s < <(bench_run_cpu "${SMALL_READER[@]}" "$M" "$WORK/files.txt" "$READERS")
      bench_settle "$SMALL_FILES"
      line "$name" "$w" "$(echo "$u + $s" | bc -l)" $(($(bench_cpu_ticks "${ORIGIN_PIDS[@]}") - x0)) \
        $(($(bench_cpu_ticks "$PERCHD_PID") - p0)) "$(lookups)"
      bench_umount "$M"
      rm -rf "$cache"
    done
  done
done

# Per build, over the rounds: its rate as a fraction of the same round's curl
# rate (min, median, max; rounds at 0.5 or more) and perchd's median CPU per file.
echo
echo "Summary, each pass against the curl pass of its round:"
awk -F'\t' '
  $1 == "curl, origin" { curl = $2; next }
  { r = $2 / curl; k = $1; n[k]++; ratio[k, n[k]] = r; cpu[k, n[k]] = $3; if (r >= 0.5) ok[k]++
    if (!(k in seen)) { seen[k] = 1; order[++m] = k } }
  function median(a, k, c,   i, j, t, v) {
    for (i = 1; i <= c; i++) v[i] = a[k, i]
    for (i = 2; i <= c; i++) for (j = i; j > 1 && v[j - 1] > v[j]; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
    return c % 2 ? v[(c + 1) / 2] : (v[c / 2] + v[c / 2 + 1]) / 2
  }
  END {
    for (b = 1; b <= m; b++) {
      k = order[b]; lo = 1e9; hi = 0
      for (i = 1; i <= n[k]; i++) { lo = ratio[k, i] < lo ? ratio[k, i] : lo; hi = ratio[k, i] > hi ? ratio[k, i] : hi }
      printf "%-36s x curl %.2f-%.2f, median %.2f; %d of %d rounds >= 0.5; perchd median %.0f us per file\n",
        k, lo, hi, median(ratio, k, n[k]), ok[k], n[k], median(cpu, k, n[k])
    }
  }' "$WORK/passes"
