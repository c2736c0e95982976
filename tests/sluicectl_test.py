#!/usr/bin/env python3
"""sluicectl end to end against a fake sluiced: a thread serving canned JSON-line replies on a temporary
UNIX socket and recording every request it received.

usage: sluicectl_test.py PATH/TO/sluicectl
Prints one ok/FAIL line per check; exits 1 if any check failed. Python 3 standard library only.
"""
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

STATUS = {
    "ok": True, "state": "running", "uptime_s": 3723.5, "config": "/etc/sluice/pipeline.yaml",
    "pipeline": "default", "device": "cuda", "execution": "pipelined", "generation": 2,
    "frames": {"produced": 100, "delivered": 93, "dropped": 3, "failed": 0, "in_flight": 4,
               "drop_reasons": {"queue full (leaky: oldest)": 3}, "errors": ["infer: frame 17: boom"]},
    "frames_before_reload": {"produced": 500, "delivered": 498, "dropped": 2, "failed": 0},
    "latency_ms": {"p50": 3.1, "p90": 4.0, "p99": 5.2},
    "stages": [
        {"name": "decode", "kind": "decode", "on_gpu": False, "frames": 100, "batches": 13,
         "fps_1s": 30.0, "fps_10s": 30.0, "fps_60s": 29.5, "gpu_ms_per_batch": 0.0, "busy": 0.0,
         "host_ms_per_batch": 1.2, "cpu_ms_per_batch": 0.9, "queue_depth": 1, "queue_capacity": 4, "dropped": 0, "errors": 0},
        {"name": "preprocess", "kind": "preprocess", "on_gpu": True, "frames": 98, "batches": 12,
         "fps_1s": 31.25, "fps_10s": 30.5, "fps_60s": 28.75, "gpu_ms_per_batch": 0.842, "busy": 0.37,
         "host_ms_per_batch": 0.05, "queue_depth": 2, "queue_capacity": 8, "dropped": 3, "errors": 0},
        {"name": "detector", "kind": "infer", "on_gpu": True, "frames": 97, "batches": 12,
         "fps_1s": 29.0, "fps_10s": 29.9, "fps_60s": 27.0, "gpu_ms_per_batch": 4.5, "busy": 0.81,
         "host_ms_per_batch": 0.1, "queue_depth": 3, "queue_capacity": 8, "dropped": 0, "errors": 1},
    ],
}

# Run-time sources: a file, a stream backing off, a directory job with a bad file, a stalled camera.
SOURCES = [
    {"id": 1, "name": "clip", "uri": "/data/clip.mp4", "kind": "file", "state": "live", "reason": "",
     "leaky": False, "frames": 37, "dropped": 0, "errors": 0, "reconnects": 0, "fps": 45.2,
     "since_last_frame_s": 0.03, "next_attempt_in_s": -1,
     "inputs": {"total": 1, "done": 0, "failed": 0, "skipped": 0}, "bad_inputs": []},
    {"id": 2, "name": "cam7", "uri": "rtsp://cam7.local:554/stream", "kind": "stream", "state": "backoff",
     "reason": "connection refused", "leaky": True, "frames": 1200, "dropped": 14, "errors": 3, "reconnects": 2,
     "fps": 0.0, "since_last_frame_s": 12.4, "next_attempt_in_s": 1.2,
     "inputs": {"total": 1, "done": 0, "failed": 0, "skipped": 0}, "bad_inputs": []},
    {"id": 3, "name": "batch", "uri": "/data/batch", "kind": "file", "state": "live", "reason": "",
     "leaky": False, "frames": 480, "dropped": 0, "errors": 1, "reconnects": 0, "fps": 88.0,
     "since_last_frame_s": 0.01, "next_attempt_in_s": -1,
     "inputs": {"total": 10, "done": 4, "failed": 1, "skipped": 2},
     "bad_inputs": ["/data/batch/bad.mp4: cannot open: no video stream"]},
    {"id": 4, "name": "lobby", "uri": "/dev/video0", "kind": "camera", "state": "stalled",
     "reason": "no frame for 5 s", "leaky": True, "frames": 900, "dropped": 0, "errors": 0, "reconnects": 0,
     "fps": 0.0, "since_last_frame_s": 6.1, "next_attempt_in_s": -1,
     "inputs": {"total": 1, "done": 0, "failed": 0, "skipped": 0}, "bad_inputs": []},
]
INPUTS = [
    {"id": 7, "source": "batch", "uri": "/data/batch/b.mp4", "kind": "file", "frames_done": 300,
     "frames_total": 300, "decoded": 300, "delivered": 299, "dropped": 0, "failed": 1, "fps": 88.0, "eta_s": None,
     "state": "done", "error": ""},
    {"id": 3, "source": "clip", "uri": "/data/clip.mp4", "kind": "file", "frames_done": 37, "frames_total": 120,
     "decoded": 40, "delivered": 37, "dropped": 0, "failed": 0, "fps": 45.2, "eta_s": 1.8, "state": "decoding",
     "error": ""},
    {"id": 6, "source": "batch", "uri": "/data/batch/bad.mp4", "kind": "file", "frames_done": 0,
     "frames_total": None, "decoded": 0, "delivered": 0, "dropped": 0, "failed": 0, "fps": 0, "eta_s": None,
     "state": "failed", "error": "cannot open: no video stream"},
    {"id": 8, "source": "batch", "uri": "/data/batch/c.mp4", "kind": "file", "frames_done": 150,
     "frames_total": 600, "decoded": 160, "delivered": 148, "dropped": 2, "failed": 0, "fps": 42.0, "eta_s": 125.0,
     "state": "decoding", "error": ""},
    {"id": 9, "source": "lobby", "uri": "/dev/video0", "kind": "camera", "frames_done": 900, "frames_total": None,
     "decoded": 900, "delivered": 900, "dropped": 0, "failed": 0, "fps": 0.0, "eta_s": None, "state": "decoding",
     "error": ""},
]
SOURCES_REPLY = {"ok": True, "sources": SOURCES, "inputs": INPUTS}

SILENT = object()   # read the request, never answer
CLOSE = object()    # read the request, close without answering


class Delayed:
    """A reply sent `delay` seconds after the request arrived (as the daemon answers trace after recording)."""

    def __init__(self, delay, reply):
        self.delay = delay
        self.reply = reply


TRACE = {"traceEvents": [
    {"name": "decode", "cat": "stage", "ph": "X", "ts": 1000, "dur": 1200, "pid": 1, "tid": 1,
     "args": {"frames": 8}},
    {"name": "infer", "cat": "gpu", "ph": "X", "ts": 2300, "dur": 4500, "pid": 1, "tid": 2},
    {"name": "thread_name", "ph": "M", "pid": 1, "tid": 2, "args": {"name": "detector \u00e9"}},
], "displayTimeUnit": "ms", "metadata": {"pipeline": "default"}}

