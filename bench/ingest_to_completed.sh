#!/usr/bin/env bash
# Time from ingest to analysis_status "completed" for a 5-minute stereo call (the first five
# minutes of the 10-minute corpus call) served by a local HTTP server, through `calleval serve`
# (standard metrics only; budget 2 s). Prints the median of RUNS ingests.
# usage: bench/ingest_to_completed.sh [BUILD_DIR]   (env RUNS=5, CORPUS=../shared/corpus)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
RUNS=${RUNS:-5}
CORPUS=${CORPUS:-../shared/corpus}
PORT=${PORT:-18481}
FILES_PORT=${FILES_PORT:-18482}
WORK=$(mktemp -d)
trap 'kill $SERVER $FILES 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"' EXIT

ffmpeg -v error -i "$CORPUS/calls/pub13_ten_minutes.mp3" -t 300 -c:a pcm_s16le "$WORK/call.wav"
(cd "$WORK" && exec python3 -m http.server "$FILES_PORT" --bind 127.0.0.1 >/dev/null 2>&1) &
FILES=$!
"$BUILD_DIR/cmd/calleval/calleval" serve --data-dir "$WORK/data" --http-addr "127.0.0.1:$PORT" \
  --grpc-addr 127.0.0.1:0 --access-log false --allow-private-hosts 127.0.0.1 >"$WORK/serve.log" 2>&1 &
SERVER=$!
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
KEY=$(cat "$WORK/data/bootstrap-key")
BASE="http://127.0.0.1:$PORT"
AGENT=$(curl -sf -X POST "$BASE/api/v1/agents" -H "Authorization: Bearer $KEY" \
  -d '{"name":"bench","phone_number":"+14155550123","language_id":1,"instructions":"x"}' |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')

python3 - "$BASE" "$KEY" "$AGENT" "http://127.0.0.1:$FILES_PORT/call.wav" "$RUNS" <<'PY'
import json, statistics, sys, time, urllib.request
base, key, agent, url, runs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
def call(method, path, body=None):
    req = urllib.request.Request(base + path, method=method,
                                 data=json.dumps(body).encode() if body else None,
                                 headers={"Authorization": "Bearer " + key,
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.load(r)
times = []
for i in range(runs):
    start = time.monotonic()
    c = call("POST", "/api/public/v1/calls",
             {"call_identifier": f"five-{i}-{time.time()}", "agent_id": agent, "recording_url": url})
    while True:
        c = call("GET", f"/api/public/v1/calls/{c['id']}")
        if c["analysis_status"] in ("completed", "failed", "skipped"):
            break
        time.sleep(0.01)
    times.append(time.monotonic() - start)
    assert c["analysis_status"] == "completed", c
print(f"5-minute call, ingest to completed: median {statistics.median(times):.3f} s "
      f"(min {min(times):.3f}, max {max(times):.3f}, {runs} runs; duration_seconds {c['duration_seconds']})")
PY
