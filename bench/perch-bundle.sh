#!/usr/bin/env bash
# perch's runtime for a machine that has none of its Debian 12 packages and no network (the lent GPU
# machine: Ubuntu 24.04, root; see bench/trainer-cuda-mount.sh), and the trainer's build
# dependencies for it, all in one folder that travels with the working tree.
#
#   bench/perch-bundle.sh make DIR    # on Debian 12, perch built: fills DIR (see below)
#   bench/perch-bundle.sh check DIR   # unpacks DIR's runtime into a fresh prefix, shows with ldd
#                                     # that nothing outside it is used but the C/C++ runtime, and
#                                     # serves and mounts a tree with its perch-devfed and perchd
#
# DIR/perch-runtime.tar.xz unpacks to perch/:
#   bin/      perchd perchctl perch-devfed perch-synth-imagenet xrootd fusermount3: wrappers that
#             run libexec/NAME through the system's dynamic loader with --library-path perch/lib.
#             The path applies to that process alone (also to what it dlopens: XRootD's plugins),
#             not to its children, so Ubuntu's own programs that perch-devfed runs (runuser,
#             chown, sh) keep Ubuntu's libraries. Put bin/ first on PATH: perch-devfed starts
#             `xrootd` from PATH, perch-train finds `perchctl` there.
#   libexec/  the binaries, stripped (build/ is RelWithDebInfo: perchd is ~100 MB with debug info)
#   lib/      every library they need (ldd, recursively; XRootD's HTTP, proxy and cache plugins),
#             stripped, except the base C/C++ runtime taken from the host: ld-linux, libc, libm,
#             libpthread, libdl, librt, libresolv, libutil (glibc; Ubuntu 24.04 has 2.39, these were
#             built against 2.36) and libstdc++/libgcc_s (Ubuntu 24.04's GCC 14 runtime is newer
#             than Debian 12's GCC 12 one, and backward compatible).
#   MANIFEST  each library's Debian package and version
# DIR/debs/*.deb      Debian 12's headers and libraries the trainer builds against (spdlog, fmt,
#                     CLI11, nlohmann-json, libjpeg-turbo, libarchive), unpacked there into a private
#                     prefix (bench/trainer-cuda.sh's DEBS)
# DIR/gloo-include.tar.xz  Gloo's headers with a config.h (a PyTorch wheel ships none), from
#                     GLOO_SRC (a pytorch/gloo checkout); skipped when GLOO_SRC is unset
#
# Env: PERCH_BIN (perchd, perchctl, perch-devfed; default build/bin), PERCH_SYNTH (a
# perch-synth-imagenet; default $PERCH_BIN/perch-synth-imagenet), GLOO_SRC.
set -euo pipefail
cd "$(dirname "$0")/.."

TRAINER_DEBS=(libspdlog-dev libspdlog1.10 libfmt-dev libfmt9 nlohmann-json3-dev libcli11-dev
  libjpeg62-turbo-dev libjpeg62-turbo libturbojpeg0-dev libturbojpeg0 libarchive-dev libarchive13)
# The base runtime: glibc's libraries and GCC's C++ runtime, taken from the host.
BASE_RE='^(linux-vdso|ld-linux-x86-64|libc|libm|libpthread|libdl|librt|libresolv|libutil|libstdc\+\+|libgcc_s)\.so'
LD_SO=/lib64/ld-linux-x86-64.so.2

# Libraries a file needs (resolved paths), recursively as ldd gives them, base runtime left out.
needed() {
  ldd "$@" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
    while read -r l; do basename "$l" | grep -Eq "$BASE_RE" || echo "$l"; done
}

