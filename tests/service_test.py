#!/usr/bin/env python3
"""service_test.py SLUICED SLUICECTL SRC_DIR: sluiced in service mode, driven over its real control socket.

Checks status shape, pause/resume in the frame counts, reload of a good and a bad file, a damaged model and
SIGHUP, stop draining with conservation intact, malformed/oversized/half-sent requests, 50 clients at once, SIGTERM,
sd_notify messages on a NOTIFY_SOCKET this test owns, the Prometheus endpoint, and sluicectl against it.
"""
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/
import daemon_client  # noqa: E402

sluiced, sluicectl, src = sys.argv[1:4]
tmp = tempfile.mkdtemp(prefix="sluice-service-")
sock_path = os.path.join(tmp, "control.sock")
failures = []


check = daemon_client.checker(failures, flush=False)
wait_for = daemon_client.waiter(10.0, 0.05, errors=())  # an error in pred fails the test
read_line = daemon_client.read_line


def pipeline(name, fps, pattern="bars"):
    return daemon_client.write_pipeline(
        os.path.join(tmp, name + ".yaml"), name, {"pattern": pattern, "width": 64, "height": 48, "fps": fps},
        {"type": "null"}, middle=daemon_client.preprocess(32, 32))


def request(obj, raw=None, timeout=5.0):
    return daemon_client.request(sock_path, obj, timeout, raw=raw)


# sd_notify: a datagram socket we own.
notify_path = os.path.join(tmp, "notify.sock")
notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
notify.bind(notify_path)
notify.settimeout(0.2)
notes = []


def collect_notes():
    while True:
        try:
            notes.append(notify.recv(4096).decode())
        except socket.timeout:
            continue
        except OSError:
            return


threading.Thread(target=collect_notes, daemon=True).start()

good = pipeline("first", 200)
# WATCHDOG_PID must be the daemon's own pid for sd_watchdog_enabled: the shell sets it, then execs.
env = dict(os.environ, NOTIFY_SOCKET=notify_path, WATCHDOG_USEC="2000000")
log = open(os.path.join(tmp, "sluiced.log"), "w")
proc = subprocess.Popen(["sh", "-c", 'WATCHDOG_PID=$$ exec "$0" "$@"', sluiced, "--config", good, "--config-root", tmp,
                         "--socket", sock_path,
                         "--metrics", "127.0.0.1:0", "--client-timeout", "1",
                         "--drain-timeout", "20"], env=env, stdout=log, stderr=subprocess.STDOUT)
