#!/usr/bin/env python3
"""End to end: the command lines of `calleval` and `callevalctl` (docs/operations.md §1, §2).

--help of every program and command lists each flag with its default and exits 0; an unknown
flag or command, a flag without its value and a malformed value exit 2 with one line on stderr
naming it; `callevalctl analyze --transcript` rejects what the API's ingest rejects, with the
API's field and issue (checked against a running server).
"""
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest
import urllib.error
import urllib.request

from serve_process import ServeProcess

CALLEVAL = os.environ.get("CALLEVAL_BIN")
CALLEVALCTL = os.environ.get("CALLEVALCTL_BIN")
DOCS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "docs",
                    "operations.md")

ROLES_MESSAGE = "must be one of AI Assistant, User, Function Call, Function Call Result"

# The flags before a callevalctl command, listed in every help.
CTL_GLOBAL_FLAGS = {"--data-dir", "--database-url"}

# Each callevalctl command and the flags it takes.
CTL_COMMANDS = {
    "workspace create": {"--name", "--credits"},
    "key create": {"--workspace", "--grant"},
    "credits add": {"--workspace", "--amount"},
    "analyze": {"--transcript", "--channel-map", "--stt"},
    "calls push": {"--url", "--key", "--workspace", "--timeout", "--assert", "--junit",
                   "--summary", "--concurrency", "--wait"},
    "calls export": {"--url", "--key", "--workspace", "--agent", "--since", "--until",
                     "--format", "--output"},
    "runs batch": {"--url", "--key", "--workspace", "--timeout", "--assert", "--junit",
                   "--summary", "--agent", "--scenarios", "--channel", "--concurrency", "--wait",
                   "--min-pass-rate"},
}


def run(*args, env=None):
    full_env = dict(os.environ)
    # Defaults of the help must be the built-in ones, whatever the environment says.
    for name in list(full_env):
        if name.startswith("CALLEVAL_") and name not in ("CALLEVAL_BIN", "CALLEVALCTL_BIN"):
            del full_env[name]
    full_env.update(env or {})
    return subprocess.run(list(args), capture_output=True, text=True, timeout=120, env=full_env)


def flag_lines(help_text):
    """The help's lines that introduce a flag: '  --name VALUE  (default ...)'."""
    return [line for line in help_text.splitlines() if re.match(r"^\s+--[a-z]", line)]


def flags_of(help_text):
    return {re.match(r"^\s+(--[a-z0-9-]+)", line).group(1) for line in flag_lines(help_text)}


def serve_flags_in_docs():
    """The flags of docs/operations.md §1's table."""
    flags = set()
    with open(DOCS) as f:
        for line in f:
            cell = line.split("|")[1] if line.startswith("| `--") else ""
            flags.update(re.findall(r"`(--[a-z0-9-]+)`", cell))
    return flags


def make_wav(directory):
    path = os.path.join(directory, "call.wav")
    subprocess.run(["ffmpeg", "-nostdin", "-loglevel", "error", "-f", "lavfi", "-i",
                    "sine=frequency=440:duration=2", "-ac", "2", "-ar", "16000", path],
                   check=True, timeout=60)
    return path


def turn(role, start, end, content="hello there"):
    return {"role": role, "content": content, "start_time": start, "end_time": end}


