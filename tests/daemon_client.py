"""Helpers shared by the Python tests that drive sluiced (standard library only).

The tests import this by putting tests/ on sys.path from their own location (see the top of each test).
Where the tests' copies differed in behaviour, the difference is a parameter here, and each test keeps its own.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time


def session(prefix, wait_timeout, wait_step=0.05, flush=True):
    """What a test sets up first: (tmp, failures, procs, check, wait_for): a scratch directory named after
    `prefix`, the list of failed checks' names, the list of processes it starts (for end_all), checker(failures,
    flush) and waiter(wait_timeout, wait_step)."""
    failures = []
    return tempfile.mkdtemp(prefix=prefix), failures, [], checker(failures, flush), waiter(wait_timeout, wait_step)


def conclude(failures, tmp):
    """A test's last word: exit 1 saying how many checks failed, tmp kept for a look; else tmp removed, exit 0."""
    if failures:
        print(f"{len(failures)} check(s) failed; files kept in {tmp}")
        sys.exit(1)
    shutil.rmtree(tmp, ignore_errors=True)
    print("all checks passed")


def checker(failures, flush=True):
    """Returns check(name, cond, detail=""): prints ok/FAIL, records failing names in failures, returns cond."""

    def check(name, cond, detail=""):
        print(("ok   " if cond else "FAIL ") + name + ("" if cond else f": {detail}"), flush=flush)
        if not cond:
            failures.append(name)
        return cond

    return check


def wait_for(pred, timeout, step=0.05, errors=(OSError, ValueError, KeyError)):
    """Polls pred every step seconds until it is true (True) or timeout passes (False); errors from pred count as
    not yet."""
    end = time.time() + timeout
    while time.time() < end:
        try:
            if pred():
                return True
        except errors:
            pass
        time.sleep(step)
    return False


def waiter(timeout, step=0.05, errors=(OSError, ValueError, KeyError)):
    """wait_for with this test's defaults: returns wait_for(pred, timeout=..., step=...)."""

    def wait(pred, timeout=timeout, step=step):
        return wait_for(pred, timeout, step, errors)

    return wait


def read_line(s, bufsize=1 << 20):
    """Reads from s until a newline or end of stream; returns the bytes."""
    buf = b""
    while not buf.endswith(b"\n"):
        chunk = s.recv(bufsize)
        if not chunk:
            break
        buf += chunk
    return buf


def request(sock_path, obj, timeout=5.0, raw=None):
    """One control request over the UNIX socket sock_path: sends obj as a JSON line (or the bytes raw as they
    are), returns the parsed reply line."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        s.connect(sock_path)
        s.sendall(raw if raw is not None else (json.dumps(obj) + "\n").encode())
        return json.loads(read_line(s).decode())


def free_port():
    """A TCP port on 127.0.0.1 that nothing listened on a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stage(kind, keys=None):
    """One stage of a pipeline's YAML: `  - kind: KIND` and its keys (a dict, in order), each value as JSON writes it
    (JSON is YAML: numbers as they are, strings quoted, lists in brackets)."""
    return f"  - kind: {kind}\n" + "".join(f"    {k}: {json.dumps(v)}\n" for k, v in (keys or {}).items())


def preprocess(width=16, height=16):
    """The stages between decode and sink that most tests' pipelines have: upload, preprocess to width x height,
    download."""
    return stage("upload") + stage("preprocess", {"width": width, "height": height}) + stage("download")


def pipeline_yaml(name, decode, sink, middle=None, batch_size=4, top=None):
    """The text of a CPU pipeline: `name`, device cpu, `batch_size`, batch_timeout_ms 5 and the `top` keys (a
    dict), then a decode stage with the `decode` keys (a dict), `middle` (stages as text; default preprocess()),
    and a sink stage with the `sink` keys (a dict), or `sink` as text: the stages that end the pipeline as
    written (a tee, an annotate stage)."""
    head = f"name: {name}\ndevice: cpu\nbatch_size: {batch_size}\nbatch_timeout_ms: 5\n"
    head += "".join(f"{k}: {json.dumps(v)}\n" for k, v in (top or {}).items())
    end = stage("sink", sink) if isinstance(sink, dict) else sink
    return head + "stages:\n" + stage("decode", decode) + (preprocess() if middle is None else middle) + end


def write_pipeline(path, *args, **kw):
    """Writes pipeline_yaml(*args, **kw) to path; returns path."""
    with open(path, "w") as f:
        f.write(pipeline_yaml(*args, **kw))
    return path


def start(procs, args, **kw):
    """Popen(args) with stdout and stderr piped as text, recorded in procs for end_all."""
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)
    procs.append(p)
    return p


def finish(p, timeout, killed_rc=False):
    """Waits for p to exit within timeout, else kills it; returns (rc, stdout, stderr). rc of a killed process is
    its return code (-9) when killed_rc, else None."""
    try:
        out, err = p.communicate(timeout=timeout)
        return p.returncode, out, err
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        return (p.returncode if killed_rc else None), out, err


def end_all(procs, cont=False):
    """Kills and reaps every process in procs still running (after SIGCONT when cont: one may be stopped)."""
    for p in procs:
        if p.poll() is None:
            if cont:
                try:
                    os.kill(p.pid, signal.SIGCONT)
                except OSError:
                    pass
            p.kill()
            p.wait()
