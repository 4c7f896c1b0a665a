#!/usr/bin/env python3
"""End to end: callevalctl against a running server (docs/operations.md, "Against a server").

`calls push` ingests a manifest whose recordings are served over loopback, and with --wait
gates on the scored calls (--assert, --junit, --summary; exit 0 when every assertion holds, 1
when one fails, 2 for a malformed assertion or manifest line); a push SIGKILLed half-way and run
again leaves exactly one call per manifest line and reports the earlier ones as existing; a
server rate-limiting to 2 requests per second answers 429 with Retry-After and every call still
goes in; `calls export` prints what the list API lists, as JSON lines and as CSV; `runs batch`
runs text scenarios against an internal agent played by a local OpenAI-compatible stand-in,
and --min-pass-rate passes or fails the batch; with --repeat and --baseline it prints the
comparison with the baseline and --fail-on regressed exits 3 once the agent got worse.
"""
import csv
import http.server
import functools
import io
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request
import xml.etree.ElementTree as ElementTree

from serve_process import ServeProcess

CALLEVAL = os.environ.get("CALLEVAL_BIN")
CALLEVALCTL = os.environ.get("CALLEVALCTL_BIN")
CORPUS = os.environ.get("CALLEVAL_CORPUS_DIR", "")
# The corpus call the pushes play: plain turn-taking, agent latencies 600-1300 ms.
RECORDING = "basic_stereo.wav"
# Audio metrics only: nothing waits for a transcription, the LLM plays no part.
AUDIO_METRICS = [1, 2, 10]
# The fixed columns of `calls export --format csv`, in order (docs/operations.md).
CSV_FIXED_COLUMNS = ["id", "call_identifier", "agent_id", "call_timestamp", "observation_type",
                     "analysis_status", "transcription_status", "duration_seconds", "tag",
                     "label", "credits_used", "failure_reason"]
# A caller line that makes the stand-in LLM refuse the agent's turn: that run fails.
REFUSED = "PLEASE-REFUSE"
# In an agent's instructions: the stand-in's agent no longer says that the caller is booked.
WORSE = "WORSE-AGENT-VERSION"


def ctl(*args, env=None, timeout=300):
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("CALLEVAL_")}
    full_env.update(env or {})
    return subprocess.run([CALLEVALCTL, *args], capture_output=True, text=True,
                          timeout=timeout, env=full_env)


def lines_of(stdout):
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


