#!/usr/bin/env bash
# HTCondor job wrapper for perch-train: trains on the ImageNet tree that the execute node's perch
# mount serves, checkpointing into ./checkpoints (transferred by HTCondor, see perch-train.sub).
#
#   perch-train.sh [perch-train arguments...]
#
# - ./checkpoints exists before the first checkpoint (HTCondor holds a job whose
#   transfer_checkpoint_files names a missing directory).
# - perch-train runs with --max-runtime (PERCH_MAX_RUNTIME, default 1h): it checkpoints and
#   exits 85 every hour, HTCondor copies ./checkpoints to the access point and restarts the job
#   in place with the same arguments, and perch-train resumes exactly where it stopped. That
#   protects against evictions that come without a SIGTERM (common on the OSPool); one that
#   comes with SIGTERM also makes perch-train checkpoint and exit 85 at once.
# - `exec`: HTCondor signals only the job's top process, so the trainer must be that process.
#
# Environment: PERCH_MOUNT (default /osdf) must be a perch mount on this node; PERCH_TRAIN (the
# perch-train binary, default: from PATH); PERCH_MAX_RUNTIME (e.g. 3600, 90m, 2h); perchctl on
# PATH (optional) for prefetch hints.
set -euo pipefail

mount=${PERCH_MOUNT:-/osdf}
train=${PERCH_TRAIN:-perch-train}
max_runtime=${PERCH_MAX_RUNTIME:-1h}

if ! mountpoint -q "$mount"; then
  echo "perch-train.sh: $mount is not mounted on $(hostname); is perchd running here?" >&2
  exit 1
fi
if ! command -v "$train" >/dev/null; then
  echo "perch-train.sh: $train not found on $(hostname)" >&2
  exit 1
fi
mkdir -p checkpoints

# Show where the job stands in the job's stdout: fresh start or resume.
if [[ -f checkpoints/checkpoint.pt ]]; then
  echo "perch-train.sh: resuming from ./checkpoints on $(hostname) at $(date -u +%FT%TZ)"
else
  echo "perch-train.sh: starting on $(hostname) at $(date -u +%FT%TZ)"
fi
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total --format=csv,noheader || true

# Tell perchd the order in which this job reads the files, each epoch, so that it fetches them
# ahead of the loader (needs access to perchd's control socket: the daemon's group). The job
# name is the sandbox, which stays the same across in-place restarts, so a restart's list
# replaces the previous one, plus the rank ($RANK, set in each rank's environment by
# perch-train --nproc; expanded when the hint command runs), so that ranks keep their own lists.
hint=()
if command -v perchctl >/dev/null; then
  hint=(--hint-command "perchctl hint --job \"htcondor:$PWD:\${RANK:-0}\" --file - >/dev/null")
fi

# Later arguments win, so the job's own arguments may override these.
exec "$train" --checkpoint-dir checkpoints --summary-json checkpoints/summary.json \
  --max-runtime "$max_runtime" --device cuda "${hint[@]}" "$@"
