#!/usr/bin/env bash
# Load benchmark of the edge over loopback with wrk (Debian package `wrk`), beside nginx (Debian
# package `nginx-light`) serving a static file in the same run, so figures from a shared or busy
# machine can be compared as ratios:
#   1. durable transcript ingests  POST /api/public/v1/calls
#   2. point reads                  GET  /api/public/v1/calls/{id}, while the scoring workers
#                                   drain the analyses step 1 queued (as a server under load does)
#   3. point reads again, once that backlog has drained (at most DRAIN_WAIT seconds): the reads
#                                   alone
#   4. nginx                        GET  of a static file holding one GET answer of step 2
# Each round starts `calleval serve` (ROLES, all by default) on a fresh data dir and a fresh database; the
# last line gives the medians over the rounds and the ratios to nginx. Budgets:
# docs/architecture.md, "Performance budgets".
#
# usage: bench/edge_load.sh [--backend sqlite|postgres] [--database-url URL] [BUILD_DIR]
#   --backend sqlite     (default) SQLite in the data dir, synchronous=FULL
#   --backend postgres   a PostgreSQL server of its own, started with the test tool
#                        (tests/support/test_postgres.h) with fsync and synchronous_commit on,
#                        one fresh database per round
#   --database-url URL   a PostgreSQL database that is there already (every round uses it; its
#                        durability settings are printed, and should be on)
# env: CONNECTIONS=64 THREADS=2 DURATION=15s ROUNDS=3 PORT=18480 NGINX_PORT=18481 DRAIN_WAIT=600
#      ROLES=all   the roles `calleval serve` runs; without scoring (the API roles of a deployment
#                  whose scoring runs on other nodes, as PostgreSQL allows) nothing drains, and
#                  step 3 is step 2 again
set -euo pipefail
cd "$(dirname "$0")/.."

BACKEND=sqlite
DATABASE_URL=
BUILD_DIR=build
while [ $# -gt 0 ]; do
  case "$1" in
    --backend) BACKEND=$2; shift 2 ;;
    --backend=*) BACKEND=${1#*=}; shift ;;
    --database-url) BACKEND=postgres; DATABASE_URL=$2; shift 2 ;;
    --database-url=*) BACKEND=postgres; DATABASE_URL=${1#*=}; shift ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    -*) echo "edge_load: unknown option $1" >&2; exit 2 ;;
    *) BUILD_DIR=$1; shift ;;
  esac
done
case "$BACKEND" in sqlite|postgres) ;; *) echo "edge_load: --backend sqlite|postgres" >&2; exit 2 ;; esac
CONNECTIONS=${CONNECTIONS:-64}
THREADS=${THREADS:-2}
DURATION=${DURATION:-15s}
ROUNDS=${ROUNDS:-3}
PORT=${PORT:-18480}
NGINX_PORT=${NGINX_PORT:-18481}
DRAIN_WAIT=${DRAIN_WAIT:-600}
ROLES=${ROLES:-all}
SCORES=0
case ",$ROLES," in *,all,*|*,scoring,*) SCORES=1 ;; esac
CALLEVAL=$BUILD_DIR/cmd/calleval/calleval
TEST_POSTGRES=$BUILD_DIR/tests/support/test_postgres
command -v wrk >/dev/null || { echo "edge_load: install wrk (scripts/setup does)" >&2; exit 1; }
NGINX=$(command -v nginx || echo /usr/sbin/nginx)
[ -x "$NGINX" ] || { echo "edge_load: install nginx-light (scripts/setup does)" >&2; exit 1; }
[ -x "$CALLEVAL" ] || { echo "edge_load: build calleval into $BUILD_DIR first" >&2; exit 1; }

WORK=$(mktemp -d)
chmod 755 "$WORK"  # nginx's workers and PostgreSQL run as nobody when this runs as root
SERVER=
NGINX_PID=
OWN_POSTGRES=
cleanup() {
  [ -n "$SERVER" ] && { kill "$SERVER" 2>/dev/null || true; wait "$SERVER" 2>/dev/null || true; }
  [ -n "$NGINX_PID" ] && { kill "$NGINX_PID" 2>/dev/null || true; wait "$NGINX_PID" 2>/dev/null || true; }
  [ -n "$OWN_POSTGRES" ] && "$TEST_POSTGRES" stop "$WORK/postgres" >/dev/null 2>&1
  rm -rf "$WORK"
}
trap cleanup EXIT