try:
    ready = wait_for(lambda: any("READY=1" in n for n in notes))
    log.flush()
    check("ready notified", ready, open(os.path.join(tmp, "sluiced.log")).read())
    # Ports are picked by the kernel (port 0): read them from the ready line.
    # READY=1 and the log line are two writes: wait for the line too.
    ready_lines = lambda: [l for l in open(os.path.join(tmp, "sluiced.log")) if " ready: " in l]
    wait_for(lambda: ready_lines())
    ready_line = ready_lines()[0]
    metrics_port = int(ready_line.rsplit("metrics on 127.0.0.1:", 1)[1].split()[0])
    st = request({"request": "status"})
    check("status shape", st["ok"] and st["state"] == "running" and st["generation"] == 1 and
          [s["name"] for s in st["stages"]] == ["decode", "upload", "preprocess", "download", "sink"] and
          {"p50", "p90", "p99"} <= set(st["latency_ms"]) and "in_flight" in st["frames"] and
          st["sources"][0]["state"] == "live", st)
    check("version", request({"request": "version"}).get("version", "").count(".") == 2)

    # Frames flow; after a second the 1 s window has a rate.
    check("frames flow", wait_for(lambda: request({"request": "status"})["frames"]["delivered"] > 50))
    check("fps windows", wait_for(lambda: request({"request": "status"})["stages"][0]["fps_1s"] > 50, 5))
    # The source's stage makes its frames on its thread: CPU per batch, beside its wall time.
    check("stage cpu", all("cpu_ms_per_batch" in s for s in request({"request": "status"})["stages"]) and
          wait_for(lambda: request({"request": "status"})["stages"][0]["cpu_ms_per_batch"] > 0, 5))

    # Pause: the source stops (produced stays put once in-flight frames drain); resume: it goes on.
    check("pause", request({"request": "pause"}) == {"ok": True, "state": "paused"})
    check("source paused", request({"request": "status"})["sources"][0]["state"] == "paused")
    time.sleep(0.3)
    a = request({"request": "status"})["frames"]
    time.sleep(0.5)
    b = request({"request": "status"})["frames"]
    check("paused: nothing produced", a["produced"] == b["produced"] and b["in_flight"] == 0, (a, b))
    check("resume", request({"request": "resume"})["state"] == "running")
    check("resumed: produced grows", wait_for(lambda: request({"request": "status"})["frames"]["produced"] > b["produced"] + 20))

    # Watchdog pings while healthy.
    check("watchdog pings", wait_for(lambda: any("WATCHDOG=1" in n for n in notes), 5), notes[-5:])
    check("status line", any(n.startswith("STATUS=first: running") for n in notes), notes[-5:])

    # Reload: a bad file keeps the old pipeline; a good one replaces it with nothing of the old one lost.
    bad = os.path.join(tmp, "bad.yaml")
    with open(bad, "w") as f:
        f.write("stages:\n  - kind: decode\n    fps: fast\n  - kind: sink\n")
    r = request({"request": "reload", "path": bad})
    # The reply names the place and the problem; words quoted from the file go to the log only (a peer must not
    # read files through reload errors: docs/THREAT_MODEL.md).
    check("bad reload refused with location", not r["ok"] and "bad.yaml:3:10" in r["error"] and "'fps'" not in r["error"]
          and "sluiced's log" in r["error"], r)
    check("still generation 1", request({"request": "status"})["generation"] == 1)
    # A damaged model is refused the same way, before anything of the new pipeline runs.
    with open(os.path.join(src, "models", "testsrc-classifier.onnx"), "rb") as f:
        model = f.read()
    with open(os.path.join(tmp, "broken.onnx"), "wb") as f:
        f.write(model[: len(model) // 2])
    bad_model = os.path.join(tmp, "bad-model.yaml")
    with open(bad_model, "w") as f:
        f.write("stages:\n  - kind: decode\n  - kind: preprocess\n    width: 64\n    height: 64\n"
                "  - kind: infer\n    model: broken.onnx\n  - kind: sink\n")
    r = request({"request": "reload", "path": bad_model})
    check("damaged model refused with location", not r["ok"] and "bad-model.yaml:6:5" in r["error"] and
          "truncated or corrupt" in r["error"], r)
    check("still generation 1 after the damaged model", request({"request": "status"})["generation"] == 1)
    second = pipeline("second", 300, pattern="noise")
    r = request({"request": "reload", "path": second})
    check("good reload", r["ok"] and r["generation"] == 2, r)
    # The old generation drains off the control thread; `draining` shows it until it is done.
    check("old generation drained", wait_for(lambda: request({"request": "status"})["draining"] is None))
    st = request({"request": "status"})
    before = st["frames_before_reload"]
    check("old pipeline drained: conservation", before["produced"] > 0 and
          before["produced"] == before["delivered"] + before["dropped"] + before["failed"], before)
    check("new pipeline runs", st["pipeline"] == "second" and wait_for(lambda: request({"request": "status"})["frames"]["delivered"] > 10))

    # SIGHUP reloads the current file.
    proc.send_signal(signal.SIGHUP)
    check("SIGHUP reload", wait_for(lambda: request({"request": "status"})["generation"] == 3))

    # Bad requests: the connection stays usable after an error reply.
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(sock_path)
        s.sendall(b"{not json\n")
        r1 = json.loads(read_line(s))
        s.sendall(b'{"request": "frobnicate"}\n')
        r2 = json.loads(read_line(s))
        s.sendall(b'{"request": "status"}\n')
        r3 = json.loads(read_line(s))
    check("malformed JSON", not r1["ok"] and "malformed JSON" in r1["error"], r1)
    check("unknown request", not r2["ok"] and "unknown request 'frobnicate'" in r2["error"], r2)
    check("connection still usable", r3["ok"], r3)
    r = request(None, raw=b'{"request": "' + b"x" * 70000 + b'"}\n')
    check("oversized request", not r["ok"] and "larger than" in r["error"], r)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(5)
        s.connect(sock_path)
        s.sendall(b'{"request": "sta')
        t0 = time.time()
        closed = s.recv(100) == b""
    check("half-sent request dropped at the deadline", closed and time.time() - t0 < 4)

    # 50 clients at once (over the limit of 32: the rest get a clear refusal, nobody hangs).
    results = []

    def client():
        try:
            results.append(request({"request": "status"}))
        except Exception as e:  # noqa: BLE001
            results.append({"ok": False, "error": repr(e)})

    threads = [threading.Thread(target=client) for _ in range(50)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    oks = sum(1 for r in results if r.get("ok"))
    refused = sum(1 for r in results if not r.get("ok") and "too many clients" in r.get("error", ""))
    check("50 clients answered", len(results) == 50 and oks + refused == 50 and oks >= 32, (oks, refused))

    # A trace of the live pipeline: one track per stage thread, one slice per batch.
    r = request({"request": "trace", "seconds": 0.5}, timeout=10)
    events = r.get("trace", {}).get("traceEvents", [])
    tracks = {e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "thread_name"}
    slices = [e for e in events if e.get("ph") == "X"]
    check("live trace", r["ok"] and "decode (host)" in tracks and "sink (host)" in tracks and len(slices) > 20,
          (r.get("error"), tracks, len(slices)))
    r = request({"request": "trace", "seconds": 0})
    check("trace needs seconds", not r["ok"] and "seconds" in r["error"], r)

    # Prometheus.
    body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=5).read().decode()
    check("metrics scraped", "sluice_frames_produced_total" in body and 'stage="decode"' in body and "sluice_pipeline_generation 3" in body,
          body[:400])

    # sluicectl against the real daemon.
    out = subprocess.run([sluicectl, "--socket", sock_path, "status"], capture_output=True, text=True)
    check("sluicectl status", out.returncode == 0 and "preprocess" in out.stdout, out.stdout + out.stderr)
    out = subprocess.run([sluicectl, "--socket", sock_path, "reload", bad], capture_output=True, text=True)
    check("sluicectl reload bad file exits 1", out.returncode == 1 and "bad.yaml:3:10" in out.stderr, out.stderr)

    # SIGTERM: drain, STOPPING=1, exit 0, conservation in the summary.
    proc.send_signal(signal.SIGTERM)
    rc = proc.wait(timeout=30)
    log.flush()
    text = open(os.path.join(tmp, "sluiced.log")).read()
    check("SIGTERM exits 0", rc == 0, text[-2000:])
    check("STOPPING notified", wait_for(lambda: any("STOPPING=1" in n for n in notes), 2))
    check("drained: nothing in flight", "+ failed 0 + in flight 0" in text, text[-1500:])
    check("socket removed", not os.path.exists(sock_path))
finally:
    if proc.poll() is None:
        proc.kill()
    notify.close()

# Settings from the pipeline file: the socket path, a TCP listener, allow lists. TCP peers have no
# credentials, so with an allow list they may read but not change anything. `stop` drains and exits 0.
svc = pipeline("svc", 200).replace(".yaml", "-svc.yaml")
with open(pipeline("svc", 200)) as f:
    text = f.read()
with open(svc, "w") as f:
    f.write(f"control_socket: {sock_path}\ncontrol_tcp: 127.0.0.1:0\ncontrol_allow_users: [root, nobody]\n" + text)
svc_log = os.path.join(tmp, "svc.log")
proc = subprocess.Popen([sluiced, "--config", svc], stdout=open(svc_log, "w"), stderr=subprocess.STDOUT)


def tcp_request(obj):
    line = next(l for l in open(svc_log) if " ready: " in l)
    port = int(line.split("control on tcp 127.0.0.1:", 1)[1].split(",")[0].split()[0])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall((json.dumps(obj) + "\n").encode())
        return json.loads(read_line(s))


try:
    check("socket path from the file", wait_for(lambda: os.path.exists(sock_path)))
    wait_for(lambda: request({"request": "status"})["frames"]["delivered"] > 10)
    r = tcp_request({"request": "status"})
    check("control over TCP: status", r["ok"] and r["pipeline"] == "svc", r)
    r = tcp_request({"request": "pause"})
    check("control over TCP: no credentials, no pause", not r["ok"] and "permission denied" in r["error"], r)
    if os.getuid() == 0:
        check("allowed user may pause", request({"request": "pause"}).get("ok") is True)
    check("stop request", request({"request": "stop"})["state"] == "stopping")
    check("stop exits 0", proc.wait(timeout=30) == 0)
finally:
    if proc.poll() is None:
        proc.kill()

print(f"{len(failures)} service checks failed" if failures else "all service checks passed")
sys.exit(1 if failures else 0)
