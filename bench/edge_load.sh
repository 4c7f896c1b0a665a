#!/usr/bin/env bash
# Load benchmark of the edge over loopback with wrk (Debian package `wrk`):
#   1. durable transcript ingests  POST /api/public/v1/calls
#   2. point reads                  GET  /api/public/v1/calls/{id}
# against `calleval serve` on a fresh data dir (all roles, SQLite, synchronous=FULL).
# Prints requests per second and p50/p99 latency for each; compare with the budgets in
# docs/architecture.md
# (5,000 ingests/s, 20,000 gets/s, p99 < 25 ms at 64 connections on 2 cores).
#
# usage: bench/edge_load.sh [BUILD_DIR]   (env: CONNECTIONS=64 THREADS=2 DURATION=15s)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
DURATION=${DURATION:-15s}
PORT=${PORT:-18480}
command -v wrk >/dev/null || { echo "edge_load: install wrk (scripts/setup does)" >&2; exit 1; }

DATA=$(mktemp -d)
trap 'kill $SERVER 2>/dev/null || true; wait $SERVER 2>/dev/null || true; rm -rf "$DATA"' EXIT
"$BUILD_DIR/cmd/calleval/calleval" serve --data-dir "$DATA" --http-addr "127.0.0.1:$PORT" \
  --grpc-addr 127.0.0.1:0 --access-log false >"$DATA/serve.log" 2>&1 &
SERVER=$!
for _ in $(seq 1 100); do
  curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break
  sleep 0.1
done
KEY=$(cat "$DATA/bootstrap-key")
AGENT=$(curl -sf -X POST "http://127.0.0.1:$PORT/api/v1/agents" -H "Authorization: Bearer $KEY" \
  -d '{"name":"bench","phone_number":"+14155550123","language_id":1,"instructions":"x"}' |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')

echo "== ingest: POST /api/public/v1/calls, $CONNECTIONS connections, $THREADS threads, $DURATION"
CALLEVAL_KEY=$KEY CALLEVAL_AGENT=$AGENT CALLEVAL_RUN=$$ \
  wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" -s bench/ingest.lua "http://127.0.0.1:$PORT" |
  grep RESULT
LAST=$(curl -sf "http://127.0.0.1:$PORT/api/public/v1/calls?per_page=1" -H "Authorization: Bearer $KEY" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["data"][0]["id"])')

echo "== get: GET /api/public/v1/calls/{id} over $LAST calls, $CONNECTIONS connections, $THREADS threads, $DURATION"
CALLEVAL_KEY=$KEY CALLEVAL_FIRST_ID=1 CALLEVAL_LAST_ID=$LAST \
  wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" -s bench/get.lua "http://127.0.0.1:$PORT" |
  grep RESULT
