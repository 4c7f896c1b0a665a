#!/usr/bin/env python3
"""Every role its own process, as pods run them: nothing lost in a crash, nothing shared.

Edge, accounts, agents, metrics, calls and runs each run as a `calleval serve --roles=<role>`
process, with three scoring processes beside them, every one with an empty working dir; the
owners of tables (accounts, agents, metrics, calls) each with a PostgreSQL database of its own,
the edge, runs and scoring processes with none: whatever a role read of another's tables itself
would be missing, so the results come out right only if every role asks the owner. They reach
each other over gRPC with the installation's shared key files (the internal credential, the
link-signing key, the credentials key), as Secrets mounted into pods. 200 calls
go in through the edge, 100 of them with recordings served by a local HTTP server. While they are
scored, one scoring process is killed with SIGKILL in the middle of an analysis, and the calls
process is killed and started again. Then every acknowledged call reaches a final state, none is
lost, no metric is charged twice, the workspace's balance is what the calls used, and every
call's results equal those of one `--roles=all` process given the same calls.

The recordings are in a local S3 (tools/s3/serve.js, s3rver behind a SigV4 check), given to
every process with --recordings-url: no process reads another's working dir, and none keeps a
recording in its own.

Needs the test PostgreSQL server (TEST_POSTGRES, CALLEVAL_TEST_POSTGRES_DIR), the generated
corpus (CALLEVAL_CORPUS_DIR) and tools/s3's node_modules (scripts/setup).
"""
import functools
import http.server
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
import urllib.error
import urllib.request

from e2e_database import TestDatabase
from serve_process import ServeProcess

CALLEVAL = os.environ.get("CALLEVAL_BIN")
S3_SERVE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "tools", "s3",
                        "serve.js")
CORPUS = os.environ.get("CALLEVAL_CORPUS_DIR", "")

CALLS = 200
RECORDED = 100
# The audio metrics and the text ones that need no speech-to-text (words_per_minute, 6, and
# transcription_accuracy, 7, would wait for the recognizer, which these processes do not run).
RECORDING_METRICS = [1, 2, 3, 4, 5, 8, 9, 10, 11, 12]
FINAL = {"completed", "failed", "skipped"}
API_ROLES = ["accounts", "agents", "metrics", "calls", "runs", "edge"]


def say(text):
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def free_port():
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


def recordings():
    """Short corpus recordings (each under 3 MB), served to the calls by name."""
    names = sorted(n for n in os.listdir(CORPUS)
                   if n.endswith((".wav", ".mp3")) and n != "ten_minutes.mp3" and
                   os.path.getsize(os.path.join(CORPUS, n)) < 3_000_000)
    assert len(names) >= 8, names
    return names


def transcript(index):
    """A short transcript, different for each call."""
    turns = []
    t = 0.3
    for i in range(2 + index % 4):
        role = "AI Assistant" if i % 2 == 0 else "User"
        length = 1.0 + (index * 7 + i * 3) % 5 * 0.4
        turns.append({"role": role, "content": f"turn {i} of call {index}, words here",
                      "start_time": round(t, 2), "end_time": round(t + length, 2)})
        t += length + 0.2 + (index + i) % 3 * 0.5
    return turns


def ingests(agent_id, files_base, names):
    """The 200 calls, the same for both installations."""
    out = []
    for i in range(CALLS):
        body = {"call_identifier": f"call-{i:03d}", "agent_id": agent_id}
        if i < RECORDED:
            body["recording_url"] = f"{files_base}/{names[i % len(names)]}"
            body["metric_ids"] = RECORDING_METRICS
        else:
            body["transcript"] = transcript(i)
        out.append(body)
    return out