class CallevalHelpTest(unittest.TestCase):
    def test_help_lists_every_flag_with_default_and_env(self):
        for args in (["--help"], ["-h"], ["help"], ["serve", "--help"], ["serve", "-h"],
                     ["serve", "--data-dir", "/tmp/x", "--help"]):
            with self.subTest(args=args):
                result = run(CALLEVAL, *args)
                self.assertEqual(result.returncode, 0, result.stderr)
                self.assertEqual(result.stderr, "")
                self.assertIn("serve", result.stdout)
                lines = flag_lines(result.stdout)
                self.assertGreater(len(lines), 30, result.stdout)
                for line in lines:
                    name = re.match(r"^\s+--([a-z0-9-]+)", line).group(1)
                    self.assertRegex(line, r"\(default ", line)
                    env = "CALLEVAL_" + name.upper().replace("-", "_")
                    self.assertIn("env " + env, line)
                help_text = result.stdout
                self.assertRegex(help_text, r"--http-addr \S+\s+\(default 127\.0\.0\.1:8080")
                self.assertRegex(help_text, r"--grpc-addr \S+\s+\(default 127\.0\.0\.1:50051")
                self.assertRegex(help_text, r"--data-dir \S+\s+\(default \./data")
                self.assertRegex(help_text, r"--presign-ttl-seconds \S+\s+\(default 3600")
                self.assertRegex(help_text, r"--access-log \S+\s+\(default true")
                self.assertRegex(help_text, r"--stt-model \S+\s+\(default whisper-1")

    def test_help_matches_the_operations_table(self):
        result = run(CALLEVAL, "serve", "--help")
        self.assertEqual(result.returncode, 0, result.stderr)
        documented = serve_flags_in_docs()
        self.assertIn("--internal-credential-file", documented)
        self.assertEqual(flags_of(result.stdout), documented)

    def test_every_flag_has_a_description(self):
        result = run(CALLEVAL, "serve", "--help")
        lines = result.stdout.splitlines()
        for i, line in enumerate(lines):
            if re.match(r"^\s+--[a-z]", line):
                self.assertLess(i + 1, len(lines), line)
                description = lines[i + 1]
                self.assertRegex(description, r"^\s{4,}\S", line)

    def test_help_ignores_bad_environment(self):
        result = run(CALLEVAL, "serve", "--help", env={"CALLEVAL_WORKERS": "many"})
        self.assertEqual(result.returncode, 0, result.stderr)
        # The help shows the built-in defaults, never the environment's values (API keys).
        result = run(CALLEVAL, "serve", "--help", env={"CALLEVAL_LLM_API_KEY": "sk-secret-1"})
        self.assertNotIn("sk-secret-1", result.stdout)


class CallevalErrorsTest(unittest.TestCase):
    def assert_usage_error(self, result, *needles):
        self.assertEqual(result.returncode, 2, result.stdout + result.stderr)
        self.assertEqual(result.stdout, "")
        self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
        for needle in needles:
            self.assertIn(needle, result.stderr)

    def test_unknown_flag(self):
        self.assert_usage_error(run(CALLEVAL, "serve", "--no-such-flag", "1"), "--no-such-flag")
        self.assert_usage_error(run(CALLEVAL, "serve", "--no-such-flag=1"), "--no-such-flag")
        self.assert_usage_error(run(CALLEVAL, "serve", "-x"), "-x")

    def test_missing_value(self):
        self.assert_usage_error(run(CALLEVAL, "serve", "--data-dir"), "--data-dir")
        self.assert_usage_error(run(CALLEVAL, "serve", "--data-dir", "--http-addr", "x:1"),
                                "--data-dir")

    def test_malformed_value(self):
        self.assert_usage_error(run(CALLEVAL, "serve", "--workers", "many"), "--workers", "many")
        self.assert_usage_error(run(CALLEVAL, "serve", "--rate-limit=fast"), "--rate-limit")
        self.assert_usage_error(run(CALLEVAL, "serve", "--access-log", "maybe"), "--access-log")
        self.assert_usage_error(run(CALLEVAL, "serve", "--roles", "edge,nope"), "--roles", "nope")
        self.assert_usage_error(run(CALLEVAL, "serve", "--admin-addr", "localhost"),
                                "--admin-addr", "localhost")
        self.assert_usage_error(run(CALLEVAL, "serve", env={"CALLEVAL_ADMIN_ADDR": "h:99999"}),
                                "CALLEVAL_ADMIN_ADDR", "h:99999")

    def test_malformed_environment(self):
        self.assert_usage_error(run(CALLEVAL, "serve", env={"CALLEVAL_HTTP_THREADS": "two"}),
                                "CALLEVAL_HTTP_THREADS")

    def test_missing_key_files_stop_the_start(self):
        # A key file given explicitly is one a whole installation shares (a mounted Secret): when
        # it is not there, the process must not make a key of its own that no other one has.
        with tempfile.TemporaryDirectory() as data:
            missing = os.path.join(data, "no-such-key")
            for flag in ("--signing-key-file", "--internal-credential-file"):
                with self.subTest(flag=flag):
                    result = run(CALLEVAL, "serve", "--data-dir", data, "--http-addr",
                                 "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--admin-addr",
                                 "127.0.0.1:0", flag, missing)
                    self.assertEqual(result.returncode, 1, result.stdout + result.stderr)
                    self.assertIn("cannot start", result.stderr)
                    self.assertIn(missing, result.stderr)
                    self.assertFalse(os.path.exists(missing))

    def test_unknown_command_and_positional(self):
        self.assert_usage_error(run(CALLEVAL, "frobnicate"), "frobnicate")
        self.assert_usage_error(run(CALLEVAL, "serve", "extra"), "extra")
        result = run(CALLEVAL)
        self.assertEqual(result.returncode, 2)


