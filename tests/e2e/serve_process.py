"""`calleval serve` in a child process for the end-to-end tests: listening on free ports, read
until it says where, stopped with SIGTERM."""

import re
import signal
import subprocess


class ServeProcess:
    """Starts `BINARY serve --data-dir DATA_DIR` on free loopback ports with FLAGS after them.

    `base` is the edge's URL (None when the process has no edge role), `grpc_port` its gRPC port,
    `metrics_url` its admin listener's /metrics (on a free port too; admin=False leaves the flag
    out, for binaries older than it), `lines` what it printed before listening (the bootstrap
    key among them). The gRPC line is
    the last one `serve` prints at start-up, so reading stops there; with grpc=False (a process
    that serves no gRPC, the edge alone) at the HTTP line.
    """

    def __init__(self, binary, data_dir, *flags, env=None, grpc=True, admin=True):
        admin_flags = ["--admin-addr", "127.0.0.1:0"] if admin else []
        self.proc = subprocess.Popen(
            [binary, "serve", "--data-dir", data_dir, "--http-addr", "127.0.0.1:0",
             "--grpc-addr", "127.0.0.1:0", *admin_flags, "--access-log", "false", *flags],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.lines = []
        self.base = None
        self.grpc_port = None
        self.metrics_url = None
        # A process without a gRPC server (the edge role alone) prints the HTTP line last.
        while self.grpc_port is None and (grpc or self.base is None):
            line = self.proc.stdout.readline()
            if not line:
                break
            self.lines.append(line)
            match = re.search(r"metrics on (http://\S+)", line)
            if match:
                self.metrics_url = match.group(1)
            match = re.search(r"HTTP on (http://\S+)", line)
            if match:
                self.base = match.group(1)
            match = re.search(r"gRPC on port (\d+)", line)
            if match:
                self.grpc_port = int(match.group(1))
        if self.grpc_port is None and (grpc or self.base is None):
            self.proc.kill()
            raise RuntimeError("calleval serve did not start: " + "".join(self.lines) +
                               self.proc.stderr.read())

    def stop(self, timeout=30):
        """SIGTERM, then the exit status (0 when it shut down cleanly)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)
