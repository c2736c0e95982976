#!/usr/bin/env python3
"""reload_outputs_test.py SLUICED SLUICECTL: a change of outputs is checked in full before it replaces what works
(issue 33). Drives the real daemon (cpu build, testsrc only: a few seconds):

  reload   a reload (`reload FILE` from a peer, and SIGHUP after the started file was rewritten) to a pipeline whose
           sink cannot open (its directory is missing) is refused with the reason; the working generation goes on
           untouched: same generation, still delivering, no frame failed, every delivered frame on disk.
  inputs   a reload to a pipeline whose only input cannot be read (a missing file, a folder that is not there) is
           refused as `sluiced check` refuses it; accepted, its source failed at once and the service, its sources
           ended, exited.
  second   a second service on the same config but another socket, and a `sluiced run` of it, fail at once (exit 1),
           name the first one's pid, and touch none of its outputs.
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
import daemon_client  # noqa: E402

sluiced, sluicectl = sys.argv[1:3]
tmp = tempfile.mkdtemp(prefix="sluice-reload-outputs-")
failures = []
procs = []
_check = daemon_client.checker(failures)


def check(name, cond, detail=""):
    return _check(name, cond, str(detail)[:800])
wait_for = daemon_client.waiter(15.0, 0.02)
request = daemon_client.request


def pipeline(path, out, uri="testsrc:bars", idle="\n    idle: wait"):
    with open(path, "w") as f:
        f.write(f"""name: honest
device: cpu
batch_size: 4
batch_timeout_ms: 5
stages:
  - kind: decode
    uri: [{uri}]
    width: 32
    height: 24
    fps: 100{idle}
  - kind: sink
    type: jsonl
    per: run
    path: {out}
""")
    return path


def lines(path):
    with open(path, "rb") as f:
        return [l for l in f.read().split(b"\n") if l]


def status(sock):
    return request(sock, {"request": "status"})


def delivered_total(st):
    return st["frames"]["delivered"] + st["frames_before_reload"]["delivered"]


def failed_total(st):
    return st["frames"]["failed"] + st["frames_before_reload"]["failed"]


def keeps_working(name, sock, generation):
    """The working generation is the one running, still delivers, and failed nothing."""
    before = delivered_total(status(sock))
    check(f"{name}: the working generation goes on delivering",
          wait_for(lambda: delivered_total(status(sock)) >= before + 20, 10), status(sock)["frames"])
    st = status(sock)
    check(f"{name}: same generation, running", st["generation"] == generation and st["state"] == "running",
          (st["generation"], st["state"], st["draining"]))
    check(f"{name}: no frame failed", failed_total(st) == 0, (st["frames"], st["frames_before_reload"]))


good_out = os.path.join(tmp, "out", "good.jsonl")
os.makedirs(os.path.dirname(good_out))
config = pipeline(os.path.join(tmp, "good.yaml"), good_out)
good_text = open(config).read()
bad = pipeline(os.path.join(tmp, "bad.yaml"), os.path.join(tmp, "missing", "bad.jsonl"))
sock = os.path.join(tmp, "a.sock")

try:
    first = daemon_client.start(procs, [sluiced, "--config", config, "--socket", sock, "--config-root", tmp])
    check("the service runs", wait_for(lambda: status(sock)["state"] == "running", 20) and
          wait_for(lambda: delivered_total(status(sock)) > 20, 10))
    generation = status(sock)["generation"]

    # --- reload ---------------------------------------------------------------------------------------------
    r = request(sock, {"request": "reload", "path": bad})
    check("reload: a sink that cannot open refuses the reload", r.get("ok") is False, r)
    check("reload: the reply says why and where (the file's words only in the log)",
          "cannot be written" in r.get("error", "") and "bad.yaml:" in r.get("error", ""), r)
    keeps_working("reload", sock, generation)
    r = subprocess.run([sluicectl, "--socket", sock, "reload", bad], capture_output=True, text=True, timeout=20)
    check("reload: sluicectl reload is refused too (exit != 0)", r.returncode != 0, (r.returncode, r.stdout, r.stderr))
    keeps_working("reload (sluicectl)", sock, generation)

    with open(config, "w") as f:  # the started file itself now names a missing directory
        f.write(open(bad).read())
    first.send_signal(signal.SIGHUP)
    time.sleep(1.0)  # a reload that is accepted swaps within this (its old generation drains in milliseconds)
    keeps_working("SIGHUP", sock, generation)
    check("SIGHUP: the missing directory was not created", not os.path.exists(os.path.join(tmp, "missing")))
    with open(config, "w") as f:
        f.write(good_text)

    # --- inputs ---------------------------------------------------------------------------------------------
    for what, uri in (("a missing file", os.path.join(tmp, "no-such-clip.mp4")),
                      ("a missing folder", os.path.join(tmp, "no-such-folder") + "/")):
        unreadable = pipeline(os.path.join(tmp, "unreadable.yaml"), os.path.join(tmp, "out", "unreadable.jsonl"),
                              uri=uri, idle="")
        r = request(sock, {"request": "reload", "path": unreadable})
        check(f"inputs: {what} refuses the reload", r.get("ok") is False, r)
        check(f"inputs: {what}: the reply says so, without the file's words",
              "cannot be read" in r.get("error", "") and "no-such" not in r.get("error", ""), r)
        keeps_working(f"inputs ({what})", sock, generation)
    check("inputs: the service is still up", first.poll() is None)

    # --- second ---------------------------------------------------------------------------------------------
    second_sock = os.path.join(tmp, "b.sock")
    started = time.monotonic()
    rc, out, err = daemon_client.finish(
        daemon_client.start(procs, [sluiced, "--config", config, "--socket", second_sock]), 15)
    check("second: another socket, same outputs: fails at once", rc == 1 and time.monotonic() - started < 15,
          (rc, err[-1500:]))
    check("second: it names the first one's pid and the output", f"pid {first.pid}" in err and "good.jsonl" in err,
          err[-1500:])
    check("second: it started no pipeline", "ready" not in err, err[-1500:])
    keeps_working("second", sock, generation)
    # `sluiced run` of the same pipeline likewise (it ran on, failing every frame, before).
    started = time.monotonic()
    rc, out, err = daemon_client.finish(daemon_client.start(procs, [sluiced, "run", config, "--no-progress"]), 15)
    check("second: `sluiced run` on the same outputs fails at once, naming the first one's pid",
          rc == 1 and time.monotonic() - started < 15 and f"pid {first.pid}" in err, (rc, err[-1500:]))
    keeps_working("second (run)", sock, generation)

    # Every frame the first service counted delivered is on disk, once.
    request(sock, {"request": "pause"})
    wait_for(lambda: status(sock)["frames"]["in_flight"] == 0, 10)
    time.sleep(0.2)
    st = status(sock)
    check("the ledger holds and every delivered frame is on disk",
          st["frames"]["produced"] == st["frames"]["delivered"] + st["frames"]["dropped"] + st["frames"]["failed"]
          + st["frames"]["in_flight"] and delivered_total(st) == len(lines(good_out)),
          (st["frames"], st["frames_before_reload"], len(lines(good_out))))
    request(sock, {"request": "stop"})
    rc, _, err = daemon_client.finish(first, 30)
    check("the first service stops cleanly", rc == 0, (rc, err[-1500:]))
except Exception as e:  # a daemon that stops answering is a failure of this test, not a crash of it
    check("no request timed out or failed", False, repr(e))
finally:
    daemon_client.end_all(procs, cont=True)

print("FAILED: " + ", ".join(failures) if failures else "all reload-output checks passed", flush=True)
sys.exit(1 if failures else 0)
