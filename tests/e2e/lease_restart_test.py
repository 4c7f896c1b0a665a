#!/usr/bin/env python3
"""A `calleval serve` killed with SIGKILL while calls are processing resumes them at once.

One process runs every role. Voice calls of the test corpus are ingested (their recordings
served from a local HTTP server); once the scoring worker holds a call, the process is killed
with SIGKILL, leaving those calls `processing` under leases that
still run for minutes (--analysis-lease-seconds 180: longer than the test allows, so only the
restart hand-back can make it pass). The process is restarted on the same data dir with the same
roles (the same lease holder id): it gives back the leases of its previous life (analyses, and
any recording download caught by the kill) before its workers lease anything, and every acknowledged call must end completed within 60 s of the
restart. The resume time is printed.

On SQLite in the data dir, or on the test PostgreSQL server when TEST_POSTGRES is set
(e2e_database.py).
"""
import functools
import http.server
import json
import os
import signal
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

from e2e_database import TestDatabase
from serve_process import ServeProcess

CALLEVAL = os.environ.get("CALLEVAL_BIN")
CORPUS = os.environ.get("CALLEVAL_CORPUS_DIR", "")
LEASE_SECONDS = 180
RESUME_WITHIN_SECONDS = 60
# The audio metrics and the LLM-judged ones (which end llm_unavailable at once): nothing waits
# for a transcription.
PLANNED = [1, 2, 3, 4, 5, 8, 9, 10, 11, 12]


def request(base, key, method, path, body=None):
    req = urllib.request.Request(base + path, method=method,
                                 data=json.dumps(body).encode() if body else None,
                                 headers={"Authorization": "Bearer " + key,
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.load(resp)


def list_calls(base, key):
    calls, page = [], 1
    while True:
        body = request(base, key, "GET", f"/api/public/v1/calls?per_page=100&page={page}")
        calls.extend(body["data"])
        if len(body["data"]) < 100:
            return calls
        page += 1


class LeaseRestartTest(unittest.TestCase):
    def serve(self, data):
        return ServeProcess(CALLEVAL, data, *self.database.flags(), "--workers", "1",
                            "--stt-workers", "0",
                            "--analysis-lease-seconds", str(LEASE_SECONDS),
                            "--transcription-lease-seconds", str(LEASE_SECONDS),
                            "--allow-private-hosts", "127.0.0.1")

    def test_sigkill_while_processing_then_restart_resumes_every_call(self):
        calls_dir = CORPUS
        wavs = sorted(f for f in os.listdir(calls_dir) if f.endswith(".wav")) \
            if os.path.isdir(calls_dir) else []
        self.assertGreaterEqual(len(wavs), 5, f"no test corpus calls in {calls_dir}")
        with tempfile.TemporaryDirectory() as tmp:
            data = os.path.join(tmp, "data")
            self.database = TestDatabase(data)
            handler = functools.partial(http.server.SimpleHTTPRequestHandler,
                                        directory=calls_dir)
            handler.log_message = lambda *a: None
            httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
            threading.Thread(target=httpd.serve_forever, daemon=True).start()
            files = f"http://127.0.0.1:{httpd.server_address[1]}"
            server = self.serve(data)
            try:
                self.assertIsNotNone(server.base)
                with open(os.path.join(data, "bootstrap-key")) as f:
                    key = f.read().strip()
                agent = request(server.base, key, "POST", "/api/v1/agents", {
                    "name": "a", "phone_number": "+14155550123", "language_id": 1,
                    "instructions": "x"})
                acknowledged = set()
                for i in range(6):
                    for wav in wavs:
                        call = request(server.base, key, "POST", "/api/public/v1/calls", {
                            "call_identifier": f"lease-{i}-{wav}", "agent_id": agent["id"],
                            "recording_url": f"{files}/{wav}", "metric_ids": PLANNED})
                        acknowledged.add(call["id"])
                # Killed once the worker holds a call (downloads may be in progress too). The
                # worker may finish that call between the look and the kill: then nothing is
                # left processing, which is not the case under test, so the process is started
                # again and killed again (its hand-back at start leaves nothing stale).
                stuck = []
                for attempt in range(5):
                    if attempt > 0:
                        server = self.serve(data)
                    deadline = time.time() + 60
                    killed = False
                    while time.time() < deadline:
                        calls = list_calls(server.base, key)
                        if any(c["analysis_status"] == "processing" for c in calls):
                            server.proc.send_signal(signal.SIGKILL)
                            server.proc.wait()
                            killed = True
                            break
                        time.sleep(0.01)
                    self.assertTrue(killed, "no call was ever processing")

                    # What the dead process left: calls `processing` under leases that run on.
                    stuck = self.database.rows(
                        "SELECT id, analysis_lease_until, analysis_token FROM calls WHERE "
                        "analysis_status = 'processing'")
                    downloading = self.database.rows(
                        "SELECT COUNT(*) FROM calls WHERE recording_state = 'pending' AND "
                        "recording_lease_until > %d" % int(time.time()))[0][0]
                    if stuck:
                        break
                self.assertTrue(stuck, "five kills left no call processing")
                now = time.time()
                for _, until, token in stuck:
                    self.assertGreater(until, now + RESUME_WITHIN_SECONDS, stuck)
                    self.assertIn(":", token)  # the holder id, then the random part
                incomplete = len([c for c in calls if c["analysis_status"] != "completed"])

                restarted_at = time.time()
                server = self.serve(data)
                deadline = restarted_at + RESUME_WITHIN_SECONDS
                resumed_at = None
                while time.time() < deadline:
                    calls = {c["id"]: c for c in list_calls(server.base, key)}
                    if all(calls[i]["analysis_status"] == "completed" for i in acknowledged):
                        resumed_at = time.time()
                        break
                    time.sleep(0.1)
                self.assertEqual(set(calls), acknowledged)
                not_done = {i: calls[i]["analysis_status"] for i in acknowledged
                            if calls[i]["analysis_status"] != "completed"}
                if not_done:
                    rows = self.database.rows(
                        "SELECT id, analysis_status, recording_state, recording_lease_until, "
                        "analysis_lease_until, analysis_token FROM calls WHERE id IN (%s)" %
                        ",".join(str(i) for i in not_done))
                    self.fail(f"not completed {RESUME_WITHIN_SECONDS} s after the restart "
                              f"(now {int(time.time())}): {rows}")
                # Each call was charged once for its planned metrics, whatever the kill did.
                charges = self.database.rows(
                    "SELECT call_id, metric_id, COUNT(*) FROM credit_ledger WHERE kind = "
                    "'charge' GROUP BY call_id, metric_id HAVING COUNT(*) > 1")
                self.assertEqual(charges, [])
                sys.stderr.write(
                    f"\n{len(acknowledged)} calls, {len(stuck)} processing and {downloading} "
                    f"downloading at the SIGKILL, "
                    f"{incomplete} not yet completed; all completed {resumed_at - restarted_at:.1f}"
                    f" s after the restart (lease {LEASE_SECONDS} s)\n")
            finally:
                if server.proc.poll() is None:
                    self.assertEqual(server.stop(), 0)
                httpd.shutdown()


if __name__ == "__main__":
    if not CALLEVAL:
        sys.exit("set CALLEVAL_BIN")
    unittest.main()