# The share of both cores busy over two seconds, before a round starts: what the rest of the
# machine (other users, builds) is using while nothing of this benchmark runs.
machine_busy() {
  read -r _ u1 n1 s1 i1 w1 q1 sq1 st1 _ </proc/stat
  sleep 2
  read -r _ u2 n2 s2 i2 w2 q2 sq2 st2 _ </proc/stat
  local busy=$(((u2 + n2 + s2 + q2 + sq2 + st2) - (u1 + n1 + s1 + q1 + sq1 + st1)))
  local idle=$(((i2 + w2) - (i1 + w1)))
  echo "$((100 * busy / (busy + idle)))"
}

if [ "$BACKEND" = postgres ] && [ -z "$DATABASE_URL" ]; then
  [ -x "$TEST_POSTGRES" ] || { echo "edge_load: build test_postgres into $BUILD_DIR first" >&2; exit 1; }
  "$TEST_POSTGRES" start "$WORK/postgres" --durable >/dev/null
  OWN_POSTGRES=1
fi

# nginx: every path answers the static file, so it takes the same requests as step 2.
mkdir -p "$WORK/www" "$WORK/nginx"
cat >"$WORK/nginx/nginx.conf" <<EOF
worker_processes auto;
daemon off;
pid $WORK/nginx/nginx.pid;
error_log $WORK/nginx/error.log;
$([ "$(id -u)" = 0 ] && echo "user nobody nogroup;")
events { worker_connections 1024; }
http {
  access_log off;
  client_body_temp_path $WORK/nginx/body;
  proxy_temp_path $WORK/nginx/proxy;
  fastcgi_temp_path $WORK/nginx/fastcgi;
  uwsgi_temp_path $WORK/nginx/uwsgi;
  scgi_temp_path $WORK/nginx/scgi;
  default_type application/json;
  keepalive_requests 1000000;
  server {
    listen 127.0.0.1:$NGINX_PORT;
    root $WORK/www;
    location / { try_files /call.json =404; }
  }
}
EOF

field() { sed -n "s/.* $1=\([^ ]*\).*/\1/p"; }

