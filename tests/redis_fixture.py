"""A redis-server for the Python tests of Redis jobs (standard library only; redis-server and redis-cli on PATH).

The tests import this by putting tests/ on sys.path from their own location, as for daemon_client.
"""
import json
import os
import subprocess

import daemon_client


class RedisServer:
    """A redis-server on a free loopback port, its files in `directory`, no snapshots; with `appendonly`, an
    append-only file synced at every write (it survives stop() and start())."""

    def __init__(self, directory, appendonly=False):
        self.port = daemon_client.free_port()
        self.directory = directory
        os.makedirs(directory, exist_ok=True)
        self.persistence = ["--appendonly", "yes", "--appendfsync", "always"] if appendonly else ["--appendonly", "no"]
        self.proc = None

    def start(self):
        """Starts it and waits until it answers PING (20 s at most, else SystemExit)."""
        self.proc = subprocess.Popen(["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir",
                                      self.directory, "--save", ""] + self.persistence +
                                     ["--daemonize", "no", "--logfile", os.path.join(self.directory, "redis.log")])
        if not daemon_client.wait_for(self.up, 20, 0.05):
            raise SystemExit("redis-server did not come up")
        return self

    def stop(self):
        """SIGTERM: it finishes its append-only file and exits."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=30)

    def up(self):
        return subprocess.run(["redis-cli", "-p", str(self.port), "PING"], capture_output=True,
                              text=True).stdout.strip() == "PONG"

    def cli(self, *args, json_out=False):
        """One redis-cli command; its reply as text (--raw), or parsed (RESP2 as JSON) with json_out."""
        cmd = ["redis-cli", "-p", str(self.port)] + (["-2", "--json"] if json_out else ["--raw"]) + [str(a) for a in args]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        return json.loads(out) if json_out else out.strip()

    def uri(self, path):
        """redis://127.0.0.1:PORT/PATH (PATH: a stream, with a query if wanted)."""
        return f"redis://127.0.0.1:{self.port}/{path}"

    def entries(self, stream):
        """The fields of each entry of `stream`, oldest first, as dicts."""
        return [dict(zip(f[0::2], f[1::2])) for _, f in self.cli("XRANGE", stream, "-", "+", json_out=True)]


def job_status(sluicectl, uri, check, what):
    """`sluicectl jobs status URI --json`, parsed ({} when it fails; `check` records that, named after `what`)."""
    rc = subprocess.run([sluicectl, "jobs", "status", uri, "--json"], capture_output=True, text=True)
    check(f"{what}sluicectl jobs status answers", rc.returncode == 0, rc.stderr)
    return json.loads(rc.stdout) if rc.returncode == 0 else {}
