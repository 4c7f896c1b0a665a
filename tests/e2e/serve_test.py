#!/usr/bin/env python3
"""End to end: the built `calleval serve` binary, driven over HTTP the way a client would.

Starts the server on a fresh data dir (port 0), checks the bootstrap key, ingests and reads a
call, runs callevalctl against the same data dir while the server runs, stops the server with
SIGTERM (it must exit 0), and starts it again to check that everything was kept.

With TEST_POSTGRES (the tests/support test_postgres tool) and CALLEVAL_TEST_POSTGRES_DIR set,
the same run keeps its database on the test PostgreSQL server (--database-url) instead of
SQLite in the data dir.
"""
import json
import os
import subprocess
import sys
import tempfile
import unittest
import urllib.error
import urllib.request

from serve_process import ServeProcess

CALLEVAL = os.environ.get("CALLEVAL_BIN")
CALLEVALCTL = os.environ.get("CALLEVALCTL_BIN")
TEST_POSTGRES = os.environ.get("TEST_POSTGRES")


def database_flags():
    """[] for SQLite in the data dir, or --database-url of a new PostgreSQL database."""
    if not TEST_POSTGRES:
        return []
    url = subprocess.run([TEST_POSTGRES, "newdb", os.environ["CALLEVAL_TEST_POSTGRES_DIR"]],
                         check=True, capture_output=True, text=True).stdout.strip()
    return ["--database-url", url]


def request(method, url, key=None, body=None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("Content-Type", "application/json")
    if key:
        req.add_header("Authorization", "Bearer " + key)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            raw = resp.read()
            return resp.status, json.loads(raw) if raw else None
    except urllib.error.HTTPError as err:
        raw = err.read()
        return err.code, json.loads(raw) if raw else None


class ServeTest(unittest.TestCase):
    def test_serve_lifecycle(self):
        with tempfile.TemporaryDirectory() as data_dir:
            db = database_flags()
            server = ServeProcess(CALLEVAL, data_dir, *db)
            try:
                printed = "".join(server.lines)
                with open(os.path.join(data_dir, "bootstrap-key")) as f:
                    key = f.read().strip()
                self.assertIn(key, printed)
                self.assertEqual(os.stat(os.path.join(data_dir, "bootstrap-key")).st_mode & 0o077, 0)

                self.assertEqual(request("GET", server.base + "/healthz")[0], 200)
                self.assertEqual(request("GET", server.base + "/readyz")[0], 200)
                status, ws = request("GET", server.base + "/api/v1/workspaces/current", key)
                self.assertEqual((status, ws), (200, {"id": 1, "name": "default",
                                                      "credit_balance": 10000}))
                status, agent = request("POST", server.base + "/api/v1/agents", key, {
                    "name": "e2e", "phone_number": "+919876543210", "language_id": 10,
                    "instructions": "Be helpful."})
                self.assertEqual(status, 201, agent)
                self.assertEqual(agent["telephony_carrier"], "plivo")
                status, call = request("POST", server.base + "/api/public/v1/calls", key, {
                    "call_identifier": "e2e-1", "agent_id": agent["id"],
                    "transcript": [{"role": "User", "content": "hi", "start_time": 0,
                                    "end_time": 1}]})
                self.assertEqual(status, 201, call)
                self.assertEqual(call["analysis_status"], "pending")

                # callevalctl on the same data dir while the server runs.
                out = subprocess.run([CALLEVALCTL, "--data-dir", data_dir, *db, "workspace", "create",
                                      "--name", "acme", "--credits", "25"],
                                     check=True, capture_output=True, text=True).stdout
                created = json.loads(out)
                self.assertEqual(created["name"], "acme")
                status, ws = request("GET", server.base + "/api/v1/workspaces/current",
                                     created["api_key"])
                self.assertEqual((status, ws["credit_balance"]), (200, 25))
                out = subprocess.run([CALLEVALCTL, "--data-dir", data_dir, *db, "credits", "add",
                                      "--workspace", str(created["id"]), "--amount", "5"],
                                     check=True, capture_output=True, text=True).stdout
                self.assertEqual(json.loads(out), {"workspace_id": created["id"],
                                                   "credit_balance": 30})
                out = subprocess.run([CALLEVALCTL, "--data-dir", data_dir, *db, "key", "create",
                                      "--workspace", "1", "--grant", str(created["id"])],
                                     check=True, capture_output=True, text=True).stdout
                granted = json.loads(out)
                self.assertEqual(granted["granted_workspace_ids"], [created["id"]])
                status, ws = request("GET", server.base + "/api/v1/workspaces/current?client_id="
                                     + str(created["id"]), granted["api_key"])
                self.assertEqual((status, ws["name"]), (200, "acme"))
            finally:
                code = server.stop()
            self.assertEqual(code, 0, server.proc.stderr.read())
            # The database is where it was told to be.
            self.assertEqual(os.path.exists(os.path.join(data_dir, "calleval.db")), not db)

            # A restart keeps everything and creates no second bootstrap key.
            server = ServeProcess(CALLEVAL, data_dir, *db)
            try:
                self.assertNotIn("API key", "".join(server.lines))
                status, call = request("GET", server.base + "/api/public/v1/calls/e2e-1", key)
                self.assertEqual(status, 200)
                self.assertEqual(call["transcript"][0]["content"], "hi")
            finally:
                self.assertEqual(server.stop(), 0)


if __name__ == "__main__":
    if not CALLEVAL or not CALLEVALCTL:
        sys.exit("set CALLEVAL_BIN and CALLEVALCTL_BIN")
    unittest.main()
