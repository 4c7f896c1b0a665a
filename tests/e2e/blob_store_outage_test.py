#!/usr/bin/env python3
"""A recordings bucket that cannot be reached loses no call: the download is tried again, then
the call ends failed with the store's reason; a call whose recording is stored and then cannot be
read ends failed with `recording_unavailable` after its lease runs out three times.

`calleval serve` with --recordings-url naming S3 on a port nothing listens on (a store that is
down), or a local S3 (tools/s3/serve.js) stopped after the recording was put.
"""
import functools
import http.server
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.request

from serve_process import ServeProcess

CALLEVAL = os.environ.get("CALLEVAL_BIN")
CORPUS = os.environ.get("CALLEVAL_CORPUS_DIR", "")
S3_SERVE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "s3",
                        "serve.js")
ENV = dict(os.environ, AWS_ACCESS_KEY_ID="S3RVER", AWS_SECRET_ACCESS_KEY="S3RVER")


def closed_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(base, key, method, path, body=None):
    req = urllib.request.Request(base + path, method=method,
                                 data=json.dumps(body).encode() if body is not None else None,
                                 headers={"Authorization": "Bearer " + key,
                                          "Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.load(resp)


class BlobStoreOutageTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

        class Quiet(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args):
                pass
        self.httpd = http.server.ThreadingHTTPServer(
            ("127.0.0.1", 0), functools.partial(Quiet, directory=CORPUS))
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.recording = f"http://127.0.0.1:{self.httpd.server_address[1]}/short_stereo.wav"
        self.server = None
        self.s3 = None

    def tearDown(self):
        if self.server is not None and self.server.proc.poll() is None:
            self.server.stop()
        if self.s3 is not None and self.s3.poll() is None:
            self.s3.kill()
            self.s3.wait()
        self.httpd.shutdown()
        self.tmp.cleanup()

    def serve(self, recordings_url, *flags):
        self.server = ServeProcess(CALLEVAL, os.path.join(self.tmp.name, "data"),
                                   "--recordings-url", recordings_url,
                                   "--allow-private-hosts", "127.0.0.1", *flags, env=ENV)
        with open(os.path.join(self.tmp.name, "data", "bootstrap-key")) as f:
            key = f.read().strip()
        agent = request(self.server.base, key, "POST", "/api/v1/agents", {
            "name": "a", "phone_number": "+14155550123", "language_id": 1, "instructions": "x"})
        return key, agent["id"]

    def wait_settled(self, key, call_id, timeout):
        deadline = time.time() + timeout
        while True:
            call = request(self.server.base, key, "GET", f"/api/public/v1/calls/{call_id}")
            if call["analysis_status"] in ("completed", "failed", "skipped"):
                return call
            self.assertLess(time.time(), deadline, call)
            time.sleep(0.2)

    def test_an_unreachable_bucket_retries_then_fails_the_call_with_its_reason(self):
        key, agent = self.serve(f"s3://recordings/calls?endpoint=http://127.0.0.1:{closed_port()}")
        call = request(self.server.base, key, "POST", "/api/public/v1/calls", {
            "call_identifier": "outage-1", "agent_id": agent, "recording_url": self.recording})
        started = time.time()
        # Three attempts, 5 s and 10 s apart.
        call = self.wait_settled(key, call["id"], 60)
        self.assertGreater(time.time() - started, 14)
        self.assertEqual(call["analysis_status"], "failed", call)
        self.assertEqual(call["failure_reason"], "download_failed", call)
        self.assertIn("could not be stored", call["failure_message"])
        self.assertIn("127.0.0.1", call["failure_message"])
        # Nothing lost: the call is listed with its reason.
        listed = request(self.server.base, key, "GET", "/api/public/v1/calls")
        self.assertIn(call["id"], [c["id"] for c in listed["data"]])

    def test_a_stored_recording_the_bucket_stops_serving_fails_with_recording_unavailable(self):
        s3_dir = os.path.join(self.tmp.name, "s3")
        os.makedirs(s3_dir)
        self.s3 = subprocess.Popen(["node", S3_SERVE, "--dir", s3_dir, "--bucket", "recordings",
                                    "--port", "0"], stdout=subprocess.PIPE, text=True)
        port = self.s3.stdout.readline().split()[1]
        # The calls role alone first: the recording is downloaded and put, nothing scores it.
        key, agent = self.serve(f"s3://recordings/calls?endpoint=http://127.0.0.1:{port}",
                                "--roles", "edge,accounts,agents,metrics,calls",
                                "--lease-holder", "api")
        call = request(self.server.base, key, "POST", "/api/public/v1/calls", {
            "call_identifier": "outage-2", "agent_id": agent, "recording_url": self.recording,
            "metric_ids": [1, 2]})
        deadline = time.time() + 30
        while not any(files for _, _, files in os.walk(s3_dir)):
            self.assertLess(time.time(), deadline, "the recording never reached the bucket")
            time.sleep(0.1)
        time.sleep(0.5)
        self.s3.send_signal(signal.SIGKILL)
        self.s3.wait()
        self.server.stop()
        # Then every role, with short leases: each lease finds the bucket gone.
        key, _ = self.serve(f"s3://recordings/calls?endpoint=http://127.0.0.1:{port}",
                            "--analysis-lease-seconds", "2", "--stt-workers", "0")
        call = self.wait_settled(key, call["id"], 60)
        self.assertEqual(call["analysis_status"], "failed", call)
        self.assertEqual(call["failure_reason"], "recording_unavailable", call)
        self.assertIn("could not be read", call["failure_message"])
        # The credits reserved for it came back.
        workspace = request(self.server.base, key, "GET", "/api/v1/workspaces/current")
        self.assertEqual(workspace["credit_balance"], 10000)


if __name__ == "__main__":
    if not CALLEVAL:
        sys.exit("set CALLEVAL_BIN")
    unittest.main()