DEFAULT_REPLIES = {
    "status": STATUS,
    "version": {"ok": True, "version": "0.3.1", "cuda": True},
    "pause": {"ok": True, "state": "paused"},
    "resume": {"ok": True, "state": "running"},
    "stop": {"ok": True, "state": "stopping"},
    "reload": {"ok": True, "config": "/etc/sluice/pipeline.yaml", "generation": 3},
    "trace": Delayed(0.3, {"ok": True, "trace": TRACE}),
    "sources": SOURCES_REPLY,
    "source-add": {"ok": True, "id": 5, "name": "cam9"},
    "source-remove": {"ok": True},
}


class FakeServer:
    """Listens on `path`; answers each request line with replies[request name] (a dict sent as one JSON
    line, a str sent as is, SILENT, CLOSE, or a Delayed one of these). Records every request line, parsed
    when it parses."""

    def __init__(self, path, replies=None, listen=True):
        self.path = path
        self.replies = dict(DEFAULT_REPLIES if replies is None else replies)
        self.received = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.bind(path)
        self.threads = []
        if listen:
            self.sock.listen(8)
            self.sock.settimeout(0.1)
            t = threading.Thread(target=self._accept, daemon=True)
            t.start()
            self.threads.append(t)

    def requests(self):
        with self.lock:
            return list(self.received)

    def _accept(self):
        while not self.stopping.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            t.start()
            self.threads.append(t)

    def _serve(self, conn):
        conn.settimeout(0.1)
        buf = b""
        with conn:
            while not self.stopping.is_set():
                try:
                    chunk = conn.recv(65536)
                except socket.timeout:
                    continue
                except OSError:
                    return
                if not chunk:
                    return
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    try:
                        req = json.loads(line)
                    except ValueError:
                        req = {"unparsed": line.decode(errors="replace")}
                    with self.lock:
                        self.received.append(req)
                    name = req.get("request") if isinstance(req, dict) else None
                    reply = self.replies.get(name, {"ok": False, "error": f"unknown request '{name}'"})
                    if isinstance(reply, Delayed):
                        if self.stopping.wait(reply.delay):
                            return
                        reply = reply.reply
                    if reply is SILENT:
                        self.stopping.wait()
                        return
                    if reply is CLOSE:
                        return
                    data = reply if isinstance(reply, str) else json.dumps(reply) + "\n"
                    try:
                        conn.sendall(data.encode())
                    except OSError:
                        return

    def close(self):
        self.stopping.set()
        self.sock.close()
        for t in self.threads:
            t.join(timeout=2)
        try:
            os.unlink(self.path)
        except FileNotFoundError:
            pass


class Runner:
    def __init__(self, binary, tmp):
        self.binary = binary
        self.tmp = tmp
        self.fails = 0
        self.count = 0
        self.n = 0

    def sock_path(self):
        self.n += 1
        return os.path.join(self.tmp, f"s{self.n}.sock")

    def run(self, args, env_socket=None, cwd=None, timeout=20):
        env = dict(os.environ)
        env.pop("SLUICE_SOCKET", None)
        if env_socket is not None:
            env["SLUICE_SOCKET"] = env_socket
        t0 = time.monotonic()
        p = subprocess.run([self.binary] + args, capture_output=True, text=True, env=env, cwd=cwd,
                           timeout=timeout)
        p.elapsed = time.monotonic() - t0
        return p

    def check(self, name, cond, detail=""):
        self.count += 1
        if cond:
            print(f"ok   {name}")
        else:
            self.fails += 1
            print(f"FAIL {name}")
            if detail:
                for line in str(detail).splitlines():
                    print(f"  | {line}")

    @staticmethod
    def show(p, extra=""):
        return f"exit {p.returncode}\nstdout:\n{p.stdout}\nstderr:\n{p.stderr}\n{extra}"


def main():
    if len(sys.argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    binary = os.path.abspath(sys.argv[1])
    tmp = os.path.realpath(tempfile.mkdtemp(prefix="sluicectl-test-"))
    r = Runner(binary, tmp)
    try:
        run_checks(r)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"{r.count - r.fails}/{r.count} checks passed")
    return 1 if r.fails else 0


