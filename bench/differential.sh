#!/usr/bin/env bash
# The differential test (tests/integration/differential_test.cc) over many
# seeds: each seed a new hostile tree, compared through the mount and the
# HTTP endpoint, cold and after a restart. The test command runs 3 seeds;
# this runs SEEDS (default 4..43). A failing seed is printed and can be
# rerun alone with PERCH_DIFF_SEEDS=<seed> build/bin/differential_test.
#
# Needs root (FUSE) and a build:  sudo bench/differential.sh
set -uo pipefail
cd "$(dirname "$0")/.."
SEEDS=${SEEDS:-$(seq -s ' ' 4 43)}
[[ -x build/bin/differential_test ]] || { echo "build first: cmake --build --preset release" >&2; exit 1; }
failed=()
for s in $SEEDS; do
  if PERCH_DIFF_SEEDS=$s build/bin/differential_test > "/tmp/perch-differential-$s.log" 2>&1; then
    echo "seed $s: the same"
    rm -f "/tmp/perch-differential-$s.log"
  else
    echo "seed $s: DIFFERENT (log: /tmp/perch-differential-$s.log)"
    failed+=("$s")
  fi
done
echo "${#failed[@]} of $(wc -w <<< "$SEEDS") seeds differ${failed:+: ${failed[*]}}"
((${#failed[@]} == 0))