def results(call):
    """What a call's scoring decided, without what differs between installations (ids, times)."""
    def metric(m):
        return {k: v for k, v in m.items() if k not in ("updated_at", "created_at")}
    return {
        "analysis_status": call["analysis_status"],
        "duration_seconds": call.get("duration_seconds"),
        "credits_used": call.get("credits_used"),
        "failure_reason": call.get("failure_reason"),
        "standard_metrics": sorted((metric(m) for m in call.get("standard_metrics", [])),
                                   key=lambda m: m["metric_id"]),
        "metric_results": sorted((metric(m) for m in call.get("metric_results", [])),
                                 key=lambda m: json.dumps(m, sort_keys=True)),
    }


class Installation:
    """The processes of one installation and its key files; each process on the database
    `database_for(process name)` gives it."""

    def __init__(self, tmp, name, database_for, files_host, recordings_url=None, env=None):
        self.tmp = tmp
        self.recordings_url = recordings_url
        self.env = env
        self.name = name
        self.database_for = database_for
        self.keys = os.path.join(tmp, name + "-keys")
        os.makedirs(self.keys)
        for key, content in (("internal-credential", secrets.token_hex(32) + "\n"),
                             ("signing-key", secrets.token_hex(32)),
                             ("credentials-key", secrets.token_bytes(32).hex()[:32])):
            with open(os.path.join(self.keys, key), "w") as f:
                f.write(content)
            os.chmod(os.path.join(self.keys, key), 0o600)
        self.grpc = {role: free_port() for role in API_ROLES}
        self.http_port = free_port()
        self.files_host = files_host
        self.processes = {}

    def flags(self, name, role, grpc_port):
        database = self.database_for(name)
        return ([] if database is None else ["--database-url", database.url]) + [
            "--roles", role,
            "--grpc-addr", f"127.0.0.1:{grpc_port}", "--admin-addr", "127.0.0.1:0",
            "--accounts-addr", f"127.0.0.1:{self.grpc['accounts']}",
            "--agents-addr", f"127.0.0.1:{self.grpc['agents']}",
            "--metrics-addr", f"127.0.0.1:{self.grpc['metrics']}",
            "--calls-addr", f"127.0.0.1:{self.grpc['calls']}",
            "--public-base-url", f"http://127.0.0.1:{self.http_port}",
            "--internal-credential-file", os.path.join(self.keys, "internal-credential"),
            "--signing-key-file", os.path.join(self.keys, "signing-key"),
            "--credentials-key-file", os.path.join(self.keys, "credentials-key"),
            "--allow-private-hosts", self.files_host,
            "--analysis-lease-seconds", "3",
            "--stt-workers", "0",
        ] + (["--recordings-url", self.recordings_url] if self.recordings_url else [])

    def start(self, name, role, grpc_port, *extra):
        work = os.path.join(self.tmp, f"{self.name}-{name}")
        os.makedirs(work, exist_ok=True)
        flags = self.flags(name, role, grpc_port) + list(extra)
        if role == "edge" or role == "all":
            flags += ["--http-addr", f"127.0.0.1:{self.http_port}"]
        process = ServeProcess(CALLEVAL, work, *flags, grpc=role != "edge", env=self.env)
        self.processes[name] = process
        return process

    def start_split(self):
        for role in API_ROLES:
            self.start(role, role, self.grpc[role])
        for i in range(3):
            self.start(f"scoring-{i}", "scoring", free_port(), "--workers", "1",
                       "--lease-holder", f"scoring-{i}")
        with open(os.path.join(self.tmp, f"{self.name}-accounts", "bootstrap-key")) as f:
            return f.read().strip()

    def start_single(self):
        self.start("all", "all", self.grpc["calls"], "--workers", "3")
        with open(os.path.join(self.tmp, f"{self.name}-all", "bootstrap-key")) as f:
            return f.read().strip()

    @property
    def base(self):
        return f"http://127.0.0.1:{self.http_port}"

    def stop(self):
        codes = {}
        for name, process in self.processes.items():
            if process.proc.poll() is None:
                codes[name] = process.stop()
        return codes


