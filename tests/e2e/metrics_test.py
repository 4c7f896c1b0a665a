#!/usr/bin/env python3
"""End to end: the admin listener's /metrics (docs/operations.md §7) read with Prometheus's own
text-format parser, before and after a scripted workload whose effect on each counter is known.

`calleval serve` runs every role with --admin-addr 127.0.0.1:0. The workload: voice calls whose
recordings (generated WAVs) come from a local HTTP server, text calls with a transcript, requests
answered 4xx (a malformed ingest, an unknown agent, an unknown path, no key), gRPC health checks,
and a look for /metrics on the public edge (which must not serve it). Once every call is scored,
the deltas between the two scrapes must be exactly what the workload predicts: requests by route
template and status, one analysis queue wait per call scored, one download wait per recording,
credits charged as the planned metrics cost and refunded as the API says was not used, gRPC calls
by method and code, the recording store's delete of a deleted call.
"""
import functools
import http.server
import io
import json
import math
import os
import struct
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request
import wave

import grpc
from prometheus_client.parser import text_string_to_metric_families

from serve_process import ServeProcess

CALLEVAL = os.environ.get("CALLEVAL_BIN")
VOICE_CALLS = 2
TEXT_CALLS = 3
# Audio metrics and the LLM-judged ones (llm_unavailable at once without a provider): nothing
# waits for a transcription (--stt-workers 0). Standard metrics cost 1 credit each.
VOICE_METRICS = [1, 2, 3, 4, 5, 8, 9, 10, 11, 12]
TEXT_METRICS = [11, 12]
INGEST = "/api/public/v1/calls"


def stereo_wav(seconds=4, rate=8000):
    """Two channels taking turns with a tone, 16-bit PCM."""
    frames = io.BytesIO()
    for i in range(seconds * rate):
        second = i // rate
        tone = int(8000 * math.sin(2 * math.pi * 440 * i / rate))
        left, right = (tone, 0) if second % 2 == 0 else (0, tone)
        frames.write(struct.pack("<hh", left, right))
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(frames.getvalue())
    return out.getvalue()


def request(method, url, key=None, body=None, raw=None):
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            text = resp.read()
            return resp.status, json.loads(text) if text else None
    except urllib.error.HTTPError as err:
        err.read()
        return err.code, None


def scrape(url):
    """{(name, frozenset(labels)): value} of every sample, and the response's Content-Type."""
    with urllib.request.urlopen(url, timeout=10) as resp:
        content_type = resp.headers["Content-Type"]
        text = resp.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, frozenset(s.labels.items()))] = s.value
    return samples, content_type


def delta(before, after, name, **labels):
    key = (name, frozenset(labels.items()))
    return after.get(key, 0) - before.get(key, 0)


def grpc_health(port):
    with grpc.insecure_channel("127.0.0.1:%d" % port) as channel:
        return channel.unary_unary("/grpc.health.v1.Health/Check")(b"", timeout=5)


class MetricsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        recordings = os.path.join(self.tmp.name, "recordings")
        os.makedirs(recordings)
        for i in range(VOICE_CALLS):
            with open(os.path.join(recordings, "call-%d.wav" % i), "wb") as f:
                f.write(stereo_wav())
        handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=recordings)
        handler.log_message = lambda *a: None
        self.files = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.files.serve_forever, daemon=True).start()
        self.files_base = "http://127.0.0.1:%d" % self.files.server_address[1]
        data = os.path.join(self.tmp.name, "data")
        self.server = ServeProcess(CALLEVAL, data, "--workers", "1", "--stt-workers", "0",
                                   "--allow-private-hosts", "127.0.0.1")
        with open(os.path.join(data, "bootstrap-key")) as f:
            self.key = f.read().strip()

    def tearDown(self):
        self.assertEqual(self.server.stop(), 0)
        self.files.shutdown()
        self.tmp.cleanup()

    def test_counters_move_as_the_workload_predicts(self):
        base, key = self.server.base, self.key
        self.assertIsNotNone(self.server.metrics_url, "".join(self.server.lines))
        status, agent = request("POST", base + "/api/v1/agents", key, {
            "name": "metrics", "phone_number": "+14155550123", "language_id": 1,
            "instructions": "Be helpful."})
        self.assertEqual(status, 201)
        balance_before = request("GET", base + "/api/v1/workspaces/current", key)[1][
            "credit_balance"]

        before, content_type = scrape(self.server.metrics_url)
        self.assertEqual(content_type, "text/plain; version=0.0.4; charset=utf-8")

        calls = []
        for i in range(VOICE_CALLS):
            status, call = request("POST", base + INGEST, key, {
                "call_identifier": "voice-%d" % i, "agent_id": agent["id"],
                "recording_url": "%s/call-%d.wav" % (self.files_base, i),
                "metric_ids": VOICE_METRICS})
            self.assertEqual(status, 201, call)
            calls.append(call["id"])
        for i in range(TEXT_CALLS):
            status, call = request("POST", base + INGEST, key, {
                "call_identifier": "text-%d" % i, "agent_id": agent["id"],
                "metric_ids": TEXT_METRICS,
                "transcript": [{"role": "User", "content": "hello", "start_time": 0,
                                "end_time": 1},
                               {"role": "AI Assistant", "content": "hi, how can I help",
                                "start_time": 1, "end_time": 3}]})
            self.assertEqual(status, 201, call)
            calls.append(call["id"])
        # Answered 4xx: a body that is not JSON, an agent that does not exist (twice), a path
        # no route has (three times, /metrics on the public edge among them), no key.
        self.assertEqual(request("POST", base + INGEST, key, raw=b"{not json")[0], 400)
        for _ in range(2):
            self.assertEqual(request("GET", base + "/api/v1/agents/987654", key)[0], 404)
        for path in ("/metrics", "/no/such/path", "/api/v1/nope"):
            self.assertEqual(request("GET", base + path, key)[0], 404, path)
        self.assertEqual(request("GET", base + "/api/v1/agents/%d" % agent["id"])[0], 401)
        for _ in range(3):
            grpc_health(self.server.grpc_port)

        deadline = time.time() + 120
        while True:
            records = [request("GET", "%s%s/%d" % (base, INGEST, i), key)[1] for i in calls]
            if all(r["analysis_status"] in ("completed", "failed", "skipped") for r in records):
                break
            self.assertLess(time.time(), deadline, [r["analysis_status"] for r in records])
            time.sleep(0.2)
        self.assertEqual([r["analysis_status"] for r in records], ["completed"] * len(calls))
        balance_after = request("GET", base + "/api/v1/workspaces/current", key)[1][
            "credit_balance"]
        # A voice call deleted: its recording goes from the store (the local store's downloads
        # write their file in place, so this is the one store operation the workload makes).
        self.assertEqual(request("DELETE", "%s%s/%d" % (base, INGEST, calls[0]), key)[0], 204)
        after, _ = scrape(self.server.metrics_url)

        requests = "calleval_http_requests_total"
        self.assertEqual(delta(before, after, requests, route=INGEST, method="POST",
                               status="201"), VOICE_CALLS + TEXT_CALLS)
        self.assertEqual(delta(before, after, requests, route=INGEST, method="POST",
                               status="400"), 1)
        self.assertEqual(delta(before, after, requests, route="/api/v1/agents/{id}",
                               method="GET", status="404"), 2)
        self.assertEqual(delta(before, after, requests, route="/api/v1/agents/{id}",
                               method="GET", status="401"), 1)
        self.assertEqual(delta(before, after, requests, route="unmatched", method="GET",
                               status="404"), 3)
        self.assertEqual(delta(before, after, requests, route="/api/v1/workspaces/current",
                               method="GET", status="200"), 1)
        self.assertEqual(delta(before, after, "calleval_http_request_duration_seconds_count",
                               route=INGEST, method="POST"), VOICE_CALLS + TEXT_CALLS + 1)
        # No raw path becomes a label.
        for name, labels in after:
            route = dict(labels).get("route")
            self.assertNotIn("987654", route or "", name)

        # One queue wait per call scored, one download wait per recording.
        waits = "calleval_queue_wait_seconds_count"
        self.assertEqual(delta(before, after, waits, queue="analysis"), len(calls))
        self.assertEqual(delta(before, after, waits, queue="downloads"), VOICE_CALLS)
        self.assertEqual(after[("calleval_queue_depth", frozenset({"queue": "analysis"}.items()))],
                         0)
        self.assertGreater(delta(before, after, "calleval_worker_busy_seconds_total",
                                 pool="analysis"), 0)

        # Credits: charged what the planned metrics cost, refunded what the calls did not use.
        charged = VOICE_CALLS * len(VOICE_METRICS) + TEXT_CALLS * len(TEXT_METRICS)
        used = sum(r["credits_used"] for r in records)
        self.assertEqual(delta(before, after, "calleval_credits_total", kind="charged"), charged)
        self.assertEqual(delta(before, after, "calleval_credits_total", kind="refunded"),
                         charged - used)
        self.assertEqual(balance_before - balance_after, used)

        self.assertEqual(delta(before, after, "calleval_grpc_server_handled_total",
                               method="/grpc.health.v1.Health/Check", code="OK"), 3)
        self.assertGreater(delta(before, after, "calleval_db_transaction_duration_seconds_count",
                                 backend="sqlite", kind="write"), 0)
        self.assertEqual(delta(before, after, "calleval_blob_store_duration_seconds_count",
                               backend="local", operation="delete"), 1)
        self.assertEqual(delta(before, after, "calleval_blob_store_errors_total",
                               backend="local", operation="delete"), 0)
        self.assertEqual(delta(before, after, requests,
                               route="/api/public/v1/calls/{call_identifier_or_id}",
                               method="DELETE", status="204"), 1)

    def test_admin_listener_serves_metrics_only(self):
        admin = self.server.metrics_url.rsplit("/", 1)[0]
        for path in ("/", "/healthz", "/metrics/extra", "/api/v1/agents"):
            self.assertEqual(request("GET", admin + path)[0], 404, path)
        self.assertEqual(request("POST", admin + "/metrics", raw=b"")[0], 405)
        # The public edge's port is not the admin one, and does not answer /metrics.
        self.assertNotEqual(admin, self.server.base)
        self.assertEqual(request("GET", self.server.base + "/metrics")[0], 404)


if __name__ == "__main__":
    unittest.main()