class Api:
    """The REST API as a client sees it; 429 answers are waited out as Retry-After says."""

    def __init__(self, base, key):
        self.base, self.key = base, key

    def __call__(self, method, path, body=None):
        for _ in range(60):
            req = urllib.request.Request(
                self.base + path, method=method,
                data=json.dumps(body).encode() if body is not None else None,
                headers={"Authorization": "Bearer " + self.key,
                         "Content-Type": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=30) as resp:
                    raw = resp.read()
                    return resp.status, json.loads(raw) if raw else None
            except urllib.error.HTTPError as err:
                raw = err.read()
                if err.code == 429:
                    time.sleep(float(err.headers.get("Retry-After", "1")))
                    continue
                return err.code, json.loads(raw) if raw else None
        raise AssertionError("still rate-limited after 60 attempts")

    def calls_of(self, agent):
        calls, page = [], 1
        while True:
            status, body = self(
                "GET", f"/api/public/v1/calls?agent_id={agent}&per_page=100&page={page}")
            assert status == 200, body
            calls.extend(body["data"])
            if page >= body["pagination"]["total_pages"]:
                return calls
            page += 1

    def agent(self, name):
        status, agent = self("POST", "/api/v1/agents", {
            "name": name, "phone_number": "+14155550100", "language_id": 1,
            "instructions": "Book appointments for the clinic's patients.",
            "opening_message": {"text": "Smile Clinic, how can I help?"}})
        assert status == 201, agent
        return agent["id"]


class FakeLlm(http.server.BaseHTTPRequestHandler):
    """POST /v1/chat/completions: the agent says a line and never ends the call; a request
    whose messages hold REFUSED is refused with HTTP 400, as a provider refuses a prompt; an
    agent whose instructions hold WORSE leaves out that the caller is booked."""

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))))
        text = " ".join(str(m.get("content")) for m in body.get("messages", []))
        if REFUSED in text:
            answer, status = {"error": {"message": "refused", "type": "invalid_request_error",
                                        "param": None, "code": None}}, 400
        else:
            line = "Certainly." if WORSE in text else "Certainly, you are booked for Monday."
            content = json.dumps({"message": line, "end_call": False})
            answer, status = {
                "id": "chatcmpl-1", "object": "chat.completion", "created": int(time.time()),
                "model": body.get("model", "m"),
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": content}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 10, "total_tokens": 20}}, 200
        raw = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def log_message(self, *args):
        pass


def serve_in_thread(handler):
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    return httpd, f"http://127.0.0.1:{httpd.server_address[1]}"


class ServerTestCase(unittest.TestCase):
    SERVE_FLAGS = []

    @classmethod
    def setUpClass(cls):
        if not os.path.exists(os.path.join(CORPUS, RECORDING)):
            raise unittest.SkipTest(f"no {RECORDING} in the test corpus {CORPUS!r}")
        cls.dir = tempfile.mkdtemp()
        files = functools.partial(http.server.SimpleHTTPRequestHandler, directory=CORPUS)
        files.log_message = lambda *a: None
        cls.files_httpd, cls.files = serve_in_thread(files)
        cls.llm_httpd, llm = serve_in_thread(FakeLlm)
        data = os.path.join(cls.dir, "data")
        cls.server = ServeProcess(CALLEVAL, data, "--allow-private-hosts", "127.0.0.1",
                                  "--llm-base-url", llm + "/v1", "--llm-api-key", "sk-test",
                                  "--llm-model", "gpt-test", *cls.SERVE_FLAGS)
        with open(os.path.join(data, "bootstrap-key")) as f:
            cls.key = f.read().strip()
        cls.api = Api(cls.server.base, cls.key)

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        cls.files_httpd.shutdown()
        cls.llm_httpd.shutdown()
        subprocess.run(["rm", "-rf", cls.dir], check=False)

    def remote(self, *args):
        return ("--url", self.server.base, "--key", self.key, *args)

    def manifest(self, name, bodies):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            for body in bodies:
                f.write((body if isinstance(body, str) else json.dumps(body)) + "\n")
        return path

    def voice_call(self, identifier, agent, **extra):
        return {"call_identifier": identifier, "agent_id": agent,
                "recording_url": f"{self.files}/{RECORDING}", "metric_ids": AUDIO_METRICS,
                **extra}

    def text_call(self, identifier, agent):
        return {"call_identifier": identifier, "agent_id": agent, "metric_ids": [12],
                "transcript": [{"role": "User", "content": "hello", "start_time": 0,
                                "end_time": 1},
                               {"role": "AI Assistant", "content": "hi there",
                                "start_time": 1.5, "end_time": 2.5}]}


class PushTest(ServerTestCase):
    def test_push_and_wait_gates_on_the_results(self):
        agent = self.api.agent("push-wait")
        path = self.manifest("wait.jsonl", [
            self.voice_call(f"wait-{i}", agent,
                            call_timestamp=f"2026-03-01T1{i}:00:00Z") for i in range(4)])
        junit = os.path.join(self.dir, "wait.xml")
        summary = os.path.join(self.dir, "wait.json")
        result = ctl("calls", "push", path, *self.remote(
            "--wait", "--timeout", "240", "--assert", "latency.p95_ms <= 5000",
            "--assert", "latency.status==completed", "--assert", "duration_seconds>0",
            "--junit", junit, "--summary", summary))
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        lines = lines_of(result.stdout)
        self.assertEqual([line["call_identifier"] for line in lines],
                         [f"wait-{i}" for i in range(4)])
        for line in lines:
            self.assertEqual(line["status"], "created", line)
            self.assertEqual(line["analysis_status"], "completed", line)
            self.assertEqual([o["outcome"] for o in line["outcomes"]], ["passed"] * 3, line)
        tree = ElementTree.parse(junit)
        cases = tree.getroot().iter("testcase")
        self.assertEqual(len(list(cases)), 4 * 3)
        self.assertEqual(len(list(tree.getroot().iter("failure"))), 0)
        with open(summary) as f:
            report = json.load(f)
        self.assertEqual(report["exit_code"], 0)
        self.assertEqual(report["totals"]["passed"], 12)
        # The figures are the server's: the call record's latency.
        status, record = self.api("GET", f"/api/public/v1/calls/{lines[0]['id']}")
        latency = next(m for m in record["standard_metrics"]
                       if m["standard_metric_key"] == "latency")
        case = next(c for c in report["cases"] if c["name"] == "wait-0")
        self.assertAlmostEqual(float(case["figures"]["latency.p95_ms"]),
                               latency["result"]["p95_ms"])

        # The same calls again: already pushed, and an assertion that does not hold.
        result = ctl("calls", "push", path, *self.remote(
            "--wait", "--assert", "latency.p95_ms<100", "--junit", junit, "--summary", summary))
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        lines = lines_of(result.stdout)
        self.assertEqual({line["status"] for line in lines}, {"existing"})
        self.assertIn("FAIL wait-0: latency.p95_ms", result.stderr)
        failures = list(ElementTree.parse(junit).getroot().iter("failure"))
        self.assertEqual(len(failures), 4)
        with open(summary) as f:
            report = json.load(f)
        self.assertEqual((report["exit_code"], report["totals"]["failed"]), (1, 4))
        self.assertEqual(len(self.api.calls_of(agent)), 4)

        # A malformed assertion is a usage error: nothing is pushed.
        result = ctl("calls", "push", path, *self.remote("--wait", "--assert", "latency.p95_ms"))
        self.assertEqual(result.returncode, 2, result.stdout + result.stderr)
        self.assertIn("--assert", result.stderr)
        result = ctl("calls", "push", path, *self.remote("--assert", "latency.p95_ms<1"))
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("--assert needs --wait", result.stderr)

    def test_push_reports_each_line_and_refused_lines(self):
        agent = self.api.agent("push-lines")
        path = self.manifest("lines.jsonl", [
            self.text_call("line-1", agent),
            {"call_identifier": "line-2", "agent_id": agent},  # neither recording nor transcript
            "",
            self.text_call("line-3", agent)])
        # Server and key from the environment.
        result = ctl("calls", "push", path, env={"CALLEVAL_URL": self.server.base,
                                                 "CALLEVAL_API_KEY": self.key})
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        lines = {line["call_identifier"]: line for line in lines_of(result.stdout)}
        self.assertEqual(lines["line-1"]["status"], "created")
        self.assertEqual(lines["line-3"]["status"], "created")
        self.assertEqual(lines["line-2"]["status"], "error")
        self.assertIsNone(lines["line-2"]["id"])
        self.assertIn("recording_or_transcript_required", lines["line-2"]["error"])
        self.assertIn("line-2 (line 2)", result.stderr)
        self.assertNotIn(self.key, result.stdout + result.stderr)
        listed = {c["call_identifier"]: c["id"] for c in self.api.calls_of(agent)}
        self.assertEqual(listed, {"line-1": lines["line-1"]["id"],
                                  "line-3": lines["line-3"]["id"]})

        # A manifest line without call_identifier: exit 2 naming it, and nothing is sent.
        bad = self.manifest("bad.jsonl", [self.text_call("bad-1", agent),
                                          {"agent_id": agent, "transcript": []}])
        result = ctl("calls", "push", bad, *self.remote())
        self.assertEqual(result.returncode, 2, result.stdout + result.stderr)
        self.assertIn("bad.jsonl:2", result.stderr)
        self.assertIn("call_identifier", result.stderr)
        bad = self.manifest("bad2.jsonl", [self.text_call("bad-1", agent), "{not json"])
        result = ctl("calls", "push", bad, *self.remote())
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("bad2.jsonl:2", result.stderr)
        self.assertNotIn("bad-1", [c["call_identifier"] for c in self.api.calls_of(agent)])
        # No server: a usage error.
        result = ctl("calls", "push", path)
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("--url", result.stderr)

    def test_export_prints_what_the_list_api_lists(self):
        agent = self.api.agent("export")
        bodies = [self.voice_call(f"exp-{i}", agent, call_timestamp=f"2026-04-0{i + 1}T09:00:00Z",
                                  tag="a,b" if i == 0 else None, label='say "hi"')
                  for i in range(3)]
        result = ctl("calls", "push", self.manifest("export.jsonl", bodies),
                     *self.remote("--wait", "--timeout", "240"))
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        listed = self.api.calls_of(agent)
        self.assertEqual(len(listed), 3)

        result = ctl("calls", "export", *self.remote("--agent", str(agent), "--format", "jsonl"))
        self.assertEqual(result.returncode, 0, result.stderr)
        exported = lines_of(result.stdout)
        # A fresh presigned link on every read: everything else is the same record.
        strip = lambda call: {k: v for k, v in call.items() if k != "presigned_recording_url"}
        self.assertEqual([strip(c) for c in exported], [strip(c) for c in listed])

        output = os.path.join(self.dir, "export.csv")
        result = ctl("calls", "export", *self.remote("--agent", str(agent), "--format", "csv",
                                                     "--output", output))
        self.assertEqual(result.returncode, 0, result.stderr)
        with open(output, newline="") as f:
            rows = list(csv.reader(f))
        header, rows = rows[0], rows[1:]
        self.assertEqual(header[:len(CSV_FIXED_COLUMNS)], CSV_FIXED_COLUMNS)
        figures = header[len(CSV_FIXED_COLUMNS):]
        self.assertEqual(figures, sorted(figures))
        self.assertIn("latency.p95_ms", figures)
        self.assertIn("talk_ratio.ai_ratio", figures)
        self.assertEqual([row[1] for row in rows], [c["call_identifier"] for c in listed])
        for row, call in zip(rows, listed):
            cells = dict(zip(header, row))
            self.assertEqual(int(cells["id"]), call["id"])
            self.assertEqual(cells["analysis_status"], "completed")
            self.assertEqual(cells["label"], 'say "hi"')
            self.assertEqual(cells["tag"], call["tag"] or "")
            latency = next(m for m in call["standard_metrics"]
                           if m["standard_metric_key"] == "latency")
            self.assertAlmostEqual(float(cells["latency.p95_ms"]), latency["result"]["p95_ms"])
            self.assertEqual(cells["latency.status"], "completed")

        # --since / --until: the list API's call_timestamp window.
        result = ctl("calls", "export", *self.remote(
            "--agent", str(agent), "--format", "jsonl", "--since", "2026-04-02T09:00:00Z",
            "--until", "2026-04-03"))
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual([c["call_identifier"] for c in lines_of(result.stdout)], ["exp-1"])
        result = ctl("calls", "export", *self.remote("--agent", str(agent), "--format", "xml"))
        self.assertEqual(result.returncode, 2, result.stderr)
        result = ctl("calls", "export", *self.remote("--agent", str(agent), "--format", "csv",
                                                     "--since", "yesterday"))
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("--since", result.stderr)

    def test_runs_batch_gates_on_the_pass_rate(self):
        agent = self.api.agent("runs")
        scenarios = []
        for name, script in (("book", ["I need an appointment.", "Thanks, bye."]),
                             ("again", ["Can I come on Monday?"]),
                             ("refused", [f"{REFUSED} this one."])):
            status, scenario = self.api("POST", "/api/v1/scenarios", {
                "agent_id": agent, "name": name, "caller_script": script, "max_turns": 5})
            self.assertEqual(status, 201, scenario)
            scenarios.append(scenario["id"])
        book, again, refused = scenarios
        junit = os.path.join(self.dir, "runs.xml")
        summary = os.path.join(self.dir, "runs.json")
        result = ctl("runs", "batch", *self.remote(
            "--agent", str(agent), "--scenarios", f"{book},{again}", "--channel", "text",
            "--wait", "--timeout", "240", "--min-pass-rate", "0.9",
            "--assert", "run.passed==true", "--junit", junit, "--summary", summary))
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        lines = lines_of(result.stdout)
        self.assertEqual([line["status"] for line in lines[:-1]], ["completed", "completed"])
        self.assertEqual(lines[-1]["pass_rate"], 1.0)
        self.assertEqual(lines[-1]["passed"], 2)
        self.assertEqual(len(list(ElementTree.parse(junit).getroot().iter("testcase"))), 2)
        with open(summary) as f:
            report = json.load(f)
        self.assertEqual(report["exit_code"], 0)
        self.assertEqual(report["cases"][0]["figures"]["run.status"], "completed")

        # One run of two fails: pass rate 0.5.
        result = ctl("runs", "batch", *self.remote(
            "--agent", str(agent), "--scenarios", f"{book},{refused}", "--channel", "text",
            "--wait", "--timeout", "240", "--min-pass-rate", "0.9"))
        self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
        lines = lines_of(result.stdout)
        self.assertEqual(sorted(line["status"] for line in lines[:-1]), ["completed", "failed"])
        self.assertEqual(lines[-1]["pass_rate"], 0.5)
        self.assertIn("below --min-pass-rate 0.9", result.stderr)
        batch = lines[-1]["batch_run_id"]
        status, body = self.api("GET", f"/api/v1/batch_runs/{batch}")
        self.assertEqual((status, body["summary"]["failed"]), (200, 1), body)

        result = ctl("runs", "batch", *self.remote(
            "--agent", str(agent), "--scenarios", f"{book},{refused}", "--channel", "text",
            "--wait", "--timeout", "240", "--min-pass-rate", "0.5"))
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        result = ctl("runs", "batch", *self.remote(
            "--agent", str(agent), "--scenarios", f"{book}", "--min-pass-rate", "0.5"))
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("--min-pass-rate needs --wait", result.stderr)

    def test_runs_batch_gates_on_the_comparison_with_a_baseline(self):
        status, agent = self.api("POST", "/api/v1/agents", {
            "name": "compared", "phone_number": "+14155550100", "language_id": 1,
            "instructions": "Book appointments for the clinic's patients.",
            "opening_message": {"text": "Smile Clinic, how can I help?"}})
        self.assertEqual(status, 201, agent)
        agent = agent["id"]
        status, metric = self.api("POST", "/api/v1/metrics", {
            "name": f"Said booked {agent}", "metrics_type": "specific_text_/_phrase_check",
            "phrases": ["booked"], "speaker": "AI Assistant", "agent_ids": [agent],
            "structured_output": [
                {"condition": "equals", "set_metrics_name": "booked",
                 "as_metrics_expected_value": "true",
                 "outcome_classification": "meets_expectations"},
                {"condition": "equals", "set_metrics_name": "booked",
                 "as_metrics_expected_value": "false",
                 "outcome_classification": "requires_attention"}]})
        self.assertEqual(status, 201, metric)
        status, scenario = self.api("POST", "/api/v1/scenarios", {
            "agent_id": agent, "name": "book", "caller_script": ["I need an appointment."],
            "metric_ids": [metric["id"]]})
        self.assertEqual(status, 201, scenario)
        batch = ("--agent", str(agent), "--scenarios", str(scenario["id"]), "--channel", "text",
                 "--repeat", "10", "--concurrency", "10", "--timeout", "240")

        def split(stdout):
            """The run lines and the totals line (JSON), then the comparison's table."""
            lines = stdout.splitlines()
            json_lines = [json.loads(line) for line in lines if line.startswith("{")]
            table = [line for line in lines if line.strip() and not line.startswith("{")]
            return json_lines, table

        result = ctl("runs", "batch", *self.remote(*batch, "--wait"))
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        lines, table = split(result.stdout)
        self.assertEqual(table, [])
        self.assertEqual(lines[-1]["total"], 10)
        self.assertEqual(lines[-1]["passed"], 10)
        baseline = lines[-1]["batch_run_id"]

        # The same agent again: unchanged, the gate holds.
        result = ctl("runs", "batch", *self.remote(*batch, "--baseline", str(baseline),
                                                   "--fail-on", "regressed,inconclusive"))
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        lines, table = split(result.stdout)
        self.assertEqual(len(lines), 11)
        self.assertEqual(table[0], f"batch run {lines[-1]['batch_run_id']} against baseline "
                                   f"{baseline}: unchanged")
        self.assertEqual(table[1].split(), ["scenario", "metric", "baseline", "->", "current",
                                            "difference", "[95%", "ci]", "p", "runs",
                                            "verdict"])
        self.assertEqual(len(table), 4, table)  # passed and the phrase check
        self.assertEqual(table[2].split()[:5], [str(scenario["id"]), "passed", "1.000", "->",
                                                "1.000"])
        self.assertEqual(table[2].split()[-2:], ["10/10", "unchanged"])
        status, compared = self.api(
            "GET", f"/api/v1/batch_runs/{lines[-1]['batch_run_id']}/comparison")
        self.assertEqual((status, compared["verdict"]), (200, "unchanged"), compared)

        # A worse version of the agent: regressed, exit 3.
        status, body = self.api("PATCH", f"/api/v1/agents/{agent}", {
            "instructions": f"Book appointments. {WORSE}"})
        self.assertEqual(status, 200, body)
        result = ctl("runs", "batch", *self.remote(*batch, "--baseline", str(baseline),
                                                   "--fail-on", "regressed"))
        self.assertEqual(result.returncode, 3, result.stdout + result.stderr)
        lines, table = split(result.stdout)
        self.assertEqual(lines[-1]["passed"], 0)
        self.assertTrue(table[0].endswith(": regressed"), table)
        self.assertEqual(table[2].split()[:5], [str(scenario["id"]), "passed", "1.000", "->",
                                                "0.000"])
        self.assertEqual(table[2].split()[-1], "regressed")
        self.assertIn(f"the comparison with batch run {baseline} is regressed "
                      "(--fail-on regressed)", result.stderr)
        # Not in --fail-on: the command passes, the table still says it.
        result = ctl("runs", "batch", *self.remote(*batch, "--baseline", str(baseline),
                                                   "--fail-on", "improved"))
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)

        # Usage errors: exit 2.
        result = ctl("runs", "batch", *self.remote(*batch, "--fail-on", "regressed"))
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("--fail-on needs --baseline", result.stderr)
        result = ctl("runs", "batch", *self.remote(*batch, "--baseline", str(baseline),
                                                   "--fail-on", "worse"))
        self.assertEqual(result.returncode, 2, result.stderr)
        self.assertIn("not a verdict: worse", result.stderr)