class CallevalctlHelpTest(unittest.TestCase):
    def test_top_help_lists_every_command_and_flag(self):
        for args in (["--help"], ["-h"], ["help"], ["--data-dir", "/tmp/x", "--help"]):
            with self.subTest(args=args):
                result = run(CALLEVALCTL, *args)
                self.assertEqual(result.returncode, 0, result.stderr)
                for command in CTL_COMMANDS:
                    self.assertIn(command, result.stdout)
                expected = set().union(*CTL_COMMANDS.values()) | CTL_GLOBAL_FLAGS
                self.assertEqual(flags_of(result.stdout), expected)
                for line in flag_lines(result.stdout):
                    self.assertRegex(line, r"\((default |required)", line)
                self.assertRegex(result.stdout, r"--data-dir \S+\s+\(default \./data")
                self.assertRegex(result.stdout, r"--stt \S+\s+\(default pocketsphinx")
                self.assertRegex(result.stdout, r"--channel-map \S+\s+\(default agent=0,user=1")
                self.assertRegex(result.stdout, r"--credits \S+\s+\(default 0")

    def test_command_help_lists_its_flags(self):
        for command, flags in CTL_COMMANDS.items():
            for help_flag in ("--help", "-h"):
                with self.subTest(command=command, help_flag=help_flag):
                    result = run(CALLEVALCTL, *command.split(), help_flag)
                    self.assertEqual(result.returncode, 0, result.stderr)
                    self.assertIn(command, result.stdout)
                    self.assertEqual(flags_of(result.stdout), flags | CTL_GLOBAL_FLAGS)
                    for line in flag_lines(result.stdout):
                        self.assertRegex(line, r"\((default |required)", line)


class CallevalctlErrorsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp()
        cls.wav = make_wav(cls.dir)
        cls.data_dir = os.path.join(cls.dir, "data")

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir)

    def ctl(self, *args):
        return run(CALLEVALCTL, "--data-dir", self.data_dir, *args)

    def assert_usage_error(self, result, *needles):
        self.assertEqual(result.returncode, 2, result.stdout + result.stderr)
        self.assertEqual(result.stdout, "")
        self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
        for needle in needles:
            self.assertIn(needle, result.stderr)

    def test_unknown_flag_of_every_command(self):
        data_dir = os.path.join(self.dir, "untouched")

        def ctl(*args):
            return run(CALLEVALCTL, "--data-dir", data_dir, *args)

        self.assert_usage_error(ctl("analyze", self.wav, "--stt", "none", "--bogus", "1"),
                                "--bogus")
        self.assert_usage_error(ctl("workspace", "create", "--name", "a", "--bogus", "1"),
                                "--bogus")
        self.assert_usage_error(ctl("key", "create", "--workspace", "1", "--bogus=2"), "--bogus")
        self.assert_usage_error(ctl("credits", "add", "--workspace", "1", "--amount", "5",
                                    "--bogus", "1"), "--bogus")
        self.assert_usage_error(run(CALLEVALCTL, "--data-dir", data_dir, "--bogus", "1",
                                    "workspace", "create", "--name", "a"), "--bogus")
        # The commands refused wrote nothing.
        self.assertFalse(os.path.exists(data_dir))

    def test_flag_missing_its_value(self):
        self.assert_usage_error(self.ctl("analyze", self.wav, "--transcript"), "--transcript")
        self.assert_usage_error(self.ctl("workspace", "create", "--name"), "--name")
        self.assert_usage_error(run(CALLEVALCTL, "--data-dir"), "--data-dir")

    def test_malformed_values(self):
        self.assert_usage_error(self.ctl("workspace", "create", "--name", "a", "--credits", "x"),
                                "--credits", "x")
        self.assert_usage_error(self.ctl("key", "create", "--workspace", "two"), "--workspace")
        self.assert_usage_error(self.ctl("key", "create", "--workspace", "1", "--grant", "a,b"),
                                "--grant")
        self.assert_usage_error(self.ctl("credits", "add", "--workspace", "1", "--amount", "1.5"),
                                "--amount")
        self.assert_usage_error(self.ctl("analyze", self.wav, "--stt", "whisper"), "--stt")
        self.assert_usage_error(self.ctl("analyze", self.wav, "--channel-map", "agent=0"),
                                "--channel-map")

    def test_required_flags_and_unknown_commands(self):
        self.assert_usage_error(self.ctl("workspace", "create"), "--name")
        self.assert_usage_error(self.ctl("credits", "add", "--workspace", "1"), "--amount")
        self.assert_usage_error(self.ctl("workspace", "delete"), "workspace delete")
        self.assert_usage_error(self.ctl("frobnicate"), "frobnicate")
        self.assert_usage_error(self.ctl("analyze"), "FILE")
        self.assert_usage_error(self.ctl("analyze", self.wav, "second.wav"), "second.wav")
        self.assertEqual(run(CALLEVALCTL).returncode, 2)

    def test_switches_take_no_value(self):
        # --wait stands alone: the manifest after it stays the positional argument, so the
        # parse gets as far as the missing server.
        self.assert_usage_error(self.ctl("calls", "push", "--wait", "m.jsonl"), "--url")
        self.assert_usage_error(self.ctl("calls", "push", "m.jsonl", "--wait=maybe"), "--wait")
        self.assert_usage_error(self.ctl("calls", "push", "--wait"), "MANIFEST.jsonl")
        self.assert_usage_error(self.ctl("runs", "batch", "--agent", "1", "--scenarios", "a"),
                                "--scenarios")
        self.assert_usage_error(self.ctl("calls", "export", "--agent", "1", "--format", "xml"),
                                "--format")

    def test_commands_still_work(self):
        result = self.ctl("workspace", "create", "--name", "acme", "--credits=7")
        self.assertEqual(result.returncode, 0, result.stderr)
        workspace = json.loads(result.stdout)
        self.assertEqual(workspace["credit_balance"], 7)
        result = self.ctl("credits", "add", "--workspace", str(workspace["id"]), "--amount", "-2")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(json.loads(result.stdout)["credit_balance"], 5)
        # CALLEVAL_DATA_DIR names the data dir when --data-dir does not.
        result = run(CALLEVALCTL, "credits", "add", "--workspace", str(workspace["id"]),
                     "--amount", "1", env={"CALLEVAL_DATA_DIR": self.data_dir})
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(json.loads(result.stdout)["credit_balance"], 6)

    def write_transcript(self, name, transcript):
        path = os.path.join(self.dir, name)
        with open(path, "w") as f:
            f.write(transcript if isinstance(transcript, str) else json.dumps(transcript))
        return path

    def test_analyze_with_valid_transcript(self):
        path = self.write_transcript("good.json", [turn("AI Assistant", 0, 0.9),
                                                   turn("User", 1.0, 1.9)])
        result = self.ctl("analyze", self.wav, "--transcript", path, "--stt", "none")
        self.assertEqual(result.returncode, 0, result.stderr)
        analysis = json.loads(result.stdout)
        self.assertAlmostEqual(analysis["duration_seconds"], 2.0, delta=0.1)

    def test_analyze_bad_role(self):
        path = self.write_transcript("role.json", [turn("AI Assistant", 0, 0.5),
                                                   turn("User", 0.6, 1.0),
                                                   turn("Robot", 1.1, 1.5)])
        result = self.ctl("analyze", self.wav, "--transcript", path, "--stt", "none")
        self.assert_usage_error(result, "transcript[2].role: " + ROLES_MESSAGE)


