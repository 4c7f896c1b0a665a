#!/usr/bin/env python3
"""The served OpenAPI document passes the pinned Redocly linter with no error.

Starts the built `calleval serve` (port 0, fresh data dir), once without --public-base-url and
once with it, saves GET /openapi.json to a file and runs `redocly lint` from tools/openapi
(installed by scripts/setup with `npm ci`) with tools/openapi/redocly.yaml. Any error fails the
test; the linter's report, warnings included, is printed.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import unittest
import urllib.request

CALLEVAL = os.environ.get("CALLEVAL_BIN")
TOOLS_DIR = os.environ.get("OPENAPI_TOOLS_DIR")


def free_port():
    # The server prints --public-base-url rather than its address, so it gets a known port.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_document(data_dir, extra_args):
    """Starts the server, returns the body of GET /openapi.json, stops the server."""
    address = "127.0.0.1:%d" % free_port()
    with open(os.path.join(data_dir, "stderr.log"), "w+") as log:
        proc = subprocess.Popen(
            [CALLEVAL, "serve", "--data-dir", data_dir, "--http-addr", address,
             "--grpc-addr", "127.0.0.1:0", "--admin-addr", "127.0.0.1:0", "--access-log",
             "false"] + extra_args,
            stdout=subprocess.PIPE, stderr=log, text=True)
        try:
            printed = []
            for line in proc.stdout:
                printed.append(line)
                if "HTTP on" in line:
                    break
            else:
                log.seek(0)
                raise RuntimeError("server did not start: " + "".join(printed) + log.read())
            with urllib.request.urlopen("http://%s/openapi.json" % address, timeout=10) as resp:
                return resp.read().decode()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(timeout=30)
            proc.stdout.close()


class OpenApiLintTest(unittest.TestCase):
    def lint(self, extra_args):
        """Lints the document served with `extra_args`; returns it parsed."""
        redocly = os.path.join(TOOLS_DIR, "node_modules", ".bin", "redocly")
        self.assertTrue(os.path.exists(redocly),
                        redocly + " is missing: run scripts/setup (npm ci in tools/openapi)")
        with tempfile.TemporaryDirectory() as tmp:
            data_dir = os.path.join(tmp, "data")
            os.mkdir(data_dir)
            path = os.path.join(tmp, "openapi.json")
            text = serve_document(data_dir, extra_args)
            with open(path, "w") as f:
                f.write(text)
            result = subprocess.run(
                [redocly, "lint", "--config", os.path.join(TOOLS_DIR, "redocly.yaml"), path],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120,
                env=dict(os.environ, REDOCLY_TELEMETRY="off",
                         REDOCLY_SUPPRESS_UPDATE_NOTICE="true"))
            print(result.stdout)
            self.assertEqual(result.returncode, 0, "redocly lint found errors")
            return json.loads(text)

    def test_default_document(self):
        doc = self.lint([])
        self.assertEqual(doc["servers"], [{"url": "/"}])

    def test_with_public_base_url(self):
        doc = self.lint(["--public-base-url", "https://calleval.test/"])
        self.assertEqual(doc["servers"], [{"url": "https://calleval.test"}])


if __name__ == "__main__":
    if not CALLEVAL or not TOOLS_DIR:
        sys.exit("set CALLEVAL_BIN and OPENAPI_TOOLS_DIR")
    unittest.main()