def run_checks(r):
    # --- usage -------------------------------------------------------------------------------------------
    p = r.run(["--help"])
    r.check("help", p.returncode == 0 and "usage: sluicectl" in p.stdout and "exit status" in p.stdout
            and "watch" in p.stdout and "reload" in p.stdout, r.show(p))
    p = r.run(["reload", "--help"])
    r.check("help per command", p.returncode == 0 and "usage: sluicectl reload" in p.stdout, r.show(p))
    p = r.run(["help", "status"])
    r.check("help COMMAND", p.returncode == 0 and "usage: sluicectl status" in p.stdout, r.show(p))
    p = r.run([])
    r.check("no command exits 2", p.returncode == 2 and "usage" in p.stderr, r.show(p))
    r.check("no command: a short hint naming the commands, not all of --help",
            len(p.stderr.splitlines()) <= 3 and "no command given" in p.stderr and "add-source" in p.stderr
            and "exit status" not in p.stderr and p.stdout == "", r.show(p))
    p = r.run(["--socket", "/nonexistent/x.sock", "frobnicate"])
    r.check("unknown command exits 2", p.returncode == 2 and "unknown command 'frobnicate'" in p.stderr, r.show(p))
    p = r.run(["--timeout", "soon", "status"])
    r.check("bad --timeout exits 2", p.returncode == 2 and "--timeout" in p.stderr, r.show(p))
    p = r.run(["pause", "now"])
    r.check("extra argument exits 2", p.returncode == 2 and "unexpected argument 'now'" in p.stderr, r.show(p))
    p = r.run(["status", "--jsno"])
    r.check("unknown status option exits 2", p.returncode == 2, r.show(p))
    p = r.run(["watch", "--interval", "0"])
    r.check("watch interval too small exits 2", p.returncode == 2, r.show(p))
    p = r.run(["--socket", "/tmp/" + "x" * 200, "status"])
    r.check("socket path too long exits 2", p.returncode == 2 and "too long" in p.stderr, r.show(p))
    p = r.run(["--help"])
    r.check("help lists trace", "trace SECONDS -o FILE" in p.stdout and "ui.perfetto.dev" in p.stdout, r.show(p))
    p = r.run(["trace", "--help"])
    r.check("trace --help", p.returncode == 0 and "usage: sluicectl trace SECONDS -o FILE" in p.stdout
            and "--output" in p.stdout, r.show(p))
    p = r.run(["help", "trace"])
    r.check("help trace", p.returncode == 0 and "usage: sluicectl trace" in p.stdout, r.show(p))
    # usage errors are caught before connecting: the socket does not exist
    nosock = ["--socket", "/nonexistent/x.sock"]
    for bad in ["0", "-1", "61", "60.5", "abc", "1s", "nan", "inf", ""]:
        p = r.run(nosock + ["trace", bad, "-o", "/nonexistent/t.json"])
        r.check(f"trace bad SECONDS {bad!r} exits 2", p.returncode == 2 and "SECONDS" in p.stderr, r.show(p))
    p = r.run(nosock + ["trace", "1"])
    r.check("trace without -o exits 2", p.returncode == 2 and "-o FILE is required" in p.stderr, r.show(p))
    p = r.run(nosock + ["trace", "1", "-o"])
    r.check("trace -o without FILE exits 2", p.returncode == 2 and "needs a FILE" in p.stderr, r.show(p))
    p = r.run(nosock + ["trace", "-o", "/nonexistent/t.json"])
    r.check("trace without SECONDS exits 2", p.returncode == 2 and "SECONDS missing" in p.stderr, r.show(p))
    p = r.run(nosock + ["trace", "1", "2", "-o", "/nonexistent/t.json"])
    r.check("trace with two SECONDS exits 2", p.returncode == 2 and "unexpected argument '2'" in p.stderr, r.show(p))
    p = r.run(nosock + ["trace", "1", "-o", "a.json", "-o", "b.json"])
    r.check("trace -o twice exits 2", p.returncode == 2, r.show(p))
    p = r.run(nosock + ["trace", "1", "--out", "a.json"])
    r.check("trace unknown option exits 2", p.returncode == 2 and "unknown option '--out'" in p.stderr, r.show(p))

    # --- requests against the fake daemon ----------------------------------------------------------------
    path = r.sock_path()
    srv = FakeServer(path)
    try:
        p = r.run(["--socket", path, "status"])
        out = p.stdout
        want = ["running", "/etc/sluice/pipeline.yaml", "default", "cuda", "pipelined", "1h 02m 03s",
                "decode", "preprocess", "detector (infer)",
                "31.2", "30.5", "28.8", "29.5",       # fps
                "0.842", "4.500", "37%", "81%",       # gpu ms/batch, busy
                "1/4", "2/8", "3/8",                  # queues
                "produced 100 = delivered 93 + dropped 3 + failed 0 + in flight 4",
                "dropped 3: queue full (leaky: oldest)", "error: infer: frame 17: boom",
                "earlier generations: produced 500 = delivered 498 + dropped 2 + failed 0 + in flight 0",
                "p50 3.10 ms", "p90 4.00 ms", "p99 5.20 ms"]
        missing = [w for w in want if w not in out]
        r.check("status table", p.returncode == 0 and not missing, r.show(p, f"missing: {missing}"))
        decode_row = next((l for l in out.splitlines() if l.startswith("decode")), "")
        cols = decode_row.split()
        # decode is a CPU stage: gpu ms/b and busy are '-' even though the daemon sent 0.0
        r.check("status row: CPU stage has no GPU columns",
                cols[:10] == ["decode", "100", "30.0", "30.0", "29.5", "1.200", "0.900", "-", "-", "1/4"], decode_row)
        r.check("status sent one request", srv.requests()[-1:] == [{"request": "status"}], srv.requests())

        p = r.run(["--socket", path, "status", "--json"])
        try:
            got = json.loads(p.stdout)
        except ValueError as e:
            got = e
        r.check("status --json round-trips", p.returncode == 0 and got == STATUS, r.show(p))
        r.check("status --json is indented", "\n  \"state\"" in p.stdout, r.show(p))

        for cmd, state in [("pause", "paused"), ("resume", "running"), ("stop", "stopping")]:
            before = len(srv.requests())
            p = r.run(["--socket", path, cmd])
            sent = srv.requests()[before:]
            r.check(f"{cmd} sends {{'request': '{cmd}'}} and exits 0",
                    p.returncode == 0 and sent == [{"request": cmd}] and state in p.stdout,
                    r.show(p, f"sent: {sent}"))

        before = len(srv.requests())
        sub = os.path.join(r.tmp, "cfg")
        os.makedirs(sub, exist_ok=True)
        p = r.run(["--socket", path, "reload", "pipe.yaml"], cwd=sub)
        sent = srv.requests()[before:]
        want_path = os.path.join(sub, "pipe.yaml")
        r.check("reload FILE sends an absolute path",
                p.returncode == 0 and sent == [{"request": "reload", "path": want_path}]
                and "generation 3" in p.stdout, r.show(p, f"sent: {sent}\nwant path: {want_path}"))

        before = len(srv.requests())
        p = r.run(["--socket", path, "reload", "../cfg/./other.yaml"], cwd=sub)
        sent = srv.requests()[before:]
        r.check("reload FILE path is normalised",
                p.returncode == 0 and sent == [{"request": "reload", "path": os.path.join(sub, "other.yaml")}],
                r.show(p, f"sent: {sent}"))

        before = len(srv.requests())
        p = r.run(["--socket", path, "reload"])
        sent = srv.requests()[before:]
        r.check("reload without FILE sends no path", p.returncode == 0 and sent == [{"request": "reload"}],
                r.show(p, f"sent: {sent}"))

        before = len(srv.requests())
        p = r.run(["reload", "/etc/sluice/a.yaml"], env_socket=path)
        sent = srv.requests()[before:]
        r.check("$SLUICE_SOCKET is used", p.returncode == 0 and sent == [{"request": "reload", "path": "/etc/sluice/a.yaml"}],
                r.show(p, f"sent: {sent}"))

        p = r.run(["--socket", path, "version"])
        r.check("version", p.returncode == 0 and "sluicectl" in p.stdout and "sluiced 0.3.1 (cuda: yes)" in p.stdout,
                r.show(p))

        # --token-file: the file's line goes with the request as "token"; a file others may read is refused.
        token = os.path.join(r.tmp, "token")
        with open(token, "w") as f:
            f.write("correct-horse-battery-staple\n")
        os.chmod(token, 0o600)
        before = len(srv.requests())
        p = r.run(["--socket", path, "--token-file", token, "pause"])
        sent = srv.requests()[before:]
        r.check("--token-file sends the token", p.returncode == 0 and
                sent == [{"request": "pause", "token": "correct-horse-battery-staple"}], r.show(p, f"sent: {sent}"))
        os.chmod(token, 0o644)
        before = len(srv.requests())
        p = r.run(["--socket", path, "--token-file", token, "pause"])
        r.check("--token-file readable by others: usage error naming the mode, nothing sent",
                p.returncode == 2 and "mode 0644" in p.stderr and len(srv.requests()) == before, r.show(p))

        # watch: refreshes until SIGINT, then exits 0
        env = dict(os.environ)
        env.pop("SLUICE_SOCKET", None)
        before = len(srv.requests())
        w = subprocess.Popen([r.binary, "--socket", path, "watch", "--interval", "0.2"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.monotonic() + 15
        # three requests seen: at least two replies have been answered and printed
        while len(srv.requests()) - before < 3 and time.monotonic() < deadline and w.poll() is None:
            time.sleep(0.05)
        refreshes = len(srv.requests()) - before
        w.send_signal(signal.SIGINT)
        try:
            wout, werr = w.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            w.kill()
            wout, werr = w.communicate()
        r.check("watch refreshes and exits 0 on SIGINT",
                refreshes >= 3 and w.returncode == 0 and wout.count("detector (infer)") >= 2,
                f"refreshes {refreshes}, exit {w.returncode}\nstdout:\n{wout[-2000:]}\nstderr:\n{werr}")
    finally:
        srv.close()

    # --- watch on an 80-column terminal: a long reason is cut with an ellipsis, no line wraps -----------------
    run_watch_width_checks(r)
    run_hostile_name_checks(r)

    # --- trace ----------------------------------------------------------------------------------------------
    run_trace_checks(r)

    # --- run-time sources: sources, add-source, remove-source, status's sources section ------------------
    run_source_checks(r)

    # --- a reply with most fields missing: '-' in their place --------------------------------------------
    path = r.sock_path()
    srv = FakeServer(path, {"status": {"ok": True, "state": "starting",
                                       "stages": [{"name": "decode"}, {"frames": "many"}, 7],
                                       "frames": None, "latency_ms": {"p50": 1.5}},
                            "version": {"ok": True}})
    try:
        p = r.run(["--socket", path, "status"])
        r.check("status with missing fields prints '-'",
                p.returncode == 0 and "starting" in p.stdout and "decode" in p.stdout
                and "produced - = delivered -" in p.stdout and "p50 1.50 ms, p90 -" in p.stdout
                and "earlier generations" not in p.stdout, r.show(p))
        p = r.run(["--socket", path, "version"])
        r.check("version with missing fields prints '-'",
                p.returncode == 0 and "sluiced - (cuda: -)" in p.stdout, r.show(p))
        p = r.run(["--socket", path, "pause"])
        r.check("unknown request reply ok:false exits 1", p.returncode == 1 and "unknown request" in p.stderr, r.show(p))
    finally:
        srv.close()

    # --- earlier generations: hidden while there are none; docs/protocol.md's `totals` wrapper accepted --------
    path = r.sock_path()
    first = dict(STATUS, generation=1,
                 frames_before_reload={"produced": 0, "delivered": 0, "dropped": 0, "failed": 0})
    srv = FakeServer(path, {"status": first, "version": {"ok": True, "version": "x", "cuda": False}})
    try:
        p = r.run(["--socket", path, "status"])
        r.check("generation 1: no earlier-generations line",
                p.returncode == 0 and "earlier generations" not in p.stdout, r.show(p))
        srv.replies["status"] = dict(STATUS, frames_before_reload={"totals": {"produced": 7, "delivered": 7,
                                                                              "dropped": 0, "failed": 0}})
        p = r.run(["--socket", path, "status"])
        r.check("frames_before_reload.totals accepted",
                p.returncode == 0 and "earlier generations: produced 7 = delivered 7" in p.stdout, r.show(p))
    finally:
        srv.close()

    # --- the daemon refuses ------------------------------------------------------------------------------
    path = r.sock_path()
    srv = FakeServer(path, {
        "reload": {"ok": False, "error": "pipe.yaml:3:13: stage 'decode' (decode): key 'frames': expected an integer"},
        "pause": {"ok": False, "error": "permission denied: user 'bob' may not pause"},
        "stop": {"ok": False},
    })
    try:
        p = r.run(["--socket", path, "reload", "/x/pipe.yaml"])
        r.check("ok:false exits 1 with the error on stderr",
                p.returncode == 1 and "pipe.yaml:3:13: stage 'decode'" in p.stderr and p.stdout == "", r.show(p))
        p = r.run(["--socket", path, "pause"])
        r.check("refused pause exits 1", p.returncode == 1 and "permission denied: user 'bob'" in p.stderr, r.show(p))
        p = r.run(["--socket", path, "stop"])
        r.check("ok:false without error exits 1", p.returncode == 1 and p.stderr.strip() != "", r.show(p))
    finally:
        srv.close()

    # --- cannot connect ----------------------------------------------------------------------------------
    missing = os.path.join(r.tmp, "missing.sock")
    p = r.run(["--socket", missing, "status"])
    r.check("missing socket exits 3 with a helpful message",
            p.returncode == 3 and missing in p.stderr and "no such file" in p.stderr
            and "is sluiced running" in p.stderr, r.show(p))
    p = r.run(["pause"], env_socket=missing)
    r.check("missing $SLUICE_SOCKET socket exits 3", p.returncode == 3 and missing in p.stderr, r.show(p))

    path = r.sock_path()
    srv = FakeServer(path, listen=False)  # bound but not listening: a stale socket file
    try:
        p = r.run(["--socket", path, "status"])
        r.check("stale socket exits 3 (connection refused)",
                p.returncode == 3 and "connection refused" in p.stderr, r.show(p))
    finally:
        srv.close()

    notsock = os.path.join(r.tmp, "plain-file")
    open(notsock, "w").close()
    p = r.run(["--socket", notsock, "status"])
    r.check("a plain file exits 3", p.returncode == 3 and notsock in p.stderr and "not a socket" in p.stderr, r.show(p))

    if os.geteuid() != 0:
        path = r.sock_path()
        srv = FakeServer(path)
        try:
            os.chmod(path, 0)
            p = r.run(["--socket", path, "status"])
            r.check("socket without permission exits 3",
                    p.returncode == 3 and "permission denied" in p.stderr and "group" in p.stderr, r.show(p))
        finally:
            srv.close()
    else:
        print("skip socket without permission (running as root)")

    # --- timeouts and broken replies ---------------------------------------------------------------------
    path = r.sock_path()
    srv = FakeServer(path, {"status": SILENT})
    try:
        p = r.run(["--socket", path, "--timeout", "1", "status"])
        r.check("silent server exits 4 after --timeout 1",
                p.returncode == 4 and "no reply" in p.stderr and p.elapsed < 10,
                r.show(p, f"elapsed {p.elapsed:.1f} s"))
        r.check("silent server still got the request", {"request": "status"} in srv.requests(), srv.requests())
    finally:
        srv.close()

    path = r.sock_path()
    srv = FakeServer(path, {"status": "this is not json\n", "pause": "[1, 2]\n", "resume": '{"state": "x"}\n',
                            "stop": CLOSE, "version": '{"ok": true, "version": "1.0"'})
    try:
        p = r.run(["--socket", path, "--timeout", "2", "status"])
        r.check("non-JSON reply exits 4", p.returncode == 4 and "broken reply" in p.stderr, r.show(p))
        p = r.run(["--socket", path, "--timeout", "2", "pause"])
        r.check("non-object reply exits 4", p.returncode == 4 and "broken reply" in p.stderr, r.show(p))
        p = r.run(["--socket", path, "--timeout", "2", "resume"])
        r.check("reply without 'ok' exits 4", p.returncode == 4 and "'ok'" in p.stderr, r.show(p))
        p = r.run(["--socket", path, "--timeout", "2", "stop"])
        r.check("closed without reply exits 4", p.returncode == 4 and "closed" in p.stderr, r.show(p))
        p = r.run(["--socket", path, "--timeout", "1", "version"])
        r.check("truncated reply exits 4", p.returncode == 4, r.show(p))
    finally:
        srv.close()


def is_number(v):
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def run_hostile_name_checks(r):
    """Names and reasons are any bytes a peer or a file system chose (issue 33): sluicectl prints them escaped,
    so no ESC sequence reaches the terminal and no newline forges a table row."""
    esc_name = "cam\x1b[2J\x1b]0;owned\x07"
    forged = "x\n  99  admin     file live        1000000    30.0        0       0          0"
    hostile_sources = [dict(SOURCES[0], id=1, name=esc_name, uri="/data/\x1b[31mred.mp4"),
                       dict(SOURCES[1], id=2, name=forged, reason="refused\r\x1b[1Aup \u202e4pm.exe")]
    hostile_inputs = [dict(INPUTS[1], source=esc_name, uri="/data/a\nb.mp4", error="")]
    replies = dict(DEFAULT_REPLIES)
    replies["sources"] = {"ok": True, "sources": hostile_sources, "inputs": hostile_inputs}
    replies["pause"] = {"ok": False, "error": "permission denied \x1b[2J\nsluicectl: all good"}
    status = dict(STATUS, sources=hostile_sources, inputs=hostile_inputs)
    status["frames"] = dict(STATUS["frames"], errors=["boom\x1b[0m\nfake: line"])
    replies["status"] = status
    path = r.sock_path()
    srv = FakeServer(path, replies)
    try:
        for command in (["sources"], ["status"]):
            p = r.run(["--socket", path] + command)
            r.check(f"{command[0]} with hostile names: exit 0, no control character printed",
                    p.returncode == 0 and not any(c in p.stdout for c in "\x1b\x07\r\u202e"), r.show(p))
            r.check(f"{command[0]}: the names shown escaped", "cam\\x1B[2J\\x1B]0;owned\\x07" in p.stdout,
                    p.stdout)
            r.check(f"{command[0]}: a newline in a name forges no row",
                    not any(l.split()[:2] == ["99", "admin"] for l in p.stdout.splitlines())
                    and "x\\n  99  admin" in p.stdout, p.stdout)
        p = r.run(["--socket", path, "sources"])
        r.check("sources: a reason and a URI shown escaped",
                "refused\\r\\x1B[1Aup \\u{202E}4pm.exe" in p.stdout and "/data/\\x1B[31mred.mp4" in p.stdout
                and "/data/a\\nb.mp4" in p.stdout, p.stdout)
        p = r.run(["--socket", path, "pause"])
        r.check("a refusal's reason on stderr: escaped, one line",
                p.returncode == 1 and p.stderr == "sluicectl: daemon: permission denied \\x1B[2J\\nsluicectl: all good\n",
                r.show(p))
    finally:
        srv.close()


def run_watch_width_checks(r):
    import fcntl
    import pty
    import re
    import struct
    import termios
    long_reason = ("cannot open rtsp://camera.example/stream: " + "Connection refused; retrying with TCP. " * 12 +
                   "caf\u00e9\tend")
    failing = dict(SOURCES[1], state="failed", reason=long_reason)
    path = r.sock_path()
    srv = FakeServer(path, {"status": dict(STATUS, sources=[SOURCES[0], failing], inputs=INPUTS)})
    try:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 80, 0, 0))
        env = dict(os.environ, TERM="xterm")
        env.pop("SLUICE_SOCKET", None)
        env.pop("COLUMNS", None)
        w = subprocess.Popen([r.binary, "--socket", path, "watch", "--interval", "0.2"], stdin=subprocess.DEVNULL,
                             stdout=slave, stderr=subprocess.PIPE, env=env)
        os.close(slave)
        data, deadline = b"", time.monotonic() + 15
        while data.count(b"\x1b[2J") < 3 and time.monotonic() < deadline:  # two whole screens at least
            ready = select.select([master], [], [], 0.2)[0]
            if ready:
                try:
                    data += os.read(master, 65536)
                except OSError:
                    break
        w.send_signal(signal.SIGINT)
        w.wait(timeout=10)
        os.close(master)
        screen = data.decode("utf-8", "replace").split("\x1b[2J")[-2]  # a whole screen
        lines = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", screen).replace("\r", "").split("\n")
        widest = max(len(l) for l in lines)
        r.check("watch on an 80-column terminal: no line wider than 80", widest <= 80,
                f"widest {widest}:\n" + "\n".join(lines))
        r.check("watch: the row with the long reason is cut with an ellipsis",
                any(l.split()[:4] == ["2", "cam7", "stream", "failed"] and l.endswith("\u2026") for l in lines),
                "\n".join(lines))
        r.check("watch: the rows after the long reason are still whole rows",
                any(l.startswith("frames: ") for l in lines), "\n".join(lines))
    finally:
        srv.close()