class AnalyzeMatchesApiTest(unittest.TestCase):
    """Transcripts the API's ingest refuses: analyze refuses them with the same details."""

    CASES = {
        "bad_role": [turn("AI Assistant", 0, 0.5), turn("Agent", 0.6, 1.0)],
        "end_before_start": [turn("User", 1.0, 0.5)],
        "negative_start": [turn("User", -1, 0.5)],
        "not_an_array": {"role": "User", "content": "hi"},
        "wrong_type": [{"role": "User", "content": "hi", "start_time": "zero"}],
        "too_many_turns": [turn("User", i, i + 0.5, "a") for i in range(10001)],
        "several": [turn("Bot", 0, 1), turn("User", 2, 1)],
    }

    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp()
        cls.wav = make_wav(cls.dir)
        data_dir = os.path.join(cls.dir, "data")
        # Flags from the environment too; where both say, the command line wins.
        env = dict(os.environ, CALLEVAL_HTTP_ADDR="192.0.2.1:1", CALLEVAL_ACCESS_LOG="false",
                   CALLEVAL_ROLES="edge,calls,accounts,agents,metrics")
        cls.server = ServeProcess(CALLEVAL, data_dir, env=env)
        cls.base = cls.server.base
        with open(os.path.join(data_dir, "bootstrap-key")) as f:
            cls.key = f.read().strip()

    @classmethod
    def tearDownClass(cls):
        cls.server.stop()
        shutil.rmtree(cls.dir)

    def ingest(self, transcript):
        body = json.dumps({"call_identifier": "cli-1", "agent_id": 1,
                           "recording_url": "https://example.com/call.wav",
                           "transcript": transcript}).encode()
        req = urllib.request.Request(self.base + "/api/public/v1/calls", data=body,
                                     method="POST")
        req.add_header("Content-Type", "application/json")
        req.add_header("Authorization", "Bearer " + self.key)
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return resp.status, json.loads(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    def test_same_details_as_the_api(self):
        for name, transcript in self.CASES.items():
            with self.subTest(case=name):
                status, body = self.ingest(transcript)
                self.assertEqual(status, 422, body)
                details = body["error"]["details"]
                self.assertTrue(details, body)
                path = os.path.join(self.dir, name + ".json")
                with open(path, "w") as f:
                    json.dump(transcript, f)
                result = run(CALLEVALCTL, "analyze", self.wav, "--transcript", path, "--stt",
                             "none")
                self.assertEqual(result.returncode, 2, result.stdout + result.stderr)
                self.assertEqual(result.stdout, "")
                self.assertEqual(len(result.stderr.strip().splitlines()), 1, result.stderr)
                for detail in details:
                    self.assertIn("%s: %s" % (detail["field"], detail["issue"]), result.stderr)


if __name__ == "__main__":
    unittest.main()
