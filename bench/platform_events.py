#!/usr/bin/env python3
"""How fast a voice platform's end-of-call webhook is acknowledged (docs/api.md §5.9; budget:
under 50 ms). Starts `calleval serve` on a fresh data dir, one Retell agent and its workspace's
key, and a loopback recording server that answers each fetch only after SLOW_FETCH_S seconds, so
an acknowledgement that waited for the recording would show it. Then posts EVENTS signed
`call_analyzed` events (each a new call) over CONCURRENCY keep-alive connections, then the same
events again (redeliveries: duplicates), and prints the acknowledgement time's median, p90, p99
and max for each.

usage: bench/platform_events.py [BUILD_DIR]   env: EVENTS=300 CONCURRENCY=4 SLOW_FETCH_S=2
"""
import hashlib
import hmac
import http.client
import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

BUILD_DIR = sys.argv[1] if len(sys.argv) > 1 else "build"
EVENTS = int(os.environ.get("EVENTS", "300"))
CONCURRENCY = int(os.environ.get("CONCURRENCY", "4"))
SLOW_FETCH_S = float(os.environ.get("SLOW_FETCH_S", "2"))
API_KEY = "key_bench_retell"


class SlowRecordings(http.server.BaseHTTPRequestHandler):
    """A recording that takes SLOW_FETCH_S to arrive (a small WAV header and silence)."""

    def do_GET(self):
        time.sleep(SLOW_FETCH_S)
        rate, seconds = 8000, 1
        data = b"\0" * (rate * 2 * 2 * seconds)
        header = (b"RIFF" + (36 + len(data)).to_bytes(4, "little") + b"WAVEfmt " +
                  (16).to_bytes(4, "little") + (1).to_bytes(2, "little") +
                  (2).to_bytes(2, "little") + rate.to_bytes(4, "little") +
                  (rate * 4).to_bytes(4, "little") + (4).to_bytes(2, "little") +
                  (16).to_bytes(2, "little") + b"data" + len(data).to_bytes(4, "little"))
        self.send_response(200)
        self.send_header("Content-Type", "audio/wav")
        self.send_header("Content-Length", str(len(header) + len(data)))
        self.end_headers()
        self.wfile.write(header + data)

    def log_message(self, *args):
        pass


def event(i, files):
    return json.dumps({"event": "call_analyzed", "call": {
        "call_id": f"bench-{i}", "agent_id": "agent_bench", "direction": "inbound",
        "from_number": "+14155550142", "start_timestamp": 1764324000000,
        "end_timestamp": 1764324030000, "recording_multi_channel_url": f"{files}/{i}.wav",
        "disconnection_reason": "user_hangup", "call_cost": {"combined_cost": 9},
        "transcript_object": [
            {"role": "agent", "content": "Hello, this is the clinic.",
             "words": [{"word": "Hello,", "start": 0.3, "end": 0.7},
                       {"word": "clinic.", "start": 1.2, "end": 1.8}]},
            {"role": "user", "content": "Hi, I need an appointment.",
             "words": [{"word": "Hi,", "start": 2.4, "end": 2.6},
                       {"word": "appointment.", "start": 3.4, "end": 4.1}]}]}}).encode()


def sign(body):
    millis = str(int(time.time() * 1000))
    digest = hmac.new(API_KEY.encode(), body + millis.encode(), hashlib.sha256).hexdigest()
    return f"v={millis},d={digest}"


def post_all(host, port, bodies):
    """Posts each body on one of CONCURRENCY keep-alive connections; the times in ms."""
    times, lock, outcomes = [], threading.Lock(), {}
    queue = list(enumerate(bodies))

    def worker():
        conn = http.client.HTTPConnection(host, port, timeout=30)
        while True:
            with lock:
                if not queue:
                    break
                _, body = queue.pop()
            headers = {"Content-Type": "application/json", "X-Retell-Signature": sign(body)}
            start = time.perf_counter()
            conn.request("POST", "/api/public/v1/integrations/retell/events", body, headers)
            resp = conn.getresponse()
            answer = resp.read()
            elapsed = (time.perf_counter() - start) * 1000
            with lock:
                times.append(elapsed)
                key = (resp.status, json.loads(answer).get("outcome"))
                outcomes[key] = outcomes.get(key, 0) + 1
        conn.close()

    threads = [threading.Thread(target=worker) for _ in range(CONCURRENCY)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sorted(times), outcomes


def describe(name, times, outcomes):
    def pct(p):
        return times[min(len(times) - 1, int(p / 100 * len(times)))]
    print(f"{name}: {len(times)} events, median {pct(50):.1f} ms, p90 {pct(90):.1f} ms, "
          f"p99 {pct(99):.1f} ms, max {times[-1]:.1f} ms; answers {outcomes}")


def main():
    work = tempfile.mkdtemp()
    files_httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), SlowRecordings)
    threading.Thread(target=files_httpd.serve_forever, daemon=True).start()
    files = f"http://127.0.0.1:{files_httpd.server_address[1]}"
    server = subprocess.Popen(
        [os.path.join(BUILD_DIR, "cmd/calleval/calleval"), "serve", "--data-dir",
         os.path.join(work, "data"), "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0",
         "--admin-addr", "127.0.0.1:0", "--access-log", "false", "--allow-private-hosts",
         "127.0.0.1"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        base = None
        while base is None:
            line = server.stdout.readline()
            if not line:
                raise SystemExit("calleval serve did not start")
            match = re.search(r"HTTP on (http://\S+)", line)
            if match:
                base = match.group(1)
        for _ in range(100):
            try:
                urllib.request.urlopen(base + "/readyz", timeout=1)
                break
            except OSError:
                time.sleep(0.1)
        with open(os.path.join(work, "data", "bootstrap-key")) as f:
            key = f.read().strip()

        def api(method, path, body):
            req = urllib.request.Request(base + path, method=method, data=json.dumps(body).encode(),
                                         headers={"Authorization": "Bearer " + key,
                                                  "Content-Type": "application/json"})
            with urllib.request.urlopen(req, timeout=30) as resp:
                return json.loads(resp.read())

        api("PUT", "/api/v1/integrations/retell", {"api_key": API_KEY})
        api("POST", "/api/v1/agents", {"name": "bench", "phone_number": "+14155550100",
                                       "agent_source": "external_retell",
                                       "assistant_id": "agent_bench"})
        host, port = base[len("http://"):].rsplit(":", 1)
        bodies = [event(i, files) for i in range(EVENTS)]
        print(f"calleval at {base}; recordings answer after {SLOW_FETCH_S} s; "
              f"{CONCURRENCY} connections")
        describe("new calls", *post_all(host, int(port), bodies))
        describe("redeliveries", *post_all(host, int(port), bodies))
    finally:
        server.terminate()
        server.wait(timeout=30)
        files_httpd.shutdown()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