echo "backend: $BACKEND; roles $ROLES; $CONNECTIONS connections, $THREADS wrk threads, $DURATION per step, $ROUNDS rounds; $(nproc) cores"
for round in $(seq 1 "$ROUNDS"); do
  URL=
  if [ "$BACKEND" = postgres ]; then
    URL=${DATABASE_URL:-$("$TEST_POSTGRES" newdb "$WORK/postgres")}
    if [ "$round" = 1 ]; then
      echo "postgres: $(psql "$URL" -AtXc "SELECT string_agg(name || '=' || setting, ' ' ORDER BY name) FROM pg_settings WHERE name IN ('fsync', 'synchronous_commit', 'full_page_writes', 'wal_sync_method', 'shared_buffers', 'max_connections', 'server_version')")"
    fi
  fi
  # A database given by URL bootstraps its key once: its rounds share the data dir that holds it.
  DATA="$WORK/data-$round"
  [ -z "$DATABASE_URL" ] || DATA="$WORK/data"
  mkdir -p "$DATA"
  BUSY=$(machine_busy)
  "$CALLEVAL" serve --data-dir "$DATA" ${URL:+--database-url "$URL"} \
    --http-addr "127.0.0.1:$PORT" --grpc-addr 127.0.0.1:0 --admin-addr 127.0.0.1:0 --access-log false --roles "$ROLES" \
    >"$DATA/serve.log" 2>&1 &
  SERVER=$!
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$PORT/readyz" >/dev/null 2>&1 && break
    sleep 0.1
  done
  KEY=$(cat "$DATA/bootstrap-key")
  AGENT=$(curl -sf -X POST "http://127.0.0.1:$PORT/api/v1/agents" -H "Authorization: Bearer $KEY" \
    -d '{"name":"bench","phone_number":"+14155550123","language_id":1,"instructions":"x"}' |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')

  INGEST=$(CALLEVAL_KEY=$KEY CALLEVAL_AGENT=$AGENT CALLEVAL_RUN=$$-$round \
    wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" -s bench/ingest.lua "http://127.0.0.1:$PORT" |
    grep RESULT)
  # The ids this round's ingests were given (PostgreSQL's sequence skips the ids of rolled back
  # inserts, so they need not be contiguous).
  if [ "$BACKEND" = postgres ]; then
    psql "$URL" -AtXc "SELECT id FROM calls WHERE agent_id = $AGENT ORDER BY id" >"$WORK/ids"
  else
    sqlite3 "$DATA/calleval.db" "SELECT id FROM calls WHERE agent_id = $AGENT ORDER BY id" >"$WORK/ids"
  fi
  curl -sf "http://127.0.0.1:$PORT/api/public/v1/calls/$(tail -1 "$WORK/ids")" \
    -H "Authorization: Bearer $KEY" >"$WORK/www/call.json"
  GET=$(CALLEVAL_KEY=$KEY CALLEVAL_IDS_FILE=$WORK/ids \
    wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" -s bench/get.lua "http://127.0.0.1:$PORT" |
    grep RESULT)
  # Step 3: the calls of step 1 all scored (or DRAIN_WAIT passed), then the same reads.
  UNSETTLED="SELECT COUNT(*) FROM calls WHERE analysis_status IN ('pending', 'processing', 'computed')"
  DRAIN_START=$(date +%s)
  while [ "$SCORES" = 1 ]; do
    if [ "$BACKEND" = postgres ]; then LEFT=$(psql "$URL" -AtXc "$UNSETTLED")
    else LEFT=$(sqlite3 "$DATA/calleval.db" "$UNSETTLED"); fi
    [ "$LEFT" = 0 ] && break
    [ $(($(date +%s) - DRAIN_START)) -ge "$DRAIN_WAIT" ] && break
    sleep 1
  done
  DRAINED_S=$(($(date +%s) - DRAIN_START))
  if [ "$SCORES" = 1 ]; then
    GET_IDLE=$(CALLEVAL_KEY=$KEY CALLEVAL_IDS_FILE=$WORK/ids \
      wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" -s bench/get.lua "http://127.0.0.1:$PORT" |
      grep RESULT)
  else
    GET_IDLE=$GET LEFT="(no scoring role)"
  fi
  kill "$SERVER"
  wait "$SERVER" 2>/dev/null || true
  SERVER=

  "$NGINX" -c "$WORK/nginx/nginx.conf" -p "$WORK/nginx" 2>>"$WORK/nginx/error.log" &
  NGINX_PID=$!
  for _ in $(seq 1 100); do
    curl -sf "http://127.0.0.1:$NGINX_PORT/api/public/v1/calls/1" >/dev/null 2>&1 && break
    sleep 0.1
  done
  STATIC=$(CALLEVAL_KEY=$KEY CALLEVAL_IDS_FILE=$WORK/ids \
    wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" -s bench/get.lua "http://127.0.0.1:$NGINX_PORT" |
    grep RESULT)
  kill "$NGINX_PID"
  wait "$NGINX_PID" 2>/dev/null || true
  NGINX_PID=

  echo "round $round: machine busy ${BUSY}% before it (load average $(cut -d' ' -f1-3 /proc/loadavg) after)"
  echo "  ingest $INGEST"
  if [ "$SCORES" = 1 ]; then
    echo "  get    $GET ($(wc -l <"$WORK/ids") calls, their analyses draining)"
    echo "  get    $GET_IDLE (drained ${DRAINED_S} s after the step above, $LEFT left)"
  else
    echo "  get    $GET ($(wc -l <"$WORK/ids") calls; no scoring role, nothing drains)"
  fi
  echo "  nginx  $STATIC ($(stat -c %s "$WORK/www/call.json") bytes)"
  echo "$BUSY $(echo "$INGEST" | field rps) $(echo "$INGEST" | field p99_ms) \
$(echo "$GET" | field rps) $(echo "$GET" | field p99_ms) $(echo "$STATIC" | field rps) \
$(echo "$INGEST" | field non2xx) $(echo "$GET" | field non2xx) \
$(echo "$GET_IDLE" | field rps) $(echo "$GET_IDLE" | field p99_ms) \
$(echo "$GET_IDLE" | field non2xx)" >>"$WORK/rounds"
done

python3 - "$BACKEND" "$WORK/rounds" <<'EOF'
import statistics, sys
backend, path = sys.argv[1], sys.argv[2]
rows = [list(map(float, line.split())) for line in open(path)]
(busy, ingest, ingest_p99, get, get_p99, nginx, ingest_bad, get_bad, idle, idle_p99,
 idle_bad) = map(list, zip(*rows))
med = statistics.median
print(f"median of {len(rows)} ({backend}): ingest {med(ingest):.0f}/s p99 {med(ingest_p99):.1f} ms, "
      f"get while draining {med(get):.0f}/s p99 {med(get_p99):.1f} ms, "
      f"get drained {med(idle):.0f}/s p99 {med(idle_p99):.1f} ms, nginx {med(nginx):.0f}/s; "
      f"ingest/nginx {med(i / n for i, n in zip(ingest, nginx)):.3f}, "
      f"get/nginx {med(g / n for g, n in zip(get, nginx)):.3f} draining, "
      f"{med(g / n for g, n in zip(idle, nginx)):.3f} drained; "
      f"machine busy before rounds {min(busy):.0f}-{max(busy):.0f}%")
if sum(ingest_bad) or sum(get_bad) or sum(idle_bad):
    print(f"non-2xx answers: {sum(ingest_bad):.0f} ingests, {sum(get_bad) + sum(idle_bad):.0f} gets")
EOF
