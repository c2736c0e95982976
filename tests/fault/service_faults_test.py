#!/usr/bin/env python3
"""service_faults_test.py SLUICED SLUICECTL SRC_DIR: the service never wedges, never starts what it cannot run,
and a reload keeps what it should. Drives the real daemon (cpu build):

  storm    >= 50 reloads (SIGHUP and `reload`, file unchanged and changed) while testsrc sources and one source
           added at run time stream into a jsonl per-run, a jsonl per-source and an npy sink (one service each):
           the run-time source survives every reload, a removed one stays removed, every generation drains
           conserved, and after stop every frame the ledger counts delivered has its record exactly once on disk.
  second   a second service on the same config and socket is refused before anything starts, names the first
           one's pid, and leaves the first one's outputs untouched.
  fifo     a FIFO as a source: `sluiced run` refuses it with the reason and stops on the first SIGTERM.
  stuck    a source blocked in open (a TCP peer that never answers): reload and status answer while the old
           generation is stuck, its drain ends at --drain-timeout with the service up, and SIGTERM during such a
           drain exits within --drain-timeout.
  exit1    exit status 1 when the only source fails, in `run` and in the service.

Every case asserts the frame ledger (produced = delivered + dropped + failed + in flight) and, where frames were
delivered, that each has its record on disk. Every wait is bounded; every process started is ended.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
import daemon_client  # noqa: E402

sluiced, sluicectl, src = sys.argv[1:4]
only = set(sys.argv[4:])  # optional: run only these cases
tmp = tempfile.mkdtemp(prefix="sluice-faults-")
failures = []
procs = []


check = daemon_client.checker(failures)
wait_for = daemon_client.waiter(15.0, 0.02)
request = daemon_client.request
finish = daemon_client.finish  # rc None if it had to be killed


def start(args, **kw):
    return daemon_client.start(procs, args, **kw)


def summary_ledger(text):
    m = re.findall(r"frames: produced (\d+) = delivered (\d+) \+ dropped (\d+) \+ failed (\d+) \+ in flight (\d+)", text)
    return tuple(int(x) for x in m[-1]) if m else None


def write_pipeline(path, uris, sink, fps=200, extra_decode="", width=32):
    uri_list = ", ".join(json.dumps(u) for u in uris)
    with open(path, "w") as f:
        f.write(f"""name: faults
