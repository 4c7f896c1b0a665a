#!/usr/bin/env python3
"""End to end: the server's log (docs/operations.md, "Logs") read from real processes' stderr.

- `--log-format json`: every line on stderr is one JSON object with time, level, role and msg;
  the access line names the client's X-Request-Id (echoed in the answer), an unusable one is
  replaced by a generated id, and a recording download that fails in the background logs a line
  with the call's id.
- Roles apart (an edge process and a process with the calls role, one data dir): the request id
  the client sent reaches the other process over gRPC, whose line for the failed call carries it.
- `--log-format text`: every line is `TIME LEVEL role=... key=value ... msg="..."`.
- A bad --log-format or --log-level exits 2 before anything starts.
"""
import json
import os
import re
import subprocess
import tempfile
import time
import unittest
import urllib.error
import urllib.request

from serve_process import ServeProcess

CALLEVAL = os.environ.get("CALLEVAL_BIN")
TIME = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")
TEXT_LINE = re.compile(
    r'^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z) (DEBUG|INFO|WARN|ERROR) role=(\S+)'
    r'((?: [a-z_]+=(?:"(?:[^"\\]|\\.)*"|[^ "=\\]+))*) msg="((?:[^"\\]|\\.)*)"$')
TEXT_FIELD = re.compile(r' ([a-z_]+)=("(?:[^"\\]|\\.)*"|[^ "=\\]+)')