def run_source_checks(r):
    # help
    p = r.run(["--help"])
    r.check("help lists sources, add-source, remove-source",
            "sources [--json]" in p.stdout
            and "add-source URI [--name NAME] [--leaky|--no-leaky] [--rate-limit FPS] [--loop]" in p.stdout
            and "remove-source ID|NAME" in p.stdout, r.show(p))
    for cmd, want in [("sources", "usage: sluicectl sources [--json]"),
                      ("add-source", "usage: sluicectl add-source URI"),
                      ("remove-source", "usage: sluicectl remove-source ID|NAME")]:
        p = r.run([cmd, "--help"])
        r.check(f"{cmd} --help", p.returncode == 0 and want in p.stdout, r.show(p))
        p = r.run(["help", cmd])
        r.check(f"help {cmd}", p.returncode == 0 and want in p.stdout, r.show(p))
    p = r.run(["add-source", "--help"])
    r.check("add-source --help names its options",
            all(o in p.stdout for o in ["--name NAME", "--leaky", "--no-leaky", "--rate-limit FPS", "--loop",
                                        "testsrc:PATTERN", "absolute"]), r.show(p))

    # usage errors are caught before connecting: the socket does not exist
    nosock = ["--socket", "/nonexistent/x.sock"]
    for args, want in [
        (["sources", "--all"], "unexpected argument '--all'"),
        (["add-source"], "URI missing"),
        (["add-source", "--loop"], "URI missing"),
        (["add-source", "a.mp4", "b.mp4"], "unexpected argument 'b.mp4'"),
        (["add-source", ""], "empty URI"),
        (["add-source", "a.mp4", "--fast"], "unknown option '--fast'"),
        (["add-source", "a.mp4", "--name"], "--name needs a NAME"),
        (["add-source", "a.mp4", "--name", ""], "empty --name"),
        (["add-source", "a.mp4", "--name=x", "--name", "y"], "--name given more than once"),
        (["add-source", "a.mp4", "--rate-limit"], "--rate-limit needs FPS"),
        (["add-source", "a.mp4", "--rate-limit", "fast"], "--rate-limit"),
        (["add-source", "a.mp4", "--rate-limit", "-1"], "--rate-limit"),
        (["add-source", "a.mp4", "--rate-limit=nan"], "--rate-limit"),
        (["add-source", "a.mp4", "--rate-limit", "1", "--rate-limit", "2"], "--rate-limit given more than once"),
        (["add-source", "a.mp4", "--leaky", "--no-leaky"], "--leaky and --no-leaky together"),
        (["remove-source"], "ID or NAME missing"),
        (["remove-source", "1", "2"], "unexpected argument '2'"),
        (["remove-source", ""], "empty ID or NAME"),
        (["remove-source", "--all"], "unknown option '--all'"),
    ]:
        p = r.run(nosock + args)
        r.check(f"{' '.join(args)!r} exits 2", p.returncode == 2 and want in p.stderr and p.stdout == "", r.show(p))

    path = r.sock_path()
    srv = FakeServer(path)
    try:
        # sources: one row per source, the reason and job counts after the columns, URI and bad inputs below
        before = len(srv.requests())
        p = r.run(["--socket", path, "sources"])
        sent = srv.requests()[before:]
        out = p.stdout
        r.check("sources sends {'request': 'sources'}", p.returncode == 0 and sent == [{"request": "sources"}],
                r.show(p, f"sent: {sent}"))
        lines = out.splitlines()

        def row(first_cols):
            return next((l for l in lines if l.split()[:len(first_cols)] == first_cols), "")

        header = lines[0].split() if lines else []
        r.check("sources header", header == ["id", "source", "kind", "state", "frames", "fps", "dropped", "errors",
                                             "reconnects"], out)
        clip = row(["1", "clip"])
        r.check("sources row: a live file",
                clip.split() == ["1", "clip", "file", "live", "37", "45.2", "0", "0", "0"], clip)
        cam = row(["2", "cam7"])
        r.check("sources row: a stream backing off, with reason and next attempt",
                cam.split()[:9] == ["2", "cam7", "stream", "backoff", "1200", "0.0", "14", "3", "2"]
                and "backoff: connection refused (next attempt in 1.2 s)" in cam
                and "inputs" not in cam, cam)
        batch = row(["3", "batch"])
        r.check("sources row: a job's inputs done/total, failed, skipped",
                batch.split()[:9] == ["3", "batch", "file", "live", "480", "88.0", "0", "1", "0"]
                and "inputs 4/10 done, 1 failed, 2 skipped" in batch, batch)
        lobby = row(["4", "lobby"])
        r.check("sources row: a stalled camera, since its last frame",
                lobby.split()[:4] == ["4", "lobby", "camera", "stalled"]
                and "stalled: no frame for 5 s (last frame 6.1 s ago)" in lobby, lobby)
        r.check("sources: a live source has no reason", "live:" not in out, out)
        r.check("sources: URI and bad inputs under their source",
                "uri rtsp://cam7.local:554/stream" in out
                and out.index("bad input: /data/batch/bad.mp4: cannot open: no video stream") > out.index(batch)
                and out.index("bad input:") < out.index(lobby), out)

        in_header = next((l for l in lines if l.split()[:2] == ["input", "source"]), "")
        r.check("sources: inputs table header",
                in_header.split() == ["input", "source", "state", "frames", "%", "fps", "ETA", "uri"], out)
        i3 = row(["3", "clip", "decoding"])
        r.check("sources: input in progress with done/total, %, fps, ETA",
                i3.split() == ["3", "clip", "decoding", "37/120", "30%", "45.2", "1.8", "s", "/data/clip.mp4"], i3)
        i8 = row(["8", "batch", "decoding"])
        r.check("sources: ETA over a minute", i8.split()[3:8] == ["150/600", "25%", "42.0", "2m", "05s"], i8)
        i9 = row(["9", "lobby"])
        r.check("sources: a camera input has no total, % or ETA", i9.split()[2:7] == ["decoding", "900/-", "-", "0.0", "-"],
                i9)
        i6 = row(["6", "batch"])
        r.check("sources: a failed input with its error",
                i6.split()[2] == "failed" and "/data/batch/bad.mp4 (cannot open: no video stream)" in i6, i6)
        order = [l.split()[0] for l in lines[lines.index(in_header) + 1:]] if in_header in lines else []
        r.check("sources: inputs in progress listed before finished ones", order == ["3", "8", "9", "7", "6"], out)
        r.check("sources: a finished input has no ETA", row(["7", "batch"]).split()[2:] ==
                ["done", "300/300", "100%", "88.0", "-", "/data/batch/b.mp4"], row(["7", "batch"]))

        p = r.run(["--socket", path, "sources", "--json"])
        try:
            got = json.loads(p.stdout)
        except ValueError as e:
            got = e
        r.check("sources --json round-trips", p.returncode == 0 and got == SOURCES_REPLY and "\n  \"sources\"" in p.stdout,
                r.show(p))

        # add-source: a relative path is made absolute and normalised; options map to the request's keys
        sub = os.path.join(r.tmp, "media")
        os.makedirs(sub, exist_ok=True)
        before = len(srv.requests())
        p = r.run(["--socket", path, "add-source", "clip.mp4"], cwd=sub)
        sent = srv.requests()[before:]
        r.check("add-source sends an absolute path and prints the id and name",
                p.returncode == 0 and sent == [{"request": "source-add", "uri": os.path.join(sub, "clip.mp4")}]
                and p.stdout == "added source 5 'cam9'\n", r.show(p, f"sent: {sent}"))
        for args, uri in [(["../media/./x/../clips/"], os.path.join(sub, "clips") + "/"),
                          (["clips/*.mp4"], os.path.join(sub, "clips/*.mp4")),
                          (["frames/img_%04d.png"], os.path.join(sub, "frames/img_%04d.png")),
                          (["--", "-odd.mp4"], os.path.join(sub, "-odd.mp4")),
                          (["/data/clip.mp4"], "/data/clip.mp4"),
                          (["rtsp://cam.local:554/live?x=../y"], "rtsp://cam.local:554/live?x=../y"),
                          (["HTTPS://example.com/a.mp4"], "HTTPS://example.com/a.mp4"),
                          (["/dev/video0"], "/dev/video0"),
                          (["/dev/v4l/by-id/usb-cam-video-index0"], "/dev/v4l/by-id/usb-cam-video-index0"),
                          (["v4l2:0"], "v4l2:0"),
                          (["testsrc:bars"], "testsrc:bars"),
                          (["TESTSRC:noise"], "TESTSRC:noise")]:
            before = len(srv.requests())
            p = r.run(["--socket", path, "add-source"] + args, cwd=sub)
            sent = srv.requests()[before:]
            r.check(f"add-source {args[-1]!r} sends uri {uri!r}",
                    p.returncode == 0 and sent == [{"request": "source-add", "uri": uri}], r.show(p, f"sent: {sent}"))

        before = len(srv.requests())
        p = r.run(["--socket", path, "add-source", "rtsp://cam9/live", "--name", "cam9", "--leaky",
                   "--rate-limit", "12.5", "--loop"])
        sent = srv.requests()[before:]
        r.check("add-source options: name, leaky, rate_limit, loop",
                p.returncode == 0 and sent == [{"request": "source-add", "uri": "rtsp://cam9/live", "name": "cam9",
                                                "leaky": True, "rate_limit": 12.5, "loop": True}],
                r.show(p, f"sent: {sent}"))
        before = len(srv.requests())
        p = r.run(["--socket", path, "add-source", "--no-leaky", "--rate-limit=25", "--name=front door", "/v/a.mkv"])
        sent = srv.requests()[before:]
        r.check("add-source --no-leaky, --rate-limit=25 (an integer), --name=NAME, options before URI",
                p.returncode == 0 and sent == [{"request": "source-add", "uri": "/v/a.mkv", "name": "front door",
                                                "leaky": False, "rate_limit": 25}]
                and type(sent[0]["rate_limit"]) is int, r.show(p, f"sent: {sent}"))
        before = len(srv.requests())
        p = r.run(["--socket", path, "add-source", "testsrc:bars", "--rate-limit", "0"])
        sent = srv.requests()[before:]
        r.check("add-source --rate-limit 0 (unlimited) is sent",
                p.returncode == 0 and sent == [{"request": "source-add", "uri": "testsrc:bars", "rate_limit": 0}],
                r.show(p, f"sent: {sent}"))

        # remove-source: by name or id, sent as a string
        for which in ["cam7", "3"]:
            before = len(srv.requests())
            p = r.run(["--socket", path, "remove-source", which])
            sent = srv.requests()[before:]
            r.check(f"remove-source {which} sends source '{which}' and prints it",
                    p.returncode == 0 and sent == [{"request": "source-remove", "source": which}]
                    and p.stdout == f"removed source {which}\n", r.show(p, f"sent: {sent}"))
        before = len(srv.requests())
        p = r.run(["--socket", path, "remove-source", "--", "-odd"])
        sent = srv.requests()[before:]
        r.check("remove-source -- NAME starting with '-'",
                p.returncode == 0 and sent == [{"request": "source-remove", "source": "-odd"}], r.show(p, f"sent: {sent}"))

        # status gains a sources section and a job progress line
        srv.replies["status"] = dict(STATUS, sources=SOURCES, inputs=INPUTS)
        p = r.run(["--socket", path, "status"])
        out = p.stdout
        lines = out.splitlines()
        srow = next((l for l in lines if l.split()[:2] == ["3", "batch"]), "")
        r.check("status: sources section with the same rows",
                p.returncode == 0 and srow.split()[:9] == ["3", "batch", "file", "live", "480", "88.0", "0", "1", "0"]
                and "inputs 4/10 done, 1 failed, 2 skipped" in srow
                and "backoff: connection refused (next attempt in 1.2 s)" in out, r.show(p))
        r.check("status: sources section is compact (no URIs, no bad inputs)",
                "uri /data" not in out and "bad input:" not in out, out)
        r.check("status: job progress line and the inputs in progress",
                "inputs: 4/11 done, 1 failed, 2 skipped, 2 in progress" in out
                and "/data/clip.mp4  37/120 (30%)  45.2 fps  ETA 1.8 s" in out
                and "/data/batch/c.mp4  150/600 (25%)  42.0 fps  ETA 2m 05s" in out
                and "/dev/video0  900" not in out, r.show(p))
        r.check("status: sources between stages and the ledger",
                out.find("detector (infer)") < out.find("cam7") < out.find("inputs: ") < out.find("frames: produced"), out)
        srv.replies["status"] = STATUS
        p = r.run(["--socket", path, "status"])
        r.check("status without sources/inputs (older daemon): no sources section",
                p.returncode == 0 and "reconnects" not in p.stdout and "inputs:" not in p.stdout, r.show(p))
    finally:
        srv.close()

    # missing fields, the older status shape, empty lists, a pipeline without run-time sources, refusals
    path = r.sock_path()
    srv = FakeServer(path, {
        "sources": {"ok": True, "sources": [{"id": 1, "name": "x"}, {"name": "y", "state": "failed"}, 7],
                    "inputs": [{"id": 2, "state": "decoding"}]},
        "status": dict(STATUS, sources=[{"stage": "decode", "kind": "decode", "state": "live", "frames": 100}]),
        "source-add": {"ok": False, "error": "pipeline 'default' has no run-time sources: its decode stage renders "
                                             "one test pattern directly"},
        "source-remove": {"ok": False, "error": "no source 'nope'"},
    })
    try:
        p = r.run(["--socket", path, "sources"])
        lines = p.stdout.splitlines()
        x = next((l for l in lines if l.split()[:2] == ["1", "x"]), "")
        y = next((l for l in lines if l.split()[:2] == ["-", "y"]), "")
        i2 = next((l for l in lines if l.split()[:1] == ["2"]), "")
        r.check("sources with missing fields prints '-'",
                p.returncode == 0 and x.split() == ["1", "x"] + ["-"] * 7
                and y.split() == ["-", "y", "-", "failed"] + ["-"] * 5
                and i2.split() == ["2", "-", "decoding", "-/-", "-", "-", "-", "-"], r.show(p))
        p = r.run(["--socket", path, "status"])
        row = next((l for l in p.stdout.splitlines() if l.split()[:2] == ["-", "decode"]), "")
        r.check("status with the older sources shape prints '-'",
                p.returncode == 0 and row.split() == ["-", "decode", "decode", "live", "100", "-", "-", "-", "-"],
                r.show(p))
        srv.replies["sources"] = {"ok": True, "sources": [], "inputs": []}
        srv.replies["status"] = dict(STATUS, sources=[], inputs=[])
        p = r.run(["--socket", path, "sources"])
        r.check("sources: none", p.returncode == 0 and p.stdout == "no sources\n", r.show(p))
        p = r.run(["--socket", path, "status"])
        r.check("status: sources: none", p.returncode == 0 and "sources: none" in p.stdout
                and "inputs:" not in p.stdout, r.show(p))
        p = r.run(["--socket", path, "add-source", "testsrc:bars"])
        r.check("add-source refused exits 1 with the daemon's error",
                p.returncode == 1 and "has no run-time sources" in p.stderr and p.stdout == "", r.show(p))
        p = r.run(["--socket", path, "remove-source", "nope"])
        r.check("remove-source of an unknown source exits 1",
                p.returncode == 1 and "no source 'nope'" in p.stderr and p.stdout == "", r.show(p))
        del srv.replies["sources"]
        p = r.run(["--socket", path, "sources"])
        r.check("sources against a daemon without it exits 1", p.returncode == 1 and "unknown request" in p.stderr,
                r.show(p))
    finally:
        srv.close()


