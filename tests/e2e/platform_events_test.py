#!/usr/bin/env python3
"""End to end: production calls streamed in from Vapi and Retell (docs/api.md §5.9).

A real `calleval serve`; the platforms' end-of-call webhooks are posted as the platforms send
them. Retell's are signed by Retell's own SDK (tools/retell/sign.js, retell-sdk pinned by its
lock file), so the service is held to Retell's wire format; Vapi's carry the server URL's secret
the ways Vapi sends it (X-Vapi-Secret, a bearer token, an HMAC credential's signature), which no
SDK of Vapi's computes. Each verified event makes one call of the agent whose assistant_id it
names, with the turns, metadata, stereo recording and (Retell's) agent version mapped; the
recording is fetched in the background from a loopback server. A redelivery answers 200 and
makes nothing; a forged or stale signature is 401 and stores nothing; an assistant no agent has
is acknowledged (200, "ignored") and stores nothing; other event types are acknowledged and
ignored.
"""
import hashlib
import hmac
import http.server
import io
import json
import math
import os
import struct
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request
import wave

from serve_process import ServeProcess

CALLEVAL = os.environ.get("CALLEVAL_BIN")
RETELL_TOOLS = os.environ.get("CALLEVAL_TOOLS_RETELL_DIR", "")
NODE = os.environ.get("NODE", "node")
VAPI_SECRET = "vapi-webhook-secret-0123456789"
RETELL_KEY = "key_retell_0123456789abcdef"


def stereo_wav(seconds=2.0, rate=8000):
    """A short stereo WAV: a tone on each channel."""
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(2)
        w.setsampwidth(2)
        w.setframerate(rate)
        frames = bytearray()
        for i in range(int(seconds * rate)):
            left = int(8000 * math.sin(2 * math.pi * 440 * i / rate))
            right = int(8000 * math.sin(2 * math.pi * 660 * i / rate))
            frames += struct.pack("<hh", left, right)
        w.writeframes(bytes(frames))
    return out.getvalue()


class Recordings(http.server.BaseHTTPRequestHandler):
    """GET /<anything>.wav: the same short stereo recording; counts the fetches. Also Retell's
    agent API (--retell-api-url points here): an external_retell agent is pulled from it when
    it is created, as the workspace has a Retell key."""
    wav = stereo_wav()
    fetched = []

    def do_GET(self):
        if self.path.startswith("/get-agent/") or self.path.startswith("/get-retell-llm/"):
            return self.retell()
        Recordings.fetched.append(self.path)
        self.send_response(200)
        self.send_header("Content-Type", "audio/wav")
        self.send_header("Content-Length", str(len(self.wav)))
        self.end_headers()
        self.wfile.write(self.wav)

    def retell(self):
        if self.headers.get("Authorization") != "Bearer " + RETELL_KEY:
            return self.answer(401, {"status": "error", "message": "Invalid API Key"})
        name = self.path.rsplit("/", 1)[1]
        if self.path.startswith("/get-agent/"):
            return self.answer(200, {"agent_id": name, "language": "en-US",
                                     "response_engine": {"type": "retell-llm",
                                                         "llm_id": "llm_events"}})
        return self.answer(200, {"llm_id": name, "general_prompt": "Book tables.",
                                 "begin_message": "Hello, how can I help?"})

    def answer(self, status, body):
        raw = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args):
        pass


def retell_sign(body, api_key=RETELL_KEY, at_ms=None):
    """x-retell-signature for `body` as Retell's SDK makes it."""
    args = [NODE, os.path.join(RETELL_TOOLS, "sign.js"), api_key]
    if at_ms is not None:
        args.append(str(at_ms))
    result = subprocess.run(args, input=body, capture_output=True, timeout=60)
    assert result.returncode == 0, result.stderr.decode()
    return result.stdout.decode()


