"""Helpers shared by the Python tests that drive sluiced (standard library only).

The tests import this by putting tests/ on sys.path from their own location (see the top of each test).
Where the tests' copies differed in behaviour, the difference is a parameter here, and each test keeps its own.
"""
import json
import os
import signal
import socket
import subprocess
import time


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
