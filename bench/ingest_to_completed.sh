#!/usr/bin/env bash
# Time from ingest to analysis_status "completed" for a 5-minute stereo call (the first five
# minutes of the 10-minute corpus call) served by a local HTTP server, through `calleval serve`
# (standard metrics only; budget 2 s). Prints the median of RUNS ingests.
# With TRANSCRIPT=1 the call carries its transcript, so transcription_accuracy is planned: the
# call is `computed` after the audio metrics and `completed` once the embedded recognizer has
# transcribed it; both times are printed.
# usage: bench/ingest_to_completed.sh [BUILD_DIR]   (env RUNS=5, TRANSCRIPT=0, CORPUS=../shared/corpus)
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

python3 - "$BASE" "$KEY" "$AGENT" "http://127.0.0.1:$FILES_PORT/call.wav" "$RUNS" \
  "${TRANSCRIPT:-0}" "$CORPUS/calls/pub13_ten_minutes.transcript.json" <<'PY'
import json, statistics, sys, time, urllib.request
base, key, agent, url, runs = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], int(sys.argv[5])
transcript = None
if sys.argv[6] == "1":
    with open(sys.argv[7]) as f:
        transcript = [t for t in json.load(f) if t.get("end_time", 0) <= 300]
def call(method, path, body=None):
    req = urllib.request.Request(base + path, method=method,
                                 data=json.dumps(body).encode() if body else None,
                                 headers={"Authorization": "Bearer " + key,
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req) as r:
        return json.load(r)
times, computed_times = [], []
for i in range(runs):
    start = time.monotonic()
    body = {"call_identifier": f"five-{i}-{time.time()}", "agent_id": agent, "recording_url": url}
    if transcript:
        body["transcript"] = transcript
    c = call("POST", "/api/public/v1/calls", body)
    computed = None
    while True:
        c = call("GET", f"/api/public/v1/calls/{c['id']}")
        if computed is None and c["analysis_status"] in ("computed", "completed"):
            computed = time.monotonic() - start
        if c["analysis_status"] in ("completed", "failed", "skipped"):
            break
        time.sleep(0.01)
    times.append(time.monotonic() - start)
    computed_times.append(computed)
    assert c["analysis_status"] == "completed", c
if transcript:
    accuracy = [m for m in c["standard_metrics"] if m["metric_id"] == 7][0]
    print(f"5-minute call with its transcript, ingest to computed: median "
          f"{statistics.median(computed_times):.3f} s (max {max(computed_times):.3f}); "
          f"to completed (transcribed): median {statistics.median(times):.3f} s "
          f"(max {max(times):.3f}), {runs} runs; transcription_accuracy {accuracy['score']}")
else:
    print(f"5-minute call, ingest to completed: median {statistics.median(times):.3f} s "
          f"(min {min(times):.3f}, max {max(times):.3f}, {runs} runs; duration_seconds {c['duration_seconds']})")
PY