device: cpu
batch_size: 4
batch_timeout_ms: 5
stages:
  - kind: decode
    uri: [{uri_list}]
    width: {width}
    height: 24
    fps: {fps}
    idle: wait
{extra_decode}  - kind: sink
{sink}""")


def service(config, sock, *extra):
    p = start([sluiced, "--config", config, "--socket", sock, *extra])
    ok = wait_for(lambda: request(sock, {"request": "status"})["state"] == "running", 20)
    return p, ok


def conserved(f):
    return f["produced"] == f["delivered"] + f["dropped"] + f["failed"] + f.get("in_flight", 0)


def quiesce(sock):
    """Pauses and waits until nothing is in flight and the ledger stays as it is (a batch the decode stage was
    assembling when the pause came still goes out), so nothing moves until stop."""
    request(sock, {"request": "pause"})
    seen = [None]

    def settled():
        f = request(sock, {"request": "status"})["frames"]
        stable = f["in_flight"] == 0 and f == seen[0]
        seen[0] = f
        return stable
    wait_for(settled, 15, step=0.5)
    return request(sock, {"request": "status"})


# --- records on disk, per sink kind -----------------------------------------------------------------------
def jsonl_records(paths):
    records = []
    for path in paths:
        with open(path) as f:
            for line in f:
                if line.strip():
                    records.append(json.loads(line))
    return records


def sink_records(kind, out):
    if kind == "run":
        return jsonl_records([out]) if os.path.exists(out) else []
    if kind == "source":
        return jsonl_records([os.path.join(out, n) for n in sorted(os.listdir(out)) if n.endswith(".jsonl")])
    # npy: one index line per frame, naming a batch file that holds it
    index = os.path.join(out, "index.jsonl")
    records = jsonl_records([index]) if os.path.exists(index) else []
    for r in records:
        assert os.path.exists(os.path.join(out, r["file"])), f"{r['file']} named in index.jsonl is missing"
    return records


SINKS = {
    "run": lambda out: f"    type: jsonl\n    per: run\n    path: {out}\n",
    "source": lambda out: f"    type: jsonl\n    per: source\n    path: {out}\n",
    "npy": lambda out: f"    type: npy\n    path: {out}\n",
}


# --- (a) reload storm ------------------------------------------------------------------------------------
def storm(kind, reloads=52):
    d = tempfile.mkdtemp(prefix=f"storm-{kind}-", dir=tmp)
    sock, config = os.path.join(d, "control.sock"), os.path.join(d, "storm.yaml")
    out = os.path.join(d, "out.jsonl" if kind == "run" else "out")
    uris = ["testsrc:bars", "testsrc:noise"]
    write_pipeline(config, uris, SINKS[kind](out))
    p, up = service(config, sock, "--drain-timeout", "10")
    if not check(f"storm/{kind}: service up", up):
        finish(p, 5)
        return
    r = request(sock, {"request": "source-add", "uri": "testsrc:checkerboard", "name": "extra"})
    check(f"storm/{kind}: run-time source added", r.get("ok"), r)
    r = request(sock, {"request": "source-add", "uri": "testsrc:gradient", "name": "gone"})
    request(sock, {"request": "source-remove", "source": "gone"})
    survived, removed_stayed, drained_conserved, refused = 0, 0, True, 0
    kept_when_unchanged, restarted_when_changed, extra_kept = 0, 0, 0
    fps = 200

    def live_sources():
        return {s["uri"]: s for s in request(sock, {"request": "sources"})["sources"] if s["state"] != "removed"}
    wait_for(lambda: all(u in live_sources() for u in uris + ["testsrc:checkerboard"]), 10)
    for i in range(reloads):
        mode = i % 4  # 0: SIGHUP, 1: reload, same file; 2: another rate, reload; 3: file rewritten as it was, SIGHUP
        before_ids = {u: s["id"] for u, s in live_sources().items()}
        if mode == 2:
            fps = 150 if fps == 200 else 200
        if mode in (2, 3):
            write_pipeline(config, uris, SINKS[kind](out), fps=fps)
        if mode in (0, 3):
            p.send_signal(signal.SIGHUP)
        else:
            r = request(sock, {"request": "reload"})
            if not r.get("ok"):
                refused += 1
        generation_done = wait_for(lambda: (lambda st: st["draining"] is None and st["state"] == "running")(
            request(sock, {"request": "status"})), 15)
        if not generation_done:
            check(f"storm/{kind}: reload {i} drained", False, request(sock, {"request": "status"}))
            break
        # the new generation has started once draining is null; its sources appear as they are added
        names = {}

        def extra_listed():
            names.clear()
            names.update({s["name"]: s for s in request(sock, {"request": "sources"})["sources"]})
            return "extra" in names
        wait_for(extra_listed, 5)
        if "extra" in names and names["extra"]["state"] not in ("failed", "removed"):
            survived += 1
        if "gone" not in names or names["gone"]["state"] == "removed":  # listed as removed until forgotten
            removed_stayed += 1
        wait_for(lambda: all(u in live_sources() for u in uris), 5)
        after_ids = {u: s["id"] for u, s in live_sources().items()}
        same = all(after_ids.get(u) == before_ids.get(u) for u in uris)
        reconnected = any(s["reconnects"] > 0 for u, s in live_sources().items() if u in uris)
        if mode == 2:
            restarted_when_changed += not same and all(u in after_ids for u in uris)
        else:
            kept_when_unchanged += same and not reconnected
        extra_kept += after_ids.get("testsrc:checkerboard") == before_ids.get("testsrc:checkerboard")
        before = request(sock, {"request": "status"})["frames_before_reload"]
        drained_conserved = drained_conserved and before["produced"] == before["delivered"] + before["dropped"] + before["failed"]
    st = request(sock, {"request": "status"})
    check(f"storm/{kind}: {reloads} reloads, generation {st['generation']}", st["generation"] >= reloads + 1 - refused, st["generation"])
    check(f"storm/{kind}: run-time source survived every reload", survived == reloads, f"{survived}/{reloads}")
    check(f"storm/{kind}: removed source stayed removed", removed_stayed == reloads, f"{removed_stayed}/{reloads}")
    changed = sum(1 for i in range(reloads) if i % 4 == 2)
    check(f"storm/{kind}: unchanged sources went on without reconnecting (same ids)",
          kept_when_unchanged == reloads - changed, f"{kept_when_unchanged}/{reloads - changed}")
    check(f"storm/{kind}: changed sources started again", restarted_when_changed == changed, f"{restarted_when_changed}/{changed}")
    check(f"storm/{kind}: the run-time source kept its id", extra_kept == reloads, f"{extra_kept}/{reloads}")
    check(f"storm/{kind}: every drained generation conserved", drained_conserved)
    # No reload after this status: the earlier generations' totals are final; the last one's come from the
    # exit summary (a batch the decode stage was assembling may still go out after the pause).
    st = quiesce(sock)
    b = st["frames_before_reload"]
    request(sock, {"request": "stop"})
    rc, _, err = finish(p, 30)
    check(f"storm/{kind}: stop exits 0", rc == 0, (rc, err[-2000:]))
    last = summary_ledger(err)
    check(f"storm/{kind}: ledger conserved at the end", last is not None and last[4] == 0 and last[0] == sum(last[1:4]), last)
    if last is None:
        return
    delivered = last[1] + b["delivered"]
    try:
        records = sink_records(kind, out)
    except AssertionError as e:
        check(f"storm/{kind}: records on disk readable", False, str(e))
        return
    check(f"storm/{kind}: delivered {delivered} = records on disk {len(records)} (exactly once)",
          delivered > 0 and len(records) == delivered, (delivered, len(records)))


# --- (b) a second service on the same config and socket ----------------------------------------------------
def second_instance():
    d = tempfile.mkdtemp(prefix="second-", dir=tmp)
    sock, config = os.path.join(d, "control.sock"), os.path.join(d, "s.yaml")
    out = os.path.join(d, "out.jsonl")
    write_pipeline(config, ["testsrc:bars"], SINKS["run"](out))
    first, up = service(config, sock)
    if not check("second: first service up", up):
        finish(first, 5)
        return
    wait_for(lambda: os.path.getsize(out) > 0, 10)
    st = quiesce(sock)
    before = os.stat(out)
    second = start([sluiced, "--config", config, "--socket", sock])
    rc, _, err = finish(second, 30)
    check("second: refused with a non-zero exit", rc not in (0, None), rc)
    check("second: names the first one's pid", f"pid {first.pid}" in err, err[-1000:])
    after = os.stat(out)
    check("second: first one's output untouched", (before.st_size, before.st_mtime_ns) == (after.st_size, after.st_mtime_ns),
          (before.st_size, after.st_size))
    check("second: first one still answers", request(sock, {"request": "status"})["ok"])
    check("second: first one's ledger unchanged", request(sock, {"request": "status"})["frames"] == st["frames"])
    request(sock, {"request": "stop"})
    rc, _, err = finish(first, 30)
    f = st["frames"]
    check("second: first exits 0 after stop", rc == 0, (rc, err[-1000:]))
    lines = len(sink_records("run", out))
    check("second: every delivered frame on disk", f["delivered"] > 0 and lines == f["delivered"], (lines, f))


# --- (c) a FIFO source in `sluiced run` ---------------------------------------------------------------------
def fifo_run():
    d = tempfile.mkdtemp(prefix="fifo-", dir=tmp)
    fifo = os.path.join(d, "cam.fifo")
    os.mkfifo(fifo)
    config, out = os.path.join(d, "f.yaml"), os.path.join(d, "out.jsonl")
    write_pipeline(config, [fifo, "testsrc:bars"], SINKS["run"](out), fps=100)
    log = os.path.join(d, "stderr.log")
    with open(log, "w") as log_file:  # a file, so the refusal can be waited for before the signal
        p = subprocess.Popen([sluiced, "run", config, "--no-progress", "--drain-timeout", "5"],
                             stdout=subprocess.DEVNULL, stderr=log_file, text=True)
    procs.append(p)

    def stderr_text():
        with open(log, errors="replace") as f:
            return f.read()

    # SIGTERM only once the FIFO was refused and results flow: a signal before the source thread reached the
    # FIFO ends it unopened (counted, but without the reason this case is about).
    wait_for(lambda: "FIFO" in stderr_text() and os.path.getsize(out) > 0, 15)
    p.send_signal(signal.SIGTERM)
    rc, _, _ = finish(p, 20)
    err = stderr_text()
    check("fifo: the first SIGTERM stops `sluiced run`", rc is not None, err[-1500:])
    check("fifo: the FIFO source is reported failed, with the reason", "FIFO" in err and "failed" in err, err[-1500:])
    check("fifo: exit 1 (a source failed)", rc == 1, rc)
    led = summary_ledger(err)
    check("fifo: ledger conserved", led is not None and led[4] == 0 and led[0] == sum(led[1:4]), led)
    lines = len(sink_records("run", out))
    check("fifo: every delivered frame on disk", led is not None and led[1] > 0 and lines == led[1], (lines, led))


# --- (c) a source blocked in open in the service --------------------------------------------------------------
def stuck_service():
    d = tempfile.mkdtemp(prefix="stuck-", dir=tmp)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(16)
    port = listener.getsockname()[1]
    held, stop_accepting = [], threading.Event()

    def accept():  # accepts and never answers: the stream's open blocks in FFmpeg's probe
        listener.settimeout(0.2)
        while not stop_accepting.is_set():
            try:
                held.append(listener.accept()[0])
            except OSError:
                pass
    t = threading.Thread(target=accept, daemon=True)
    t.start()
    sock, config, out = os.path.join(d, "control.sock"), os.path.join(d, "stuck.yaml"), os.path.join(d, "out")
    decode = "    open_timeout_s: 600\n    stop_timeout_s: 600\n"
    uris = [f"tcp://127.0.0.1:{port}", "testsrc:bars"]
    write_pipeline(config, uris, SINKS["source"](out), fps=100, extra_decode=decode)
    drain = 3
    p, up = service(config, sock, "--drain-timeout", str(drain))
    try:
        if not check("stuck: service up", up):
            return
        check("stuck: the stream is blocked in open", wait_for(lambda: len(held) >= 1, 15))
        # Another frame size: the sources cannot be handed over, so the old generation must stop them, and
        # the stream's thread is stuck in open (stop_timeout_s 600): only --drain-timeout ends that drain.
        write_pipeline(config, uris, SINKS["source"](out), fps=100, extra_decode=decode, width=48)
        r = request(sock, {"request": "reload"})
        check("stuck: reload answers at once", r.get("ok") and r.get("state") == "reloading", r)
        st = request(sock, {"request": "status"})
        check("stuck: status answers while the old generation is stuck", st["ok"] and st["draining"] is not None, st.get("draining"))
        r2 = request(sock, {"request": "reload"})
        check("stuck: a second reload during the drain is refused with the reason", not r2["ok"] and "draining" in r2["error"], r2)
        ctl = subprocess.run([sluicectl, "--socket", sock, "reload"], capture_output=True, text=True, timeout=30)
        refused = 1 + (ctl.returncode == 1)
        check("stuck: sluicectl reload during the drain exits 1 with the reason", ctl.returncode == 1 and
              "draining" in ctl.stderr, (ctl.returncode, ctl.stderr))
        done = wait_for(lambda: request(sock, {"request": "status"})["draining"] is None, drain + 15)
        st = request(sock, {"request": "status"})
        b = st["frames_before_reload"]
        check("stuck: the stuck drain ended at the timeout, the service stays up", done and st["state"] == "running", st["state"])
        check("stuck: the stuck generation's ledger is closed (frames in flight counted failed)",
              b["produced"] == b["delivered"] + b["dropped"] + b["failed"] and b["delivered"] > 0, b)
        check("stuck: the new generation runs", wait_for(lambda: request(sock, {"request": "status"})["frames"]["delivered"] > 0, 15))
        # SIGTERM while the next reload's drain is stuck again
        wait_for(lambda: len(held) >= 2, 15)
        write_pipeline(config, uris, SINKS["source"](out), fps=100, extra_decode=decode, width=64)
        r = request(sock, {"request": "reload"})
        check("stuck: the next reload answers", r.get("ok"), r)
        before_term = time.time()
        p.send_signal(signal.SIGTERM)
        rc, _, err = finish(p, drain + 20)
        check("stuck: SIGTERM during a stuck drain exits (bounded by --drain-timeout)", rc is not None, err[-1500:])
        check("stuck: exit reports the drain timeout", rc == 1 and "drain" in err, (rc, err[-1500:]))
        # Every refused reload has its log line with the reason (the request and sluicectl's above).
        refusals = [l for l in err.splitlines() if re.search(r"control: reload .* refused: a reload is in progress", l)]
        check("stuck: each refused reload is logged with its reason", len(refusals) == refused, (refused, refusals))
        print(f"     (SIGTERM to exit: {time.time() - before_term:.1f} s, --drain-timeout {drain})")
        led = summary_ledger(err)
        check("stuck: final ledger conserved", led is not None and led[4] == 0 and led[0] == sum(led[1:4]), led)
        records = sink_records("source", out)
        check("stuck: delivered frames are on disk", len(records) > 0)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        stop_accepting.set()
        t.join(2)
        for c in held:
            c.close()
        listener.close()


# --- (d) exit status 1 when the only source fails ---------------------------------------------------------------
def only_source_fails():
    d = tempfile.mkdtemp(prefix="exit1-", dir=tmp)
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    port = closed.getsockname()[1]
    closed.close()  # nothing listens: connection refused
    config, out = os.path.join(d, "e.yaml"), os.path.join(d, "out.jsonl")
    decode = "    max_attempts: 1\n    backoff_initial_s: 0.05\n    backoff_max_s: 0.1\n    open_timeout_s: 2\n"
    write_pipeline(config, [f"tcp://127.0.0.1:{port}"], SINKS["run"](out), extra_decode=decode)
    with open(config) as f:
        text = f.read().replace("    idle: wait\n", "")
    with open(config, "w") as f:
        f.write(text)
    rc, _, err = finish(start([sluiced, "run", config, "--no-progress"]), 60)
    check("exit1: run exits 1 when the only (live) source fails", rc == 1, (rc, err[-1500:]))
    led = summary_ledger(err)
    check("exit1: run ledger conserved", led is not None and led[4] == 0 and led[0] == sum(led[1:4]), led)
    sock = os.path.join(d, "control.sock")
    rc, _, err = finish(start([sluiced, "--config", config, "--socket", sock]), 60)
    check("exit1: the service exits 1 when its pipeline ends with the only source failed", rc == 1, (rc, err[-1500:]))
    led = summary_ledger(err)
    check("exit1: service ledger conserved", led is not None and led[4] == 0 and led[0] == sum(led[1:4]), led)
    fifo = os.path.join(d, "only.fifo")
    os.mkfifo(fifo)
    write_pipeline(config, [fifo], SINKS["run"](out))
    with open(config) as f:
        text = f.read().replace("    idle: wait\n", "")
    with open(config, "w") as f:
        f.write(text)
    rc, _, err = finish(start([sluiced, "run", config, "--no-progress"]), 30)
    check("exit1: a FIFO as the only source is refused at once, exit 1", rc == 1 and "FIFO" in err, (rc, err[-1500:]))


cases = {
    "storm": lambda: [storm(k) for k in ("source", "npy", "run")],
    "second": second_instance,
    "fifo": fifo_run,
    "stuck": stuck_service,
    "exit1": only_source_fails,
}
try:
    for name, case in cases.items():
        if not only or name in only:
            print(f"--- {name}", flush=True)
            case()
finally:
    daemon_client.end_all(procs)
print(f"{len(failures)} failure(s)" + (": " + ", ".join(failures) if failures else ""))
sys.exit(1 if failures else 0)