class MultiProcessTest(unittest.TestCase):
    def setUp(self):
        self.assertTrue(os.environ.get("TEST_POSTGRES"), "needs the test PostgreSQL server")
        self.tmp_dir = tempfile.TemporaryDirectory()
        self.tmp = self.tmp_dir.name
        class Quiet(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *args):
                pass
        handler = functools.partial(Quiet, directory=CORPUS)
        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        self.files_base = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.installations = []

    def tearDown(self):
        for installation in self.installations:
            installation.stop()
        if getattr(self, "s3", None) is not None:
            self.s3.kill()
            self.s3.wait()
        self.httpd.shutdown()
        self.tmp_dir.cleanup()

    def ingest_all(self, base, key):
        agent = request(base, key, "POST", "/api/v1/agents", {
            "name": "support", "phone_number": "+14155550123", "language_id": 1,
            "instructions": "x"})
        ids = {}
        for body in ingests(agent["id"], self.files_base, recordings()):
            call = request(base, key, "POST", "/api/public/v1/calls", body)
            ids[body["call_identifier"]] = call["id"]
        return ids

    def wait_final(self, database, timeout):
        deadline = time.time() + timeout
        while time.time() < deadline:
            left = database.rows("SELECT COUNT(*) FROM calls WHERE analysis_status NOT IN "
                                 "('completed', 'failed', 'skipped')")[0][0]
            if left == 0:
                return 0
            time.sleep(0.5)
        return left

    def read_all(self, base, key, ids):
        return {ident: request(base, key, "GET", f"/api/public/v1/calls/{call_id}")
                for ident, call_id in ids.items()}

    def test_roles_apart_lose_nothing_and_score_as_one_process(self):
        # The reference: one process, all roles.
        single_db = TestDatabase(os.path.join(self.tmp, "single-db"))
        single = Installation(self.tmp, "single", lambda name: single_db, "127.0.0.1")
        self.installations.append(single)
        key = single.start_single()
        say("one process: started; ingesting")
        single_ids = self.ingest_all(single.base, key)
        self.assertEqual(self.wait_final(single_db, 240), 0)
        expected = {ident: results(call)
                    for ident, call in self.read_all(single.base, key, single_ids).items()}
        self.assertEqual(single.stop(), {"all": 0})
        say("one process: every call final")

        # The same calls through every role in a process of its own, recordings in S3.
        s3_dir = os.path.join(self.tmp, "s3")
        os.makedirs(s3_dir)
        self.s3 = subprocess.Popen(["node", S3_SERVE, "--dir", s3_dir, "--bucket", "recordings",
                                    "--port", "0"], stdout=subprocess.PIPE, text=True)
        listening = self.s3.stdout.readline().split()
        self.assertEqual(listening[:1], ["listening"], listening)
        env = dict(os.environ, AWS_ACCESS_KEY_ID="S3RVER", AWS_SECRET_ACCESS_KEY="S3RVER")
        databases = {}

        def database_for(name):
            # The edge, runs and scoring own no table and are given every owner's address:
            # they open no database, and are given none.
            if name in ("edge", "runs") or name.startswith("scoring"):
                return None
            # A process started again keeps its database, as a pod keeps its URL.
            if name not in databases:
                databases[name] = TestDatabase(os.path.join(self.tmp, f"split-db-{name}"))
            return databases[name]
        split = Installation(
            self.tmp, "split", database_for, "127.0.0.1",
            recordings_url=f"s3://recordings/calls?endpoint=http://127.0.0.1:{listening[1]}",
            env=env)
        self.installations.append(split)
        key = split.start_split()
        say("roles apart: started; ingesting")
        started = time.time()
        ids = self.ingest_all(split.base, key)
        self.assertEqual(len(ids), CALLS)

        # SIGKILL scoring-0 while it holds an analysis (its lease tokens carry its holder id).
        deadline = time.time() + 60
        killed_holding = None
        while time.time() < deadline and killed_holding is None:
            held = databases["calls"].rows("SELECT id FROM calls WHERE analysis_status = 'processing' "
                                 "AND analysis_token LIKE 'scoring-0:%' LIMIT 1")
            if held:
                split.processes["scoring-0"].proc.send_signal(signal.SIGKILL)
                split.processes["scoring-0"].proc.wait()
                killed_holding = held[0][0]
            else:
                time.sleep(0.01)
        self.assertIsNotNone(killed_holding, "scoring-0 never held an analysis")
        say(f"roles apart: scoring-0 killed holding call {killed_holding}")
        # And the calls process: killed, then started again on its working dir.
        split.processes["calls"].proc.send_signal(signal.SIGKILL)
        split.processes["calls"].proc.wait()
        split.start("calls", "calls", split.grpc["calls"])

        say("roles apart: calls restarted")
        self.assertEqual(self.wait_final(databases["calls"], 240), 0)
        elapsed = time.time() - started
        got = self.read_all(split.base, key, ids)
        self.assertEqual(len(got), CALLS)
        self.assertIn(got[next(i for i, c in ids.items() if c == killed_holding)]
                      ["analysis_status"], FINAL)

        # Every call scored as the single process scored it.
        differing = [ident for ident in expected if results(got[ident]) != expected[ident]]
        self.assertEqual(differing, [], {i: (results(got[i]), expected[i])
                                         for i in differing[:2]})
        statuses = {}
        for call in got.values():
            statuses[call["analysis_status"]] = statuses.get(call["analysis_status"], 0) + 1
        self.assertGreater(statuses.get("completed", 0), RECORDED // 2, statuses)

        # No metric charged twice, none refunded twice; the balance is what the calls used.
        repeated = databases["accounts"].rows(
            "SELECT call_id, metric_id, kind, COUNT(*) FROM credit_ledger "
            "GROUP BY call_id, metric_id, kind HAVING COUNT(*) > 1")
        self.assertEqual(repeated, [])
        used = sum(call.get("credits_used") or 0 for call in got.values())
        workspace = request(split.base, key, "GET", "/api/v1/workspaces/current")
        self.assertEqual(workspace["credit_balance"], 10000 - used)

        # scoring-0 died holding a download in its scratch dir: started again, it clears it.
        split.start("scoring-0", "scoring", free_port(), "--workers", "1",
                    "--lease-holder", "scoring-0")
        # Every recording is in the bucket, none in a working dir: no process keeps one, and
        # none reads another's.
        in_bucket = sum(len(files) for _, _, files in os.walk(s3_dir))
        self.assertGreaterEqual(in_bucket, RECORDED)
        for name in split.processes:
            work = os.path.join(self.tmp, f"split-{name}")
            kept = [os.path.join(d, f) for d, _, files in os.walk(work) for f in files
                    if f.endswith((".wav", ".mp3")) or "/recordings" in d or "/scratch" in d]
            self.assertEqual(kept, [], name)
        # The processes given no database made none of their own either.
        for name in split.processes:
            if database_for(name) is None:
                self.assertFalse(os.path.exists(os.path.join(self.tmp, f"split-{name}",
                                                             "calleval.db")), name)
        # The links the calls process signed are served by the edge from the bucket.
        recorded = got["call-000"]
        self.assertTrue(recorded.get("presigned_recording_url"), recorded)
        with urllib.request.urlopen(recorded["presigned_recording_url"], timeout=30) as resp:
            served = resp.read()
        with open(os.path.join(CORPUS, recordings()[0]), "rb") as f:
            self.assertEqual(served, f.read())
        codes = split.stop()
        self.assertTrue(all(code == 0 for code in codes.values()), codes)
        print(f"\n{CALLS} calls ({RECORDED} recorded) final {elapsed:.1f} s after the first "
              f"ingest, with roles apart; statuses {statuses}", file=sys.stderr)


if __name__ == "__main__":
    if not CALLEVAL:
        sys.exit("set CALLEVAL_BIN")
    unittest.main()
