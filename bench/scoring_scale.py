#!/usr/bin/env python3
"""Recorded calls scored per minute with 1, 2 and 4 scoring processes, and how long calls wait.

Each round is an installation with its roles apart, as on nodes of their own: one process with
the API roles (edge, accounts, agents, metrics, calls, runs) and N scoring processes (one worker
each, no speech-to-text), every one with its own working dir, on one PostgreSQL (the tests'
server, durable) and one local S3 (tools/s3/serve.js) holding the recordings. CALLS voice calls
are ingested at once, each with the same recording (the first MINUTES minutes of the generated
10-minute corpus call, served by a local HTTP server), planned with the audio metrics only.

Printed per round: calls completed per minute (from the first ingest to the last completion),
and the queue wait of each call, from its ingest being acknowledged to the first moment it is
seen `processing` (sampled every 250 ms), as p50 and p95; how busy both cores were, and the CPU
seconds each part used: the scoring processes, the API process (downloads, puts into S3), the
local S3 (node), PostgreSQL, and this script (the recordings' HTTP server, the sampling).

With STORE=local the recordings are in a directory every process is given instead (the
processes then share this machine's disk, as they could not on nodes apart): the scoring
processes' own scaling, without the local S3's CPU, which on one machine is most of the rest.

usage: bench/scoring_scale.py [BUILD_DIR]   env: CALLS=60 MINUTES=2 PROCESSES=1,2,4 STORE=s3|local
Needs the build (calleval, test_postgres, the corpus), ffmpeg, node and tools/s3's modules
(scripts/setup).
"""
import functools
import http.server
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build"))
CALLEVAL = os.path.join(BUILD, "cmd", "calleval", "calleval")
TEST_POSTGRES = os.path.join(BUILD, "tests", "support", "test_postgres")
CORPUS_CALL = os.path.join(BUILD, "tests", "corpus", "calls", "ten_minutes.mp3")
S3_SERVE = os.path.join(ROOT, "tools", "s3", "serve.js")
CALLS = int(os.environ.get("CALLS", "60"))
MINUTES = float(os.environ.get("MINUTES", "2"))
PROCESSES = [int(n) for n in os.environ.get("PROCESSES", "1,2,4").split(",")]
STORE = os.environ.get("STORE", "s3")
AUDIO_METRICS = [1, 2, 3, 4, 5, 8, 9, 10]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_times():
    with open("/proc/stat") as f:
        values = [int(v) for v in f.readline().split()[1:]]
    idle = values[3] + values[4]
    return sum(values) - idle, sum(values)