def run_trace_checks(r):
    out_dir = os.path.join(r.tmp, "traces")
    os.makedirs(out_dir)

    def leftovers():  # temporary files the atomic write left behind
        return [n for n in os.listdir(out_dir) if n.startswith(".")]

    path = r.sock_path()
    srv = FakeServer(path)  # answers trace 0.3 s after the request
    try:
        out = os.path.join(out_dir, "t.json")
        before = len(srv.requests())
        p = r.run(["--socket", path, "trace", "0.5", "-o", out])
        sent = srv.requests()[before:]
        try:
            with open(out) as f:
                text = f.read()
            got = json.loads(text)
        except (OSError, ValueError) as e:
            text, got = "", e
        r.check("trace writes the trace object to FILE", p.returncode == 0 and got == TRACE,
                r.show(p, f"file: {got!r}"))
        r.check("trace FILE is compact JSON", text.count("\n") <= 1 and '"traceEvents":[{' in text, text[:300])
        r.check("trace sends seconds as a number",
                len(sent) == 1 and sent[0].get("request") == "trace" and is_number(sent[0].get("seconds"))
                and sent[0].get("seconds") == 0.5 and set(sent[0]) == {"request", "seconds"}, f"sent: {sent}")
        r.check("trace summary on stderr",
                f"trace: 3 events over 0.5 s -> {out} (open in ui.perfetto.dev)" in p.stderr and p.stdout == "",
                r.show(p))
        r.check("trace leaves no temporary file", leftovers() == [], os.listdir(out_dir))

        # an existing FILE is replaced; --output=FILE; a whole number of seconds is sent as an integer
        with open(out, "w") as f:
            f.write("old contents, longer than the new ones would need to be to show truncation" * 100)
        before = len(srv.requests())
        p = r.run(["--socket", path, "trace", "1", f"--output={out}"])
        sent = srv.requests()[before:]
        try:
            with open(out) as f:
                got = json.load(f)
        except (OSError, ValueError) as e:
            got = e
        r.check("trace replaces an existing FILE (--output=FILE)", p.returncode == 0 and got == TRACE,
                r.show(p, f"file: {got!r}"))
        r.check("trace 1 sends seconds 1 (a number)",
                sent == [{"request": "trace", "seconds": 1}] and type(sent[0]["seconds"]) is int, f"sent: {sent}")

        # relative FILE, in the working directory
        p = r.run(["--socket", path, "trace", "0.2", "-o", "rel.json"], cwd=out_dir)
        r.check("trace -o relative FILE", p.returncode == 0 and os.path.exists(os.path.join(out_dir, "rel.json"))
                and "-> rel.json" in p.stderr and leftovers() == [], r.show(p, str(os.listdir(out_dir))))

        # -o - : the trace on stdout, the summary on stderr
        p = r.run(["--socket", path, "trace", "0.2", "-o", "-"])
        try:
            got = json.loads(p.stdout)
        except ValueError as e:
            got = e
        r.check("trace -o - writes to stdout", p.returncode == 0 and got == TRACE and "3 events" in p.stderr,
                r.show(p))

        # an unwritable FILE fails before the daemon is asked to record
        before = len(srv.requests())
        p = r.run(["--socket", path, "trace", "1", "-o", os.path.join(r.tmp, "no-such-dir", "t.json")])
        r.check("trace into a missing directory exits 5 without asking the daemon",
                p.returncode == 5 and "no-such-dir" in p.stderr and len(srv.requests()) == before
                and p.elapsed < 1.0, r.show(p, f"elapsed {p.elapsed:.2f} s"))
        p = r.run(["--socket", path, "trace", "1", "-o", out_dir])
        r.check("trace -o DIRECTORY exits 5", p.returncode == 5 and "directory" in p.stderr, r.show(p))
    finally:
        srv.close()

    # the deadline is SECONDS + --timeout: a reply after 1.5 s is in time for trace 1 --timeout 1
    path = r.sock_path()
    srv = FakeServer(path, {"trace": Delayed(1.5, {"ok": True, "trace": TRACE}), "status": Delayed(1.5, STATUS)})
    try:
        out = os.path.join(out_dir, "slow.json")
        p = r.run(["--socket", path, "--timeout", "1", "trace", "1", "-o", out])
        try:
            with open(out) as f:
                got = json.load(f)
        except (OSError, ValueError) as e:
            got = e
        r.check("trace deadline covers SECONDS (reply after 1.5 s, trace 1 --timeout 1)",
                p.returncode == 0 and got == TRACE and p.elapsed >= 1.4, r.show(p, f"elapsed {p.elapsed:.2f} s"))
        p = r.run(["--socket", path, "--timeout", "1", "status"])
        r.check("other commands keep the plain --timeout (status reply after 1.5 s, --timeout 1: exit 4)",
                p.returncode == 4, r.show(p))
    finally:
        srv.close()

    # ... but is still a deadline: no reply within SECONDS + --timeout exits 4, FILE untouched
    path = r.sock_path()
    srv = FakeServer(path, {"trace": Delayed(8, {"ok": True, "trace": TRACE})})
    try:
        out = os.path.join(out_dir, "late.json")
        p = r.run(["--socket", path, "--timeout", "0.5", "trace", "0.5", "-o", out])
        r.check("trace without a reply within SECONDS + --timeout exits 4",
                p.returncode == 4 and "no reply" in p.stderr and 0.9 <= p.elapsed < 5
                and not os.path.exists(out) and leftovers() == [],
                r.show(p, f"elapsed {p.elapsed:.2f} s, dir {os.listdir(out_dir)}"))
    finally:
        srv.close()

    # refused, and replies without a trace
    path = r.sock_path()
    srv = FakeServer(path, {"trace": {"ok": False, "error": "a trace is already being recorded"}})
    try:
        out = os.path.join(out_dir, "refused.json")
        p = r.run(["--socket", path, "trace", "1", "-o", out])
        r.check("trace ok:false exits 1 with the error, no FILE",
                p.returncode == 1 and "a trace is already being recorded" in p.stderr
                and not os.path.exists(out) and leftovers() == [], r.show(p, str(os.listdir(out_dir))))
        for reply, what in [({"ok": True}, "no trace"), ({"ok": True, "trace": [1, 2]}, "trace not an object"),
                            ({"ok": True, "trace": {"events": []}}, "no traceEvents")]:
            srv.replies["trace"] = reply
            p = r.run(["--socket", path, "trace", "1", "-o", out])
            r.check(f"trace reply with {what} exits 4, no FILE",
                    p.returncode == 4 and "broken reply" in p.stderr and not os.path.exists(out)
                    and leftovers() == [], r.show(p))
    finally:
        srv.close()

    # Ctrl-C while the daemon records: the temporary file goes, FILE never appears
    path = r.sock_path()
    srv = FakeServer(path, {"trace": SILENT})
    try:
        out = os.path.join(out_dir, "interrupted.json")
        env = dict(os.environ)
        env.pop("SLUICE_SOCKET", None)
        before = len(srv.requests())
        t = subprocess.Popen([r.binary, "--socket", path, "trace", "30", "-o", out],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        deadline = time.monotonic() + 10
        while len(srv.requests()) == before and time.monotonic() < deadline and t.poll() is None:
            time.sleep(0.05)
        t.send_signal(signal.SIGINT)
        try:
            tout, terr = t.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            t.kill()
            tout, terr = t.communicate()
        r.check("trace interrupted: dies of SIGINT, no FILE, no temporary file",
                t.returncode == -signal.SIGINT and not os.path.exists(out) and leftovers() == [],
                f"exit {t.returncode}\nstderr:\n{terr}\ndir: {os.listdir(out_dir)}")
    finally:
        srv.close()


if __name__ == "__main__":
    sys.exit(main())