class RateLimitedPushTest(ServerTestCase):
    """Two requests per second per key: pushes meet 429 with Retry-After."""
    SERVE_FLAGS = ["--rate-limit", "2"]
    CALLS = 12

    def test_push_killed_half_way_then_run_again(self):
        agent = self.api.agent("resume")
        identifiers = [f"resume-{i:02d}" for i in range(self.CALLS)]
        path = self.manifest("resume.jsonl", [self.text_call(i, agent) for i in identifiers])
        args = [CALLEVALCTL, "calls", "push", path, *self.remote("--concurrency", "2")]
        env = {k: v for k, v in os.environ.items() if not k.startswith("CALLEVAL_")}
        first = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                 text=True, env=env)
        printed = []
        for line in first.stdout:
            printed.append(json.loads(line))
            if len(printed) == 3:
                first.send_signal(signal.SIGKILL)
                break
        first.wait(timeout=30)
        self.assertEqual(first.returncode, -signal.SIGKILL)
        # An ingest the server had received before the kill is answered (to no one) meanwhile.
        time.sleep(1)
        pushed_before = {c["call_identifier"] for c in self.api.calls_of(agent)}
        self.assertGreaterEqual(len(pushed_before), 3)
        self.assertLess(len(pushed_before), self.CALLS, "the first push was not cut short")

        result = ctl("calls", "push", path, *self.remote("--concurrency", "4"))
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        lines = {line["call_identifier"]: line for line in lines_of(result.stdout)}
        self.assertEqual(sorted(lines), identifiers)
        for line in printed:
            self.assertEqual(lines[line["call_identifier"]]["status"], "existing")
            self.assertEqual(lines[line["call_identifier"]]["id"], line["id"])
        for identifier in identifiers:
            expected = "existing" if identifier in pushed_before else "created"
            self.assertEqual(lines[identifier]["status"], expected, identifier)
        self.assertRegex(result.stderr, r"\d+ requests were retried")
        listed = self.api.calls_of(agent)
        self.assertEqual(sorted(c["call_identifier"] for c in listed), identifiers)
        self.assertEqual({c["id"] for c in listed}, {line["id"] for line in lines.values()})

        # Waiting under the rate limit too: the polls meet 429 and still see every call final.
        result = ctl("calls", "push", path, *self.remote(
            "--wait", "--timeout", "240", "--assert", "call.analysis_status==completed"))
        self.assertEqual(result.returncode, 0, result.stdout + result.stderr)
        self.assertEqual(len(lines_of(result.stdout)), self.CALLS)


if __name__ == "__main__":
    if not CALLEVAL or not CALLEVALCTL:
        sys.exit("set CALLEVAL_BIN and CALLEVALCTL_BIN")
    unittest.main()