def cpu_seconds(pid):
    """User and system CPU seconds of a process and its waited-for children."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    ticks = os.sysconf("SC_CLK_TCK")
    return sum(int(v) for v in fields[11:15]) / ticks


def postgres_seconds():
    total = 0.0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                with open(f"/proc/{pid}/comm") as f:
                    if f.read().strip() == "postgres":
                        total += cpu_seconds(pid)
            except OSError:
                pass
    return total


def request(base, key, method, path, body=None):
    req = urllib.request.Request(base + path, method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Authorization": "Bearer " + key,
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.load(resp)


def start(args, work, env):
    """`calleval serve` in `work`; returns the process once it listens."""
    os.makedirs(work, exist_ok=True)
    proc = subprocess.Popen([CALLEVAL, "serve", "--data-dir", work, "--access-log", "false",
                             *args], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True, env=env)
    while True:
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError("calleval serve did not start: " + " ".join(args))
        if "gRPC on port" in line:
            return proc


def round_with(scoring_processes, tmp, pg_dir, files_base, s3_port, s3_pid):
    url = subprocess.run([TEST_POSTGRES, "newdb", pg_dir], check=True, capture_output=True,
                         text=True).stdout.strip()
    keys = os.path.join(tmp, f"keys-{scoring_processes}")
    os.makedirs(keys)
    with open(os.path.join(keys, "internal"), "w") as f:
        f.write(os.urandom(32).hex())
    with open(os.path.join(keys, "signing"), "w") as f:
        f.write(os.urandom(32).hex())
    env = dict(os.environ, AWS_ACCESS_KEY_ID="S3RVER", AWS_SECRET_ACCESS_KEY="S3RVER")
    grpc = free_port()
    http_port = free_port()
    recordings_url = (
        f"s3://recordings/round{scoring_processes}?endpoint=http://127.0.0.1:{s3_port}"
        if STORE == "s3" else os.path.join(tmp, f"recordings-{scoring_processes}"))
    common = ["--database-url", url,
              "--recordings-url", recordings_url,
              "--internal-credential-file", os.path.join(keys, "internal"),
              "--signing-key-file", os.path.join(keys, "signing"),
              "--calls-addr", f"127.0.0.1:{grpc}", "--accounts-addr", f"127.0.0.1:{grpc}",
              "--agents-addr", f"127.0.0.1:{grpc}", "--metrics-addr", f"127.0.0.1:{grpc}",
              "--allow-private-hosts", "127.0.0.1", "--stt-workers", "0"]
    procs = []
    try:
        api_dir = os.path.join(tmp, f"api-{scoring_processes}")
        procs.append(start(common + ["--roles", "edge,accounts,agents,metrics,calls,runs",
                                     "--grpc-addr", f"127.0.0.1:{grpc}", "--admin-addr", "127.0.0.1:0",
                                     "--http-addr", f"127.0.0.1:{http_port}"], api_dir, env))
        for i in range(scoring_processes):
            procs.append(start(common + ["--roles", "scoring", "--workers", "1",
                                         "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0",
                                         "--lease-holder", f"scoring-{i}"],
                               os.path.join(tmp, f"scoring-{scoring_processes}-{i}"), env))
        base = f"http://127.0.0.1:{http_port}"
        with open(os.path.join(api_dir, "bootstrap-key")) as f:
            key = f.read().strip()
        agent = request(base, key, "POST", "/api/v1/agents", {
            "name": "bench", "phone_number": "+14155550123", "language_id": 1,
            "instructions": "x"})["id"]
        busy0, total0 = cpu_times()
        cpu0 = {"api": cpu_seconds(procs[0].pid),
                "scoring": sum(cpu_seconds(p.pid) for p in procs[1:]),
                "s3": cpu_seconds(s3_pid), "postgres": postgres_seconds(),
                "bench": cpu_seconds(os.getpid())}
        first = time.time()
        acked = {}
        for i in range(CALLS):
            call = request(base, key, "POST", "/api/public/v1/calls", {
                "call_identifier": f"scale-{i}", "agent_id": agent,
                "recording_url": f"{files_base}/call.wav", "metric_ids": AUDIO_METRICS})
            acked[call["id"]] = time.time()
        started = {}
        completed = {}
        deadline = first + 1800
        while len(completed) < CALLS and time.time() < deadline:
            now = time.time()
            rows = subprocess.run(
                ["psql", "-X", "-A", "-t", "-F", " ", "-d", url, "-c",
                 "SELECT id, analysis_status FROM calls WHERE analysis_status IN "
                 "('processing', 'completed', 'failed')"],
                check=True, capture_output=True, text=True).stdout.split("\n")
            for row in rows:
                if not row:
                    continue
                call_id, status = row.split()
                call_id = int(call_id)
                started.setdefault(call_id, now)
                if status != "processing":
                    completed.setdefault(call_id, now)
            time.sleep(0.25)
        last = max(completed.values()) if completed else time.time()
        busy1, total1 = cpu_times()
        cpu1 = {"api": cpu_seconds(procs[0].pid),
                "scoring": sum(cpu_seconds(p.pid) for p in procs[1:]),
                "s3": cpu_seconds(s3_pid), "postgres": postgres_seconds(),
                "bench": cpu_seconds(os.getpid())}
        failed = subprocess.run(["psql", "-X", "-A", "-t", "-d", url, "-c",
                                 "SELECT COUNT(*) FROM calls WHERE analysis_status <> "
                                 "'completed'"], check=True, capture_output=True,
                                text=True).stdout.strip()
        waits = sorted(started[c] - acked[c] for c in acked if c in started)
        return {
            "processes": scoring_processes,
            "completed": len(completed),
            "not_completed": int(failed),
            "seconds": last - first,
            "per_minute": len(completed) / (last - first) * 60,
            "wait_p50": statistics.median(waits),
            "wait_p95": waits[int(0.95 * (len(waits) - 1))],
            "busy": 100 * (busy1 - busy0) / max(1, total1 - total0),
            "cpu": {k: cpu1[k] - cpu0[k] for k in cpu0},
        }
    finally:
        for proc in procs:
            proc.send_signal(signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()


def main():
    for path in (CALLEVAL, TEST_POSTGRES, CORPUS_CALL):
        if not os.path.exists(path):
            sys.exit(f"scoring_scale: {path} is missing: build first")
    tmp = tempfile.mkdtemp()
    os.chmod(tmp, 0o755)  # the PostgreSQL server runs as nobody when this runs as root
    pg_dir = os.path.join(tmp, "postgres")
    s3 = None
    httpd = None
    try:
        files = os.path.join(tmp, "files")
        os.makedirs(files)
        subprocess.run(["ffmpeg", "-v", "error", "-i", CORPUS_CALL, "-t", str(MINUTES * 60),
                        "-c:a", "pcm_s16le", os.path.join(files, "call.wav")], check=True)

        class Quiet(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args):
                pass
        httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                                functools.partial(Quiet, directory=files))
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        files_base = f"http://127.0.0.1:{httpd.server_address[1]}"
        subprocess.run([TEST_POSTGRES, "start", pg_dir, "--durable"], check=True,
                       capture_output=True)
        s3_dir = os.path.join(tmp, "s3")
        os.makedirs(s3_dir)
        s3 = subprocess.Popen(["node", S3_SERVE, "--dir", s3_dir, "--bucket", "recordings",
                               "--port", "0"], stdout=subprocess.PIPE, text=True)
        s3_port = s3.stdout.readline().split()[1]
        print(f"recordings in {'a local S3 (tools/s3)' if STORE == 's3' else 'a shared directory'}; "
              f"{CALLS} calls of {MINUTES:g} min each (stereo WAV, {os.path.getsize(os.path.join(files, 'call.wav')) // 1024} KiB), "
              f"audio metrics only; {os.cpu_count()} cores", flush=True)
        print("| scoring processes | calls completed | seconds | calls/min | queue wait p50 | "
              "queue wait p95 | cores busy | CPU s: scoring / API / S3 / PostgreSQL / bench |")
        print("|---|---|---|---|---|---|---|---|", flush=True)
        for n in PROCESSES:
            r = round_with(n, tmp, pg_dir, files_base, s3_port, s3.pid)
            c = r["cpu"]
            print(f"| {r['processes']} | {r['completed']} ({r['not_completed']} not) | "
                  f"{r['seconds']:.1f} | {r['per_minute']:.0f} | {r['wait_p50']:.1f} s | "
                  f"{r['wait_p95']:.1f} s | {r['busy']:.0f} % | {c['scoring']:.0f} / "
                  f"{c['api']:.0f} / {c['s3']:.0f} / {c['postgres']:.0f} / {c['bench']:.0f} |",
                  flush=True)
    finally:
        if s3 is not None:
            s3.kill()
            s3.wait()
        if httpd is not None:
            httpd.shutdown()
        subprocess.run([TEST_POSTGRES, "stop", pg_dir], capture_output=True)
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