def request(base, method, path, key=None, body=None, request_id=None):
    """(status, parsed body, the answer's x-request-id)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(base + path, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", "Bearer " + key)
    if request_id is not None:
        req.add_header("X-Request-Id", request_id)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None, resp.headers["x-request-id"]
    except urllib.error.HTTPError as err:
        raw = err.read()
        return err.code, json.loads(raw) if raw else None, err.headers["x-request-id"]


def stop_and_read_stderr(server):
    """SIGTERM, then everything the process wrote on stderr (it must have exited 0)."""
    code = server.stop()
    err = server.proc.stderr.read()
    if code != 0:
        raise AssertionError(f"exit {code}: {err}")
    return err


def json_lines(test, stderr):
    """Every line of `stderr` as a JSON object with the standard fields."""
    lines = []
    for raw in stderr.splitlines():
        try:
            line = json.loads(raw)
        except ValueError:
            test.fail(f"not a JSON line: {raw!r}")
        test.assertIsInstance(line, dict, raw)
        for field in ("time", "level", "role", "msg"):
            test.assertIn(field, line, raw)
        test.assertRegex(line["time"], TIME)
        test.assertIn(line["level"], ("debug", "info", "warn", "error"), raw)
        lines.append(line)
    return lines


def bootstrap_key(data_dir):
    with open(os.path.join(data_dir, "bootstrap-key")) as f:
        return f.read().strip()


class JsonLogTest(unittest.TestCase):
    def test_every_line_is_json_and_names_its_request_or_call(self):
        with tempfile.TemporaryDirectory() as data_dir:
            server = ServeProcess(CALLEVAL, data_dir, "--access-log", "true", "--log-format",
                                  "json", "--allow-private-hosts", "127.0.0.1")
            try:
                key = bootstrap_key(data_dir)
                status, _, echoed = request(server.base, "GET", "/api/v1/languages", key,
                                            request_id="e2e-json-1")
                self.assertEqual((status, echoed), (200, "e2e-json-1"))
                # Not usable (a quote and a space): replaced, never echoed or logged.
                status, _, replaced = request(server.base, "GET", "/api/v1/languages", key,
                                              request_id='forged" level=error x')
                self.assertEqual(status, 200)
                self.assertRegex(replaced, r"^[0-9a-f]{24}$")
                status, _, long_replaced = request(server.base, "GET", "/api/v1/languages", key,
                                                   request_id="x" * 129)
                self.assertRegex(long_replaced, r"^[0-9a-f]{24}$")
                # A recording that is not there: the background download fails for good.
                status, agent, _ = request(server.base, "POST", "/api/v1/agents", key, {
                    "name": "a", "phone_number": "+14155550123", "language_id": 1,
                    "instructions": "x"})
                self.assertEqual(status, 201, agent)
                status, call, _ = request(server.base, "POST", "/api/public/v1/calls", key, {
                    "call_identifier": "log-1", "agent_id": agent["id"],
                    "recording_url": server.base + "/no-such-recording.wav"},
                    request_id="e2e-ingest-1")
                self.assertEqual(status, 201, call)
                deadline = time.time() + 30
                while True:
                    _, read, _ = request(server.base, "GET", f"/api/public/v1/calls/{call['id']}",
                                         key)
                    if read["analysis_status"] == "failed":
                        break
                    self.assertLess(time.time(), deadline, read)
                    time.sleep(0.2)
            finally:
                stderr = stop_and_read_stderr(server)
            lines = json_lines(self, stderr)
            self.assertEqual({line["role"] for line in lines}, {"all"}, stderr)

            access = [l for l in lines if l.get("request_id") == "e2e-json-1"]
            self.assertEqual(len(access), 1, stderr)
            self.assertEqual(access[0]["msg"], "http request")
            self.assertEqual(access[0]["level"], "info")
            self.assertEqual(access[0]["method"], "GET")
            self.assertEqual(access[0]["path"], "/api/v1/languages")
            self.assertEqual(access[0]["route"], "/api/v1/languages")
            self.assertEqual(access[0]["status"], 200)
            self.assertIsInstance(access[0]["latency_ms"], (int, float))
            self.assertEqual(len([l for l in lines if l.get("request_id") == replaced]), 1)
            self.assertEqual(len([l for l in lines if l.get("request_id") == long_replaced]), 1)
            self.assertNotIn("forged", stderr)
            self.assertEqual(len([l for l in lines if l.get("request_id") == "e2e-ingest-1"]), 1)

            failed = [l for l in lines if l.get("call_id") == call["id"]]
            self.assertTrue(failed, stderr)
            self.assertEqual(failed[-1]["msg"], "recording download failed; the call ends failed")
            self.assertEqual(failed[-1]["level"], "warn")
            self.assertIn("404", failed[-1]["error"])

    def test_the_request_id_reaches_the_process_with_the_calls_role(self):
        # One data dir (SQLite, keys): the edge alone in one process, every other role in the
        # other, which the edge reaches over gRPC.
        with tempfile.TemporaryDirectory() as data_dir:
            backend = ServeProcess(CALLEVAL, data_dir, "--log-format", "json", "--roles",
                                   "accounts,agents,metrics,calls,scoring,runs",
                                   "--stt-workers", "0")
            edge = None
            try:
                addr = f"127.0.0.1:{backend.grpc_port}"
                edge = ServeProcess(CALLEVAL, data_dir, "--log-format", "json", "--roles", "edge",
                                    "--access-log", "true", "--accounts-addr", addr,
                                    "--agents-addr", addr, "--metrics-addr", addr,
                                    "--calls-addr", addr, grpc=False)
                key = bootstrap_key(data_dir)
                status, body, echoed = request(edge.base, "GET", "/api/public/v1/calls/nope-404",
                                               key, request_id="e2e-split-1")
                self.assertEqual((status, echoed), (404, "e2e-split-1"), body)
                status, _, echoed = request(edge.base, "GET", "/api/v1/workspaces/current", key,
                                            request_id="e2e-split-ok")
                self.assertEqual((status, echoed), (200, "e2e-split-ok"))
            finally:
                edge_stderr = stop_and_read_stderr(edge) if edge else ""
                backend_stderr = stop_and_read_stderr(backend)
            edge_lines = json_lines(self, edge_stderr)
            backend_lines = json_lines(self, backend_stderr)
            self.assertEqual({l["role"] for l in edge_lines}, {"edge"}, edge_stderr)
            self.assertEqual({l["role"] for l in backend_lines},
                             {"accounts,agents,calls,metrics,runs,scoring"}, backend_stderr)

            access = [l for l in edge_lines if l.get("request_id") == "e2e-split-1"]
            self.assertEqual(len(access), 1, edge_stderr)
            self.assertEqual(access[0]["status"], 404)
            self.assertEqual(access[0]["route"], "/api/public/v1/calls/{call_identifier_or_id}")

            grpc = [l for l in backend_lines if l.get("request_id") == "e2e-split-1"]
            self.assertEqual(len(grpc), 1, backend_stderr)
            self.assertEqual(grpc[0]["msg"], "grpc call failed")
            self.assertEqual(grpc[0]["level"], "info")
            self.assertEqual(grpc[0]["method"], "/calleval.v1.Calls/GetCall")
            self.assertEqual(grpc[0]["code"], "NOT_FOUND")
            self.assertIsInstance(grpc[0]["latency_ms"], (int, float))
            # An OK call is logged at debug only: not at the default level.
            self.assertFalse([l for l in backend_lines if l.get("request_id") == "e2e-split-ok"],
                             backend_stderr)


class TextLogTest(unittest.TestCase):
    def test_every_line_is_time_level_role_fields_msg(self):
        with tempfile.TemporaryDirectory() as data_dir:
            server = ServeProcess(CALLEVAL, data_dir, "--access-log", "true", "--log-format",
                                  "text", "--log-level", "debug")
            try:
                key = bootstrap_key(data_dir)
                status, _, echoed = request(server.base, "GET", "/api/v1/a=b?x=1", key,
                                            request_id="e2e-text-1")
                self.assertEqual((status, echoed), (404, "e2e-text-1"))
            finally:
                stderr = stop_and_read_stderr(server)
            access = []
            for raw in stderr.splitlines():
                match = TEXT_LINE.match(raw)
                self.assertIsNotNone(match, raw)
                self.assertEqual(match.group(3), "all")
                fields = dict(TEXT_FIELD.findall(match.group(4)))
                if fields.get("request_id") == "e2e-text-1":
                    access.append((fields, match.group(5)))
            self.assertEqual(len(access), 1, stderr)
            fields, msg = access[0]
            self.assertEqual(msg, "http request")
            self.assertEqual(fields["method"], "GET")
            self.assertEqual(fields["path"], '"/api/v1/a=b"')
            self.assertEqual(fields["status"], "404")
            self.assertEqual(fields["route"], "unmatched")


class LogFlagsTest(unittest.TestCase):
    def test_bad_values_are_usage_errors(self):
        for flags, env, needle in (
                (["--log-format", "xml"], {}, "--log-format"),
                (["--log-level", "loud"], {}, "--log-level"),
                ([], {"CALLEVAL_LOG_FORMAT": "yaml"}, "CALLEVAL_LOG_FORMAT")):
            with self.subTest(flags=flags, env=env):
                result = subprocess.run([CALLEVAL, "serve", *flags], capture_output=True,
                                        text=True, env={**os.environ, **env}, timeout=30)
                self.assertEqual(result.returncode, 2, result.stderr)
                self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
                self.assertIn(needle, result.stderr)


if __name__ == "__main__":
    unittest.main()
