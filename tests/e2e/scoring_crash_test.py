#!/usr/bin/env python3
"""A scoring worker killed with SIGKILL in the middle of an analysis loses nothing.

Runs the service as two processes on one data dir, the way pods split roles: one with the
edge, accounts, agents, calls and metrics roles, and one scoring worker that leases calls over
gRPC (LeaseAnalysis / RecordAnalysis). A 30-minute call is
ingested; while the worker analyses it the worker is killed with SIGKILL. A second worker takes
the call over once the lease expires, the call completes, and the credit ledger shows every
metric charged exactly once (and every refund at most once).

On SQLite in the data dir, or on the test PostgreSQL server when TEST_POSTGRES is set
(e2e_database.py).
"""
import functools
import http.server
import json
import os
import signal
import subprocess
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


def request(base, key, method, path, body=None):
    req = urllib.request.Request(base + path, method=method,
                                 data=json.dumps(body).encode() if body else None,
                                 headers={"Authorization": "Bearer " + key,
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return json.load(resp)


class ScoringCrashTest(unittest.TestCase):
    def test_sigkill_mid_analysis(self):
        source = os.path.join(CORPUS, "ten_minutes.mp3")
        self.assertTrue(os.path.exists(source), f"no test corpus call at {source}")
        with tempfile.TemporaryDirectory() as tmp:
            data = os.path.join(tmp, "data")
            files = os.path.join(tmp, "files")
            os.makedirs(files)
            with open(os.path.join(tmp, "list.txt"), "w") as f:
                f.write(f"file '{source}'\n" * 3)
            subprocess.run(["ffmpeg", "-v", "error", "-f", "concat", "-safe", "0", "-i",
                            os.path.join(tmp, "list.txt"), "-c", "copy",
                            os.path.join(files, "long.mp3")], check=True)
            handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=files)
            handler.log_message = lambda *a: None
            httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
            threading.Thread(target=httpd.serve_forever, daemon=True).start()
            url = f"http://127.0.0.1:{httpd.server_address[1]}/long.mp3"

            database = TestDatabase(data)
            api_server = ServeProcess(CALLEVAL, data, *database.flags(), "--roles",
                                      "edge,accounts,agents,calls,metrics",
                                      "--allow-private-hosts", "127.0.0.1")
            api, base, api_grpc = api_server.proc, api_server.base, api_server.grpc_port
            worker = None
            try:
                self.assertIsNotNone(base)
                with open(os.path.join(data, "bootstrap-key")) as f:
                    key = f.read().strip()
                # Workers lease over gRPC from the calls role, as scoring pods do.
                calls_addr = f"127.0.0.1:{api_grpc}"
                worker = ServeProcess(CALLEVAL, data, *database.flags(), "--roles", "scoring",
                                      "--workers", "1", "--analysis-lease-seconds", "2",
                                      "--calls-addr", calls_addr).proc
                agent = request(base, key, "POST", "/api/v1/agents", {
                    "name": "a", "phone_number": "+14155550123", "language_id": 1,
                    "instructions": "x"})
                # The crash under test is the audio pass's: words_per_minute (6) and
                # transcription_accuracy (7) would wait for 30 minutes to be transcribed.
                planned = [1, 2, 3, 4, 5, 8, 9, 10, 11, 12]
                call = request(base, key, "POST", "/api/public/v1/calls", {
                    "call_identifier": "crash-1", "agent_id": agent["id"], "recording_url": url,
                    "metric_ids": planned})
                deadline = time.time() + 30
                while time.time() < deadline:
                    call = request(base, key, "GET", f"/api/public/v1/calls/{call['id']}")
                    if call["analysis_status"] != "pending":
                        break
                    time.sleep(0.005)
                self.assertEqual(call["analysis_status"], "processing")
                worker.send_signal(signal.SIGKILL)
                worker.wait()
                time.sleep(0.5)
                call = request(base, key, "GET", f"/api/public/v1/calls/{call['id']}")
                self.assertEqual(call["analysis_status"], "processing")  # nobody finished it

                worker = ServeProcess(CALLEVAL, data, *database.flags(), "--roles", "scoring",
                                      "--workers", "1", "--analysis-lease-seconds", "2",
                                      "--calls-addr", calls_addr).proc
                deadline = time.time() + 60
                while time.time() < deadline and call["analysis_status"] == "processing":
                    time.sleep(0.05)
                    call = request(base, key, "GET", f"/api/public/v1/calls/{call['id']}")
                self.assertEqual(call["analysis_status"], "completed", call)
                # Three 10-minute MP3s joined without re-encoding decode to just under 30 min.
                self.assertGreater(call["duration_seconds"], 1700)

                rows = database.rows("SELECT metric_id, kind, COUNT(*), SUM(amount) FROM "
                                     "credit_ledger WHERE call_id = %d GROUP BY metric_id, "
                                     "kind" % call["id"])
                charges = {m: (n, s) for m, k, n, s in rows if k == "charge"}
                refunds = {m: (n, s) for m, k, n, s in rows if k == "refund"}
                self.assertEqual(sorted(charges), planned)
                self.assertTrue(all(n == 1 and s == -1 for n, s in charges.values()), rows)
                self.assertTrue(all(n == 1 and s == 1 for n, s in refunds.values()), rows)
                completed = {m["metric_id"] for m in call["standard_metrics"]
                             if m["status"] == "completed"}
                self.assertEqual(set(refunds), set(planned) - completed)
                self.assertEqual(call["credits_used"], len(completed))
                ws = request(base, key, "GET", "/api/v1/workspaces/current")
                self.assertEqual(ws["credit_balance"], 10000 - len(completed))
                # The database is where it was told to be.
                self.assertEqual(os.path.exists(os.path.join(data, "calleval.db")),
                                 database.backend == "sqlite")
            finally:
                for proc in (api, worker):
                    if proc is not None and proc.poll() is None:
                        proc.send_signal(signal.SIGTERM)
                        self.assertEqual(proc.wait(timeout=30), 0)
                httpd.shutdown()


if __name__ == "__main__":
    if not CALLEVAL:
        sys.exit("set CALLEVAL_BIN")
    unittest.main()