make_bundle() {
  local dir=$1 bin=${PERCH_BIN:-build/bin}
  local synth=${PERCH_SYNTH:-$bin/perch-synth-imagenet}
  local stage
  stage=$(mktemp -d /tmp/perch-bundle-XXXXXX)
  trap 'rm -rf "$stage"' RETURN
  local p=$stage/perch
  mkdir -p "$p/bin" "$p/libexec" "$p/lib" "$dir"
  cp "$bin/perchd" "$bin/perchctl" "$bin/perch-devfed" "$synth" "$(command -v xrootd)" \
    "$(command -v fusermount3)" "$p/libexec/"
  strip --strip-all "$p"/libexec/*
  local plugins=()
  for x in XrdHttp XrdPss XrdPfc; do plugins+=("/usr/lib/x86_64-linux-gnu/lib$x-5.so"); done
  local libs
  libs=$( (needed "$p"/libexec/* "${plugins[@]}"; printf '%s\n' "${plugins[@]}") | sort -u)
  for l in $libs; do
    cp -L "$l" "$p/lib/$(basename "$l")"
    local real
    real=$(basename "$(readlink -f "$l")")
    echo "$(basename "$l") $(dpkg -S "/$real" 2>/dev/null | grep -m1 "/$real\$" | cut -d: -f1 |
      xargs -r dpkg-query -W -f='${Package} ${Version}')" >> "$p/MANIFEST"
  done
  strip --strip-unneeded "$p"/lib/*
  for b in "$p"/libexec/*; do
    local n
    n=$(basename "$b")
    cat > "$p/bin/$n" <<EOF
#!/bin/sh
# perch bundle: libexec/$n with the bundle's libraries, for this process only (bench/perch-bundle.sh)
p=\$(readlink -f "\$(dirname "\$(readlink -f "\$0")")/..")
exec $LD_SO --library-path "\$p/lib" --argv0 "\$0" "\$p/libexec/$n" "\$@"
EOF
    chmod 755 "$p/bin/$n"
  done
  chmod -R a+rX "$p"
  tar -C "$stage" -cf - perch | xz -T2 -6 > "$dir/perch-runtime.tar.xz"
  mkdir -p "$dir/debs"
  (cd "$dir/debs" && apt-get download "${TRAINER_DEBS[@]}" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
  if [[ -n ${GLOO_SRC:-} ]]; then
    local g=$stage/gloo-include
    mkdir -p "$g"
    (cd "$GLOO_SRC" && find gloo -name '*.h' | tar -cf - -T -) | tar -C "$g" -xf -
    # A header-only use (c10d's ProcessGroupGloo.hpp): the TCP transport, nothing else.
    sed -e 's/@GLOO_VERSION_MAJOR@/0/; s/@GLOO_VERSION_MINOR@/5/; s/@GLOO_VERSION_PATCH@/0/' \
      -e 's/#cmakedefine01 \(GLOO_HAVE_TRANSPORT_TCP\)$/#define \1 1/' \
      -e 's/#cmakedefine01 \([A-Z_]*\)/#define \1 0/' "$GLOO_SRC/gloo/config.h.in" > "$g/gloo/config.h"
    tar -C "$g" -cJf "$dir/gloo-include.tar.xz" gloo
  fi
  echo "bundle in $dir: $(wc -l < "$p/MANIFEST") libraries"
  du -sb --apparent-size "$p" | awk '{printf "unpacked %.1f MiB\n", $1 / 1048576}'
  du -ab "$dir" | sort -n | tail -4
}

check_bundle() {
  local dir=$1 prefix
  prefix=$(mktemp -d /tmp/perch-bundle-check-XXXXXX)
  chmod 755 "$prefix"
  local pids=() mnt=$prefix/mnt
  cleanup() {
    mountpoint -q "$mnt" 2>/dev/null && { fusermount3 -u -z "$mnt" || umount -l "$mnt"; }
    for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null && wait "$pid" 2>/dev/null; done
    rm -rf "$prefix"
  }
  trap cleanup RETURN
  tar -C "$prefix" -xJf "$dir/perch-runtime.tar.xz"
  local p=$prefix/perch
  echo "== ldd with the bundle's path: libraries not from $p/lib"
  local outside=0
  for b in "$p"/libexec/* "$p"/lib/libXrdHttp-5.so "$p"/lib/libXrdPfc-5.so; do
    local foreign
    foreign=$(LD_LIBRARY_PATH=$p/lib ldd "$b" | awk '$2 == "=>" {print $1, $3} $2 != "=>" {print $1}' |
      grep -v " $p/lib/" || true)
    if grep -q "not found" <<< "$foreign"; then outside=1; fi
    echo "$(basename "$b"): $(echo "$foreign" | awk '{print $1}' | sort | tr '\n' ' ')"
    while read -r name _; do
      [[ -z $name ]] && continue
      basename "$name" | grep -Eq "$BASE_RE" || { echo "  NOT FROM THE BUNDLE: $name"; outside=1; }
    done <<< "$foreign"
  done
  ((outside == 0)) || { echo "FAIL: a library comes from outside the bundle"; return 1; }
  echo "ok: only the base C/C++ runtime comes from the host"

  echo "== perch-devfed and perchd from the bundle"
  export PATH=$p/bin:$PATH
  mkdir -p "$prefix/data/train/n0" "$mnt"
  "$p/bin/perch-synth-imagenet" --out "$prefix/data" --classes 2 --per-class 5 --threads 1
  chmod -R a+rX "$prefix/data"
  perch-devfed --export "/imagenet=$prefix/data" > "$prefix/devfed.out" 2> "$prefix/devfed.err" &
  pids+=($!)
  for _ in $(seq 200); do grep -qx ready "$prefix/devfed.out" 2>/dev/null && break; sleep 0.1; done
  grep -qx ready "$prefix/devfed.out" || { cat "$prefix/devfed.err"; return 1; }
  local fed
  fed=$(sed -n 's/^federation: //p' "$prefix/devfed.out")
  perchd --foreground --cache-dir "$prefix/cache" --cache-size 1G --control "unix:$prefix/ctl.sock" \
    "$fed/imagenet" "$mnt" 2> "$prefix/perchd.err" &
  pids+=($!)
  for _ in $(seq 200); do mountpoint -q "$mnt" && break; sleep 0.05; done
  mountpoint -q "$mnt" || { cat "$prefix/perchd.err"; return 1; }
  local a b
  a=$(cd "$prefix/data" && find train -type f | sort | xargs cat | md5sum)
  b=$(cd "$mnt" && find train -type f | sort | xargs cat | md5sum)
  echo "10 files through the mount: $( [[ $a == "$b" ]] && echo same bytes as the export || echo DIFFERENT)"
  [[ $a == "$b" ]] || return 1
  perchctl --socket "$prefix/ctl.sock" stats | head -2
  echo "== libraries mapped by the running processes, not from $p/lib"
  local x
  for x in $(pgrep -f "$p/libexec/" || true); do
    echo "$(tr '\0' '\n' < "/proc/$x/cmdline" | grep -m1 -o 'libexec/.*'): $(
      awk '$6 ~ /\.so/ {print $6}' "/proc/$x/maps" | sort -u | grep -v "^$p/lib/" |
        xargs -r -n1 basename | tr '\n' ' ')"
  done
  echo "XRootD's plugins, as mapped: $(cat /proc/"$(pgrep -f "$p/libexec/xrootd" | head -1)"/maps |
    awk '$6 ~ /-5\.so$/ {print $6}' | sort -u | tr '\n' ' ')"
}

case ${1:-} in
  make) make_bundle "${2:?DIR}" ;;
  check) check_bundle "${2:?DIR}" ;;
  *) sed -n '2,/^set -e/p' "$0" | sed 's/^# \{0,1\}//;$d'; exit 2 ;;
esac
