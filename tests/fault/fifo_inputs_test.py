#!/usr/bin/env python3
"""fifo_inputs_test.py SLUICED SLUICECTL: FIFOs where images or videos are expected never block a source and
never vanish from a job (issue 33). Drives the real daemon (cpu build with the media library, a few seconds):

  sequence  an image sequence (img_%04d.png) whose first or a later file is a FIFO: `sluiced run` refuses it at
            once naming the file, exit 1; no FIFO is ever opened (a writer waiting on it would be released).
  add       the same sequence through `sluicectl source-add`: the source fails with that reason (it does not stay
            `connecting` with a thread stuck in open), and the service stops at once.
  job       a directory job holding a FIFO named like a video beside a good image: the FIFO is a failed input with
            the reason (warned, counted in the summary, recorded failed in the job's ledger), exit 1.
"""
import glob
import json
import os
import struct
import sys
import time
import zlib

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
import daemon_client  # noqa: E402

sluiced, sluicectl = sys.argv[1:3]
tmp, failures, procs, _check, wait_for = daemon_client.session("sluice-fifo-inputs-", 15.0)
request = daemon_client.request


def check(name, cond, detail=""):
    return _check(name, cond, str(detail)[-1500:])


def png(path, width=8, height=6):
    """A small grey RGB PNG, written with the standard library only."""
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
    raw = b"".join(b"\x00" + bytes([128, 128, 128]) * width for _ in range(height))
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def opened_fifos(paths):
    """Opens each FIFO for writing without blocking: that succeeds only while someone has it open for reading
    (ENXIO otherwise). Returns the paths some process holds open for reading."""
    held = []
    for p in paths:
        try:
            fd = os.open(p, os.O_WRONLY | os.O_NONBLOCK)
            os.close(fd)
            held.append(p)
        except OSError:
            pass
    return held


def pipeline(path, uris, sink_path, idle=False):
    decode = {"uri": list(uris), "width": 32, "height": 24, "format": "bgr8"}
    if idle:
        decode["idle"] = "wait"
    return daemon_client.write_pipeline(path, "fifo", decode, {"type": "jsonl", "per": "run", "path": sink_path},
                                        middle="", batch_size=2)


def run(args, timeout=30):
    return daemon_client.finish(daemon_client.start(procs, [sluiced, "run", *args, "--no-progress"]), timeout)


# Sequences: the FIFO first (image 0) and later (image 2 of 0..3).
sequences = {}
for name, fifo_at in (("first", 0), ("later", 2)):
    d = os.path.join(tmp, name)
    os.makedirs(d)
    for i in range(4):
        p = os.path.join(d, f"img_{i:04d}.png")
        if i == fifo_at:
            os.mkfifo(p)
        else:
            png(p)
    sequences[name] = (os.path.join(d, "img_%04d.png"), os.path.join(d, f"img_{fifo_at:04d}.png"))
all_fifos = [fifo for _, fifo in sequences.values()]

try:
    # --- sequence ---------------------------------------------------------------------------------------------
    for name, (uri, fifo) in sequences.items():
        out = os.path.join(tmp, f"seq-{name}.jsonl")
        rc, _, err = run([pipeline(os.path.join(tmp, f"seq-{name}.yaml"), [uri], out)], timeout=20)
        check(f"sequence/{name}: `run` ends (not blocked on the FIFO), exit 1", rc == 1, (rc, err))
        check(f"sequence/{name}: the reason names the FIFO file", fifo in err and "FIFO" in err, err)
        check(f"sequence/{name}: nothing was delivered", not os.path.exists(out) or os.path.getsize(out) == 0)

    # --- add --------------------------------------------------------------------------------------------------
    sock = os.path.join(tmp, "s.sock")
    config = pipeline(os.path.join(tmp, "service.yaml"), [], os.path.join(tmp, "service.jsonl"), idle=True)
    svc = daemon_client.start(procs, [sluiced, "--config", config, "--socket", sock, "--input-root", tmp])
    check("add: the service runs", wait_for(lambda: request(sock, {"request": "status"})["state"] == "running", 20))
    uri, fifo = sequences["later"]
    r = request(sock, {"request": "source-add", "uri": uri, "name": "seq"})

    def seq_source():
        return next(s for s in request(sock, {"request": "sources"})["sources"] if s["name"] == "seq")
    if r.get("ok"):  # accepted, then failed by its source
        check("add: the source fails (not `connecting`)", wait_for(lambda: seq_source()["state"] == "failed", 10),
              seq_source() if r.get("ok") else r)
        check("add: its reason names the FIFO file", fifo in seq_source()["reason"] and "FIFO" in seq_source()["reason"],
              seq_source())
    else:  # refused at once, with the reason
        check("add: refused naming the FIFO file", fifo in r.get("error", "") and "FIFO" in r.get("error", ""), r)
    check("add: no FIFO is held open by the daemon", opened_fifos(all_fifos) == [], opened_fifos(all_fifos))
    started = time.monotonic()
    request(sock, {"request": "stop"})
    rc, _, err = daemon_client.finish(svc, 20)
    check("add: the service stops at once (no source thread stuck in open)",
          rc is not None and time.monotonic() - started < 4, (rc, time.monotonic() - started, err))

    # --- job --------------------------------------------------------------------------------------------------
    job = os.path.join(tmp, "job")
    os.makedirs(job)
    png(os.path.join(job, "a.png"))
    os.mkfifo(os.path.join(job, "b.mp4"))
    state = os.path.join(tmp, "state")
    out = os.path.join(tmp, "job.jsonl")
    rc, _, err = run([pipeline(os.path.join(tmp, "job.yaml"), [job], out), "--state-dir", state], timeout=30)
    fifo = os.path.join(job, "b.mp4")
    check("job: exit 1 (an input failed)", rc == 1, (rc, err))
    check("job: the FIFO is named with the reason", fifo in err and "FIFO" in err, err)
    check("job: a warning says so when it happens",
          any("warn" in l and fifo in l and "FIFO" in l for l in err.splitlines()), err)
    check("job: the summary counts it failed", "1 failed" in err, err)
    check("job: the good image was delivered", os.path.exists(out) and
          [json.loads(l)["input"] for l in open(out) if l.strip()] == [os.path.join(job, "a.png")])
    ledgers = glob.glob(os.path.join(state, "jobs", "*.ledger"))
    records = [json.loads(l) for p in ledgers for l in open(p) if l.strip()]
    check("job: the ledger records the FIFO failed with the reason",
          any(r["input"] == fifo and r["status"] == "failed" and "FIFO" in r["reason"] for r in records), records)
    check("job: no FIFO is held open", opened_fifos(all_fifos + [fifo]) == [])
except Exception as e:  # a daemon that stops answering is a failure of this test, not a crash of it
    check("no request timed out or failed", False, repr(e))
finally:
    # Anything stuck opening a FIFO for reading is released by a writer: open each without blocking, then end all.
    for p in glob.glob(os.path.join(tmp, "**", "*"), recursive=True):
        try:
            if os.path.exists(p) and not os.path.isfile(p) and not os.path.isdir(p):
                os.close(os.open(p, os.O_WRONLY | os.O_NONBLOCK))
        except OSError:
            pass
    daemon_client.end_all(procs)

print("FAILED: " + ", ".join(failures) if failures else "all FIFO input checks passed", flush=True)
sys.exit(1 if failures else 0)
