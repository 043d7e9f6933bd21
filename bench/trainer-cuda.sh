#!/usr/bin/env bash
# perch-train on a GPU machine: builds the trainer alone (trainer/CMakeLists.txt) against that
# machine's PyTorch 2.x (a CUDA wheel's libtorch), then checks the CUDA path end to end on
# synthetic ImageNet-like JPEGs: ResNet-50 training with a checkpoint, SIGTERM at 3 and 6 s (a
# checkpoint and exit 85) and the same command resuming, ResNet-18 on the CPU, two CPU ranks with
# the default thread shares, two CUDA ranks on one GPU (refused), and the trainer's test suite.
# Run from the repository root; everything goes to $OUT/log.txt (and build/ctest logs beside it).
#
#   bench/trainer-cuda.sh                 # on the GPU machine
#   bench/trainer-cuda.sh --fetch-debs D  # on a Debian 12 machine: Debian's packages the
#                                         # trainer needs, for a GPU machine that lacks them
#
# Env: TORCH_DIR (TorchConfig.cmake's directory; default: python3's torch), DEBS (a directory of
# .deb files from --fetch-debs, unpacked into a private prefix; default: use the system's
# libraries), GLOO_INCLUDE (Gloo's headers with a config.h; default: the wheel's include
# directory, which has none in PyTorch 2.11: then give Gloo's source tree), BUILD (build
# directory, default /tmp/perch-trainer-cuda), OUT (default ./trainer-cuda-out).
# Results of 2026-11-25 (H200, PyTorch 2.11 + CUDA 13.0): bench/results/trainer-cuda-*.txt.
# Training through a perch mount on the GPU machine: bench/trainer-cuda-mount.sh.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1

DEB_PACKAGES=(libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 nlohmann-json3-dev libcli11-dev
  libjpeg62-turbo-dev libjpeg62-turbo libturbojpeg0-dev libturbojpeg0 libarchive-dev libarchive13
  libgloo-dev libgtest-dev googletest libnettle8 libxml2 libicu72 libacl1 liblz4-1 libzstd1
  liblzma5 libbz2-1.0)
if [[ ${1:-} == --fetch-debs ]]; then
  mkdir -p "$2" && cd "$2" && apt-get download "${DEB_PACKAGES[@]}"
  exit
fi

OUT=${OUT:-$PWD/trainer-cuda-out}
BUILD=${BUILD:-/tmp/perch-trainer-cuda}
mkdir -p "$OUT"
exec > >(tee -a "$OUT/log.txt") 2>&1
step() { echo; echo "== $(date -u +%T) $*"; }

step "machine"
head -2 /etc/os-release; uname -r; nproc; g++ --version | head -1; cmake --version | head -1
nvidia-smi -L
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'
TD=$(python3 -c 'import torch, os; print(os.path.dirname(torch.__file__))')
TORCH_DIR=${TORCH_DIR:-$TD/share/cmake/Torch}
GLOO_INCLUDE=${GLOO_INCLUDE:-$TD/include}
[[ -f $GLOO_INCLUDE/gloo/algorithm.h ]] || { echo "no Gloo headers in $GLOO_INCLUDE: set GLOO_INCLUDE"; exit 2; }

flags=()
if [[ -n ${DEBS:-} ]]; then
  P=$BUILD-debs
  mkdir -p "$P"
  for f in "$DEBS"/*.deb; do dpkg -x "$f" "$P"; done
  # Debian's libjpeg-turbo targets name /usr/lib files; its jconfig.h sits in the multiarch
  # directory, which must come before the system's (Ubuntu's is libjpeg 8's: another ABI).
  sed -i "s#\"/usr/lib/x86_64-linux-gnu/#\"$P/usr/lib/x86_64-linux-gnu/#g" \
    "$P"/usr/lib/x86_64-linux-gnu/cmake/libjpeg-turbo/*.cmake
  flags+=(-DCMAKE_PREFIX_PATH="$P/usr" -DCMAKE_CXX_FLAGS="-isystem $P/usr/include/x86_64-linux-gnu")
  export LD_LIBRARY_PATH=$P/usr/lib/x86_64-linux-gnu
fi

step "configure and build"
cmake -S trainer -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPERCH_TORCH_DIR="$TORCH_DIR" \
  -DPERCH_GLOO_INCLUDE_DIR="$GLOO_INCLUDE" -DCMAKE_CUDA_COMPILER="$(command -v nvcc)" "${flags[@]}" \
  > "$OUT/cmake.txt" 2>&1 || { tail -30 "$OUT/cmake.txt"; exit 1; }
grep -E "fmt|gloo|Found Torch" "$OUT/cmake.txt"
ninja -C "$BUILD" > "$OUT/build.txt" 2>&1 || { grep -E "error|FAILED" "$OUT/build.txt" | head -40; exit 1; }
B=$BUILD/bin
D=$BUILD/data
"$B"/perch-synth-imagenet --out "$D" --classes 10 --per-class 128 --val-per-class 32

step "CUDA: ResNet-50, 224 px, batch 64, 2 epochs"
"$B"/perch-train --data-dir "$D/train" --val-dir "$D/val" --arch resnet50 --device cuda --epochs 2 \
  --batch-size 64 --checkpoint-dir "$BUILD/ck" --summary-json "$OUT/cuda-resnet50.json" --log-every 5
echo "exit $?"

step "CUDA: SIGTERM, then the same command resumes"
A=(--data-dir "$D/train" --val-dir "$D/val" --arch resnet50 --device cuda --epochs 3 --batch-size 64
  --checkpoint-dir "$BUILD/ck-term" --log-every 5)
for d in 3 6; do
  rm -rf "$BUILD/ck-term"
  "$B"/perch-train "${A[@]}" > "$OUT/sigterm-$d.txt" 2>&1 &
  pid=$!; sleep "$d"; kill -TERM "$pid"; wait "$pid"
  echo "SIGTERM at $d s: exit $? (85: checkpointed)"; tail -2 "$OUT/sigterm-$d.txt"
done
"$B"/perch-train "${A[@]}" | tail -3; echo "exit $?"

step "CPU: ResNet-18, 64 px, 20 steps"
"$B"/perch-train --data-dir "$D/train" --arch resnet18 --device cpu --image-size 64 --max-steps 20 \
  --batch-size 64 --checkpoint-dir "$BUILD/ck-cpu" --log-every 10
echo "exit $?"

step "CPU: two ranks (--nproc 2), threads and loader workers left to their defaults"
"$B"/perch-train --data-dir "$D/train" --arch resnet18 --device cpu --image-size 64 --max-steps 10 \
  --batch-size 32 --nproc 2 --checkpoint-dir "$BUILD/ck-nproc" --log-every 5
echo "exit $?"

step "CUDA: two ranks, as many GPUs as nvidia-smi lists above (one: refused with a message)"
"$B"/perch-train --data-dir "$D/train" --arch resnet18 --device cuda --image-size 64 --max-steps 10 \
  --batch-size 32 --nproc 2 --checkpoint-dir "$BUILD/ck-nproc-cuda" --log-every 5
echo "exit $?"

step "the trainer's tests"
(cd "$BUILD" && ctest -j"$(nproc)" --timeout 300 > "$OUT/ctest.txt" 2>&1; echo "ctest exit $?")
sed -n '/tests passed/,$p' "$OUT/ctest.txt"