class PlatformEventsTest(unittest.TestCase):
    @classmethod
    def start_servers(cls, data):
        """One process with every role; `server` is the one whose edge the test talks to."""
        cls.server = ServeProcess(CALLEVAL, data, "--allow-private-hosts", "127.0.0.1",
                                  "--retell-api-url", cls.files)
        cls.processes.append(cls.server)

    @classmethod
    def setUpClass(cls):
        if not os.path.exists(os.path.join(RETELL_TOOLS, "node_modules", "retell-sdk")):
            raise AssertionError(
                f"retell-sdk is not installed in {RETELL_TOOLS!r}: run scripts/setup")
        cls.dir = tempfile.mkdtemp()
        cls.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Recordings)
        threading.Thread(target=cls.httpd.serve_forever, daemon=True).start()
        cls.files = f"http://127.0.0.1:{cls.httpd.server_address[1]}"
        data = os.path.join(cls.dir, "data")
        cls.ack_ms = []
        cls.processes = []
        # Runs even when the rest of setUpClass fails, so no server outlives the test.
        cls.addClassCleanup(cls.cleanup)
        cls.start_servers(data)
        with open(os.path.join(data, "bootstrap-key")) as f:
            cls.key = f.read().strip()
        status, _ = cls.api("PUT", "/api/v1/integrations/vapi",
                            {"webhook_secret": VAPI_SECRET})
        assert status == 200
        status, _ = cls.api("PUT", "/api/v1/integrations/retell", {"api_key": RETELL_KEY})
        assert status == 200
        cls.vapi_agent = cls.agent("vapi-agent", "external_vapi", "asst-vapi-1")
        cls.retell_agent = cls.agent("retell-agent", "external_retell", "agent_retell_1")

    @classmethod
    def cleanup(cls):
        for process in reversed(cls.processes):
            process.stop()
        cls.httpd.shutdown()
        subprocess.run(["rm", "-rf", cls.dir], check=False)
        if cls.ack_ms:
            ordered = sorted(cls.ack_ms)
            print(f"{cls.__name__}: event acknowledgements: {len(ordered)}, median "
                  f"{ordered[len(ordered) // 2]:.1f} ms, max {ordered[-1]:.1f} ms",
                  file=sys.stderr)

    @classmethod
    def api(cls, method, path, body=None):
        req = urllib.request.Request(
            cls.server.base + path, method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"Authorization": "Bearer " + cls.key, "Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as err:
            raw = err.read()
            return err.code, json.loads(raw) if raw else None

    @classmethod
    def agent(cls, name, source, assistant_id):
        status, agent = cls.api("POST", "/api/v1/agents", {
            "name": name, "phone_number": "+14155550100", "language_id": 1,
            "agent_source": source, "assistant_id": assistant_id})
        assert status == 201, agent
        return agent["id"]

    def post_event(self, provider, body, headers):
        """Posts the raw bytes as the platform does; (status, answer)."""
        req = urllib.request.Request(
            f"{self.server.base}/api/public/v1/integrations/{provider}/events", method="POST",
            data=body, headers={"Content-Type": "application/json", **headers})
        start = time.monotonic()
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                status, raw = resp.status, resp.read()
        except urllib.error.HTTPError as err:
            status, raw = err.code, err.read()
        self.ack_ms.append((time.monotonic() - start) * 1000)
        return status, json.loads(raw) if raw else None

    def calls_of(self, agent):
        status, body = self.api("GET", f"/api/public/v1/calls?agent_id={agent}&per_page=100")
        self.assertEqual(status, 200, body)
        return body["data"]

    def call(self, identifier):
        status, call = self.api("GET", f"/api/public/v1/calls/{identifier}")
        self.assertEqual(status, 200, call)
        return call

    def wait_for_recording(self, identifier):
        """The recording is fetched after the answer: poll until the call holds it."""
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            call = self.call(identifier)
            if call["presigned_recording_url"] or call["failure_reason"]:
                return call
            time.sleep(0.2)
        self.fail(f"the recording of {identifier} was never fetched")

    # Vapi

    def vapi_report(self, call_id, assistant_id="asst-vapi-1"):
        return json.dumps({"message": {
            "type": "end-of-call-report",
            "timestamp": int(time.time() * 1000),
            "endedReason": "customer-ended-call",
            "cost": 0.1234,
            "startedAt": "2026-11-28T10:00:00.000Z",
            "endedAt": "2026-11-28T10:00:42.000Z",
            "durationSeconds": 42.4,
            "call": {"id": call_id, "assistantId": assistant_id, "type": "inboundPhoneCall"},
            "customer": {"number": "+14155550199"},
            "artifact": {
                "recordingUrl": f"{self.files}/{call_id}-mono.wav",
                "stereoRecordingUrl": f"{self.files}/{call_id}-stereo.wav",
                "messages": [
                    {"role": "system", "message": "You are a receptionist.", "time": 0,
                     "secondsFromStart": 0},
                    {"role": "bot", "message": "Smile Clinic, how can I help?",
                     "time": 1764324000500, "endTime": 1764324002500,
                     "secondsFromStart": 0.5, "duration": 2000},
                    {"role": "user", "message": "I'd like an appointment.",
                     "time": 1764324003000, "endTime": 1764324004500,
                     "secondsFromStart": 3.0, "duration": 1500},
                    {"role": "tool_calls", "toolCalls": [], "time": 1764324005000,
                     "secondsFromStart": 5.0},
                ]}}}).encode()

    def test_vapi_report_with_the_secret_header_makes_one_call(self):
        body = self.vapi_report("vapi-call-1")
        status, answer = self.post_event("vapi", body, {"X-Vapi-Secret": VAPI_SECRET})
        self.assertEqual(status, 200, answer)
        self.assertEqual(answer["outcome"], "stored")
        self.assertEqual(len(answer["call_ids"]), 1)
        call = self.call("vapi-vapi-call-1")
        self.assertEqual(call["id"], answer["call_ids"][0])
        self.assertEqual(call["agent_id"], self.vapi_agent)
        self.assertEqual(call["observation_type"], "voice")
        self.assertEqual(call["recording_url"], f"{self.files}/vapi-call-1-stereo.wav")
        self.assertEqual(call["call_end_reason"], "customer-ended-call")
        self.assertEqual(call["call_direction"], "inbound")
        self.assertEqual(call["duration_seconds"], 42)
        self.assertEqual(call["call_timestamp"], "2026-11-28T10:00:00Z")
        self.assertEqual(call["metadata"], {"platform": "vapi", "ended_reason":
                                            "customer-ended-call", "cost": 0.1234})
        # Vapi's assistants have no version.
        self.assertIsNone(call["platform_version"])
        self.assertEqual(call["transcript"], [
            {"role": "AI Assistant", "content": "Smile Clinic, how can I help?",
             "start_time": 0.5, "end_time": 2.5},
            {"role": "User", "content": "I'd like an appointment.", "start_time": 3.0,
             "end_time": 4.5}])
        stored = self.wait_for_recording("vapi-vapi-call-1")
        self.assertIsNone(stored["failure_reason"], stored)
        self.assertIn("/vapi-call-1-stereo.wav", Recordings.fetched)

        # Redelivered: acknowledged, nothing new.
        status, again = self.post_event("vapi", body, {"X-Vapi-Secret": VAPI_SECRET})
        self.assertEqual(status, 200, again)
        self.assertEqual(again["outcome"], "duplicate")
        self.assertEqual(again["call_ids"], [])
        self.assertEqual(
            [c["call_identifier"] for c in self.calls_of(self.vapi_agent)].count(
                "vapi-vapi-call-1"), 1)

    def test_vapi_bearer_and_hmac_credentials_verify(self):
        body = self.vapi_report("vapi-call-2")
        status, answer = self.post_event("vapi", body,
                                         {"Authorization": "Bearer " + VAPI_SECRET})
        self.assertEqual((status, answer["outcome"]), (200, "stored"), answer)
        body = self.vapi_report("vapi-call-3")
        now = str(int(time.time()))
        digest = hmac.new(VAPI_SECRET.encode(), now.encode() + b"." + body,
                          hashlib.sha256).hexdigest()
        status, answer = self.post_event("vapi", body,
                                         {"X-Signature": digest, "X-Timestamp": now})
        self.assertEqual((status, answer["outcome"]), (200, "stored"), answer)
        self.call("vapi-vapi-call-2")
        self.call("vapi-vapi-call-3")

    def test_vapi_forged_secret_is_refused_and_stores_nothing(self):
        body = self.vapi_report("vapi-forged")
        for headers in ({"X-Vapi-Secret": "not-the-secret"},
                        {"Authorization": "Bearer not-the-secret"},
                        {"X-Signature": "00" * 32},
                        {}):
            status, answer = self.post_event("vapi", body, headers)
            self.assertEqual(status, 401, (headers, answer))
            self.assertEqual(answer["error"]["code"], "invalid_signature")
        status, _ = self.api("GET", "/api/public/v1/calls/vapi-vapi-forged")
        self.assertEqual(status, 404)

    def test_vapi_other_messages_and_unknown_assistants_are_acknowledged(self):
        status, answer = self.post_event(
            "vapi", json.dumps({"message": {"type": "status-update", "status": "ended",
                                            "call": {"id": "x"}}}).encode(), {})
        self.assertEqual((status, answer["outcome"]), (200, "ignored"), answer)
        body = self.vapi_report("vapi-unknown", assistant_id="asst-nobody")
        status, answer = self.post_event("vapi", body, {"X-Vapi-Secret": VAPI_SECRET})
        self.assertEqual((status, answer["outcome"]), (200, "ignored"), answer)
        status, _ = self.api("GET", "/api/public/v1/calls/vapi-vapi-unknown")
        self.assertEqual(status, 404)

    def test_malformed_bodies_are_400(self):
        status, answer = self.post_event("vapi", b"{not json", {"X-Vapi-Secret": VAPI_SECRET})
        self.assertEqual((status, answer["error"]["code"]), (400, "malformed_json"), answer)
        status, answer = self.post_event("retell", b"[]", {})
        self.assertEqual((status, answer["error"]["code"]), (400, "malformed_json"), answer)

    # Retell

    def retell_event(self, call_id, agent_id="agent_retell_1", event="call_analyzed"):
        return json.dumps({"event": event, "call": {
            "call_type": "phone_call", "call_id": call_id, "agent_id": agent_id,
            "agent_version": 4, "call_status": "ended", "direction": "outbound",
            "from_number": "+14155550100", "to_number": "+14155550142",
            "start_timestamp": 1764324000000, "end_timestamp": 1764324031500,
            "duration_ms": 31500,
            "recording_url": f"{self.files}/{call_id}-mono.wav",
            "recording_multi_channel_url": f"{self.files}/{call_id}-multi.wav",
            "disconnection_reason": "agent_hangup",
            "call_cost": {"combined_cost": 12.5, "total_duration_seconds": 32},
            "transcript": "Agent: Hello, this is Ava.\nUser: Hi.",
            "transcript_object": [
                {"role": "agent", "content": "Hello, this is Ava.",
                 "words": [{"word": "Hello,", "start": 0.4, "end": 0.8},
                           {"word": "this", "start": 0.9, "end": 1.0},
                           {"word": "is", "start": 1.0, "end": 1.1},
                           {"word": "Ava.", "start": 1.1, "end": 1.6}]},
                {"role": "user", "content": "Hi.",
                 "words": [{"word": "Hi.", "start": 2.2, "end": 2.5}]}],
            "call_analysis": {"call_successful": True}}}).encode()

    def test_retell_signed_by_the_sdk_makes_one_call(self):
        body = self.retell_event("call_r1")
        status, answer = self.post_event("retell", body,
                                         {"X-Retell-Signature": retell_sign(body)})
        self.assertEqual(status, 200, answer)
        self.assertEqual(answer["outcome"], "stored")
        call = self.call("retell-call_r1")
        self.assertEqual(call["id"], answer["call_ids"][0])
        self.assertEqual(call["agent_id"], self.retell_agent)
        self.assertEqual(call["recording_url"], f"{self.files}/call_r1-multi.wav")
        self.assertEqual(call["call_end_reason"], "agent_hangup")
        self.assertEqual(call["call_direction"], "outbound")
        self.assertEqual(call["customer_number"], "+14155550142")
        self.assertEqual(call["duration_seconds"], 32)
        self.assertEqual(call["call_timestamp"], "2025-11-28T10:00:00Z")
        self.assertEqual(call["metadata"], {"platform": "retell", "ended_reason": "agent_hangup",
                                            "cost": 0.125})
        # Retell's agent_version: the version of its agent that took the call.
        self.assertEqual(call["platform_version"], "4")
        self.assertEqual(call["transcript"], [
            {"role": "AI Assistant", "content": "Hello, this is Ava.", "start_time": 0.4,
             "end_time": 1.6},
            {"role": "User", "content": "Hi.", "start_time": 2.2, "end_time": 2.5}])
        stored = self.wait_for_recording("retell-call_r1")
        self.assertIsNone(stored["failure_reason"], stored)

        # Redelivered (Retell signs each attempt anew): acknowledged, nothing new.
        status, again = self.post_event("retell", body,
                                        {"X-Retell-Signature": retell_sign(body)})
        self.assertEqual((status, again["outcome"]), (200, "duplicate"), again)
        self.assertEqual(
            [c["call_identifier"] for c in self.calls_of(self.retell_agent)].count(
                "retell-call_r1"), 1)

    def test_retell_forged_or_stale_signatures_are_refused(self):
        body = self.retell_event("call_forged")
        cases = {
            "another key": retell_sign(body, api_key="key_someone_else"),
            "another body": retell_sign(self.retell_event("call_other")),
            "six minutes old": retell_sign(body, at_ms=int(time.time() * 1000) - 6 * 60 * 1000),
            "six minutes ahead": retell_sign(body,
                                             at_ms=int(time.time() * 1000) + 6 * 60 * 1000),
            "garbled": "v=1,d=zz",
        }
        for name, signature in cases.items():
            status, answer = self.post_event("retell", body, {"X-Retell-Signature": signature})
            self.assertEqual(status, 401, (name, answer))
            self.assertEqual(answer["error"]["code"], "invalid_signature", name)
        status, answer = self.post_event("retell", body, {})
        self.assertEqual(status, 401, answer)
        status, _ = self.api("GET", "/api/public/v1/calls/retell-call_forged")
        self.assertEqual(status, 404)
        # Four minutes old is within Retell's five.
        recent = retell_sign(body, at_ms=int(time.time() * 1000) - 4 * 60 * 1000)
        status, answer = self.post_event("retell", body, {"X-Retell-Signature": recent})
        self.assertEqual((status, answer["outcome"]), (200, "stored"), answer)

    def test_retell_other_events_and_unknown_agents_are_acknowledged(self):
        body = self.retell_event("call_started_1", event="call_started")
        status, answer = self.post_event("retell", body,
                                         {"X-Retell-Signature": retell_sign(body)})
        self.assertEqual((status, answer["outcome"]), (200, "ignored"), answer)
        body = self.retell_event("call_nobody", agent_id="agent_nobody")
        status, answer = self.post_event("retell", body,
                                         {"X-Retell-Signature": retell_sign(body)})
        self.assertEqual((status, answer["outcome"]), (200, "ignored"), answer)
        status, _ = self.api("GET", "/api/public/v1/calls/retell-call_nobody")
        self.assertEqual(status, 404)

    def test_only_post_is_served(self):
        status, answer = self.api("GET", "/api/public/v1/integrations/vapi/events")
        self.assertEqual(status, 405, answer)


class EdgeApartTest(PlatformEventsTest):
    """The same with the edge in a process of its own: it hands each event to the agents role's
    internal HandlePlatformEvent, which stores the call through the calls role."""

    @classmethod
    def start_servers(cls, data):
        backend = ServeProcess(CALLEVAL, data, "--roles", "accounts,agents,metrics,calls,scoring,runs",
                               "--allow-private-hosts", "127.0.0.1", "--retell-api-url", cls.files)
        addr = f"127.0.0.1:{backend.grpc_port}"
        cls.processes.append(backend)
        cls.server = ServeProcess(CALLEVAL, data, "--roles", "edge", "--accounts-addr", addr,
                                  "--agents-addr", addr, "--metrics-addr", addr,
                                  "--calls-addr", addr, grpc=False)
        cls.processes.append(cls.server)


if __name__ == "__main__":
    unittest.main()
