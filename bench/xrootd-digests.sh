#!/usr/bin/env bash
# Does XRootD survive digest requests, with no perch in the way?
#
# Starts a stock XRootD origin (Debian's, as user xrootd, `xrootd.chksum max
# 4 adler32 crc32c md5`, perch-devfed's origin configuration) over 3,000
# files of 100 KB, and asks it for their digests as perch does (a one-byte
# Range GET with `Want-Digest: adler32`) from a plain Python client: CONC
# requests in flight at once, each connection kept alive, ASKS in all. Each
# case runs on a fresh server and reports how many asks were answered 206,
# how many were answered wrong (404/500 for a file that exists) and whether
# the server was still alive at the end (a core's top frame if not).
#
# Cases: the files owned by root (XRootD cannot store the digest it
# computed, so every ask computes: `--no-stored-digests`), the files owned
# by xrootd (the first ask of a file computes and stores it), and digests
# stored beforehand (xrdadler32, perch-devfed's default).
#
#   CONCS="1 2 4" ASKS=4000 bench/xrootd-digests.sh
set -euo pipefail
cd "$(dirname "$0")/.."
CONCS=${CONCS:-1 2 4}
ASKS=${ASKS:-4000}
CASES=${CASES:-computed stores stored}
OUT=${OUT:-bench/results/xrootd-digests-$(date +%F).txt}
PORT=${PORT:-41094}

for p in xrootd-server gdb python3 attr; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' ||
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$p" >/dev/null
done

WORK=$(mktemp -d /tmp/perch-xrootd-digests-XXXXXX)
chmod 755 "$WORK"
cleanup() {
  [[ -f $WORK/srv/run/pid ]] && kill "$(cat "$WORK/srv/run/pid")" 2>/dev/null || true
  pkill -f "xrootd -c $WORK/" 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT INT TERM

python3 - "$WORK/master" <<'EOF'
import os, sys
os.makedirs(sys.argv[1])
for i in range(3000):
    with open(os.path.join(sys.argv[1], f"f{i:05d}.bin"), "wb") as f:
        f.write(os.urandom(100000))
EOF

cat > "$WORK/ask.py" <<'EOF'
import http.client, sys, threading
port, conc, n = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
codes, errors, lock = {}, [0], threading.Lock()
def worker(k):
    c = None
    for i in range(k, n, conc):
        try:
            if c is None:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            c.request("GET", f"/f{i % 3000:05d}.bin",
                      headers={"Want-Digest": "adler32", "Range": "bytes=0-0"})
            r = c.getresponse(); r.read()
            with lock: codes[r.status] = codes.get(r.status, 0) + 1
        except Exception:
            with lock: errors[0] += 1
            c = None
ts = [threading.Thread(target=worker, args=(k,)) for k in range(conc)]
[t.start() for t in ts]; [t.join() for t in ts]
wrong = sum(v for k, v in codes.items() if k != 206)
print(f"{codes.get(206, 0)} {wrong} {errors[0]}")
EOF

one_case() {  # CASE CONC
  local data=$WORK/data srv=$WORK/srv
  rm -rf "$data" "$srv"
  cp -r "$WORK/master" "$data"
  chmod -R o+rX "$data"
  case $1 in
    stores) chown -R xrootd "$data" ;;
    stored) for f in "$data"/*.bin; do xrdadler32 "$f" >/dev/null; done ;;  # as root: user.XrdCks.*
  esac
  mkdir -p "$srv"
  cat > "$srv/xrootd.cfg" <<EOF
all.export /
oss.localroot $data
xrd.port $PORT
xrd.protocol http:$PORT libXrdHttp.so
all.adminpath $srv/admin
all.pidpath $srv/run
xrd.network nodnr
xrootd.chksum max 4 adler32 crc32c md5
EOF
  chown -R xrootd "$srv"
  runuser -u xrootd -- bash -c "ulimit -c unlimited; cd $srv; exec xrootd -c $srv/xrootd.cfg -l $srv/log" \
    >/dev/null 2>&1 &
  local pid=$!
  for _ in $(seq 50); do
    curl -s -o /dev/null "http://127.0.0.1:$PORT/f00000.bin" -r 0-0 && break
    sleep 0.1
  done
  local start=$SECONDS
  read -r ok wrong errors < <(python3 "$WORK/ask.py" "$PORT" "$2" "$ASKS")
  local secs=$((SECONDS - start)) state=alive top=""
  if ! kill -0 "$pid" 2>/dev/null; then
    state=DIED
    [[ -f $srv/core ]] && top=$(gdb -batch -ex "bt 3" /usr/bin/xrootd "$srv/core" 2>/dev/null |
      grep -m1 '^#0' | sed 's/.* in //; s/ (.*//')
  fi
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  printf '%-9s %4s %6s %6s %6s %6s %5s  %s\n' "$1" "$2" "$ASKS" "$ok" "$wrong" "$errors" \
    "$state" "$top" | tee -a "$OUT"
}

{
  echo "XRootD $(xrootd -v 2>&1 | head -1) digest requests, $(date +%F), $(nproc) cores" \
    "($(lscpu | sed -n 's/^Model name: *//p'))"
  echo "computed: files root's (no digest stored, every ask computes); stores: files xrootd's;"
  echo "stored: user.XrdCks.adler32 written beforehand. ok: 206; wrong: 404/500 for a file that"
  echo "exists; failed: no answer (the server gone). top: a core's top frame."
  printf '%-9s %4s %6s %6s %6s %6s %5s  %s\n' case conc asks ok wrong failed state top
} | tee "$OUT"
for c in $CASES; do
  for n in $CONCS; do one_case "$c" "$n"; done
done
