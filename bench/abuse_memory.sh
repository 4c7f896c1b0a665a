#!/usr/bin/env bash
# Memory after an abusive burst: starts `calleval serve` on a fresh data dir, reads its resident
# set (VmRSS), sends a burst of malformed requests in parallel (10 MB bodies of broken JSON,
# 17 MB bodies over the 16 MB limit, JSON nested 10,000 deep), waits idle, reads VmRSS again
# and prints both and their ratio. The service should settle within 1.5x of where it started.
#
# usage: bench/abuse_memory.sh [BUILD_DIR]
#   env: REQUESTS=600 (the reported incident was 15000) PARALLEL=16 IDLE_SECONDS=5 PORT=18481
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
REQUESTS=${REQUESTS:-600}
PARALLEL=${PARALLEL:-16}
IDLE_SECONDS=${IDLE_SECONDS:-5}
PORT=${PORT:-18481}

DATA=$(mktemp -d)
trap 'kill $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true; rm -rf "$DATA"' EXIT
"$BUILD_DIR/cmd/calleval/calleval" serve --data-dir "$DATA" --http-addr "127.0.0.1:$PORT" \
  --grpc-addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 --access-log false >"$DATA/serve.log" 2>&1 &
SERVER=$!
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null || { cat "$DATA/serve.log" >&2; exit 1; }

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$SERVER/status"; }
# A few ordinary requests first, so the baseline includes what any served traffic touches.
for _ in $(seq 1 20); do curl -s "http://127.0.0.1:$PORT/api/v1/languages" >/dev/null; done
sleep 1
BEFORE=$(rss_kb)

python3 - "$PORT" "$REQUESTS" "$PARALLEL" <<'PY'
import collections, socket, sys, threading
port, total, parallel = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
mb = 1 << 20
bodies = [
    b'{"call_identifier": "' + b"x" * (10 * mb) + b'", ',          # 10 MB, unterminated JSON
    b'{"transcript": [' + b'{"role":"User","content":"a"},' * (17 * mb // 30),  # 17 MB: 413
    b"[" * 10000 + b"]" * 10000,                                        # 10,000 deep
]
counts = collections.Counter()
lock = threading.Lock()
next_index = iter(range(total))

def send(i):
    body = bodies[i % len(bodies)]
    head = ("POST /api/public/v1/calls HTTP/1.1\r\nHost: bench\r\n"
            "Authorization: Bearer cev_not_a_key\r\nContent-Type: application/json\r\n"
            "Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)).encode()
    status = "error"
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(head)
            try:
                s.sendall(body)
            except OSError:
                pass  # the server answered early (413) and stopped reading
            reply = s.recv(64)
            status = reply.split(b" ")[1].decode() if reply.startswith(b"HTTP/") else "none"
    except OSError:
        pass
    with lock:
        counts[status] += 1

def worker():
    while True:
        with lock:
            i = next(next_index, None)
        if i is None:
            return
        send(i)

threads = [threading.Thread(target=worker) for _ in range(parallel)]
for t in threads: t.start()
for t in threads: t.join()
print("burst: %d requests, answers %s" % (total, dict(sorted(counts.items()))))
PY

PEAK=$(awk '/^VmHWM:/ {print $2}' "/proc/$SERVER/status")
sleep "$IDLE_SECONDS"
AFTER=$(rss_kb)
echo "rss_before_kb=$BEFORE rss_peak_kb=$PEAK rss_after_idle_kb=$AFTER"
python3 -c "print('ratio=%.2f' % ($AFTER / $BEFORE))"
