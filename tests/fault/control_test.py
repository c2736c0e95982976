#!/usr/bin/env python3
"""control_test.py SLUICED SLUICECTL [media]: the control plane treats every byte as hostile, and access control holds by
default (issue 11; docs/THREAT_MODEL.md). Drives the real daemon (cpu build, testsrc pipeline):

- each line that once killed sluiced, over the UNIX socket and over TCP as a read-only peer: an error reply of
  valid UTF-8, the same connection still answers, the daemon stays up;
- every row of the threat model: TCP without/with a wrong/with the right token; a non-loopback listener without a
  token and a token file others may read refused at start; reload outside the config roots refused before the file
  is opened (a FIFO there would block) and without disclosing content; source-add outside the input roots, through
  '..' or a symlink, or to a host not allowed refused (and no connection made); allowed ones work; sink paths of a
  reloaded pipeline outside the output roots refused;
- names that are not UTF-8 (the config's directory, a file caf\\xe9.mp4 in a directory job made with ffmpeg):
  shown with U+FFFD in status, sources, metrics and trace, and the daemon stays up;
- the frame ledger (produced = delivered + dropped + failed + in flight) and every delivered frame's record on disk.
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
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
import daemon_client  # noqa: E402

sluiced, sluicectl = sys.argv[1:3]
media = sys.argv[3:4] == ["media"]  # built with the media library: files and streams can be read
tmp = tempfile.mkdtemp(prefix="sluice-control-")
failures = []
procs = []
REPLACEMENT = "\ufffd"

ATTACKS = [b"\xff", b'{"request":"\xc3\x28"}', b'{"\xe9":1}', b'{"request":"version","x":"\x80"}', b"1e400",
           b'{"request":"status","x":-1e400}', b'{"request":"trace","seconds":1e999}',
           b'{"request":"source-add","uri":"testsrc:bars","name":"\xe9"}',
           b'{"request":"source-add","uri":"testsrc:bars","rate_limit":-1}', b"[" * 60000, b'{"request":7}',
           b'{"request":"trace","seconds":"5"}', b'{"request":"reload","path":["x"]}']


check = daemon_client.checker(failures)
wait_for = daemon_client.waiter(15.0, 0.05, errors=(OSError, ValueError, KeyError, TypeError))


class Conn:
    """One control connection (UNIX path or ("127.0.0.1", port)); many requests on it."""

    def __init__(self, where, timeout=10.0):
        if isinstance(where, tuple):
            self.s = socket.create_connection(where, timeout=timeout)
        else:
            self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.s.settimeout(timeout)
            self.s.connect(where)
        self.pending = b""

    def raw(self, line):
        self.s.sendall(line + b"\n")
        while b"\n" not in self.pending:
            chunk = self.s.recv(65536)
            if not chunk:
                raise OSError("connection closed")
            self.pending += chunk
        line, self.pending = self.pending.split(b"\n", 1)
        return line

    def ask(self, obj):
        return json.loads(self.raw(json.dumps(obj).encode()).decode("utf-8"))

    def close(self):
        self.s.close()


def request(where, obj):
    c = Conn(where)
    try:
        return c.ask(obj)
    finally:
        c.close()


def start(args, log_name):
    log = open(os.path.join(tmp, log_name), "wb")
    p = subprocess.Popen([sluiced] + args, stdout=log, stderr=subprocess.STDOUT)
    procs.append(p)
    return p


def log_text(log_name):
    with open(os.path.join(tmp, log_name), "rb") as f:
        return f.read().decode("utf-8", "replace")


def tcp_port(log_name):
    for line in log_text(log_name).splitlines():
        if " ready: " in line and "control on tcp " in line:
            return int(line.split("control on tcp ", 1)[1].split(",")[0].split()[0].rsplit(":", 1)[1])
    return None


def metrics_port(log_name):
    for line in log_text(log_name).splitlines():
        if " ready: " in line and "metrics on " in line:
            return int(line.split("metrics on ", 1)[1].split()[0].rsplit(":", 1)[1])
    return None


def pipeline(path, name, sink_path, uri='["testsrc:bars"]', decode_name="decode"):
    with open(path, "w", errors="surrogateescape") as f:  # names may hold bytes that are not UTF-8
        f.write(f"""name: "{name}"
device: cpu
batch_size: 4
batch_timeout_ms: 5
stages:
  - kind: decode
    name: "{decode_name}"
    uri: {uri}
    idle: wait
    rate_limit: 100
    width: 64
    height: 48
  - kind: upload
  - kind: preprocess
    width: 32
    height: 32
  - kind: download
  - kind: sink
    type: jsonl
    path: {sink_path}
""")
    return path


def exit_code(p, timeout=30):
    """The process's exit status, or None (after killing it) when it is still running after `timeout`."""
    try:
        return p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        return None


def make_token(path, mode):
    with open(path, "w") as f:
        f.write("correct-horse-battery-staple-42\n")
    os.chmod(path, mode)
    return path


def lines_in(path):
    if not os.path.exists(path):
        return 0
    with open(path, "rb") as f:
        return sum(1 for _ in f)


# --- layout: a config root whose name is not UTF-8, input/output roots, and places outside them ----------------
conf = os.path.join(tmp, "conf-\udce9")  # b"conf-\xe9" on disk: the started file lives here
# A peer can only name UTF-8 paths (a request is JSON), so the files it reloads live in a second config root.
conf2, inp, out, other, state = (os.path.join(tmp, d) for d in ("conf2", "in", "out", "other", "state"))
for d in (conf, conf2, inp, out, other, state, os.path.join(inp, "watch")):
    os.makedirs(d)
token = make_token(os.path.join(tmp, "token"), 0o600)
sock = os.path.join(tmp, "control.sock")
# The started pipeline's name and its decode stage's name are not UTF-8 either (YAML passes the bytes on).
p1 = pipeline(os.path.join(conf, "p1.yaml"), "ctl-\udce9", os.path.join(out, "gen1.jsonl"), decode_name="dec\udce9")

try:
    # --- refused at start -------------------------------------------------------------------------------------
    p = start(["--config", p1, "--socket", os.path.join(tmp, "x.sock"), "--control-tcp", "0.0.0.0:0"], "open.log")
    rc = exit_code(p)
    check("non-loopback --control-tcp without a token: refused at start",
          rc not in (0, None) and "not a loopback address" in log_text("open.log") and not os.path.exists(os.path.join(out, "gen1.jsonl")),
          log_text("open.log")[-800:])
    loose = make_token(os.path.join(tmp, "loose-token"), 0o644)
    p = start(["--config", p1, "--socket", os.path.join(tmp, "x.sock"), "--control-tcp", "127.0.0.1:0",
               "--control-token", loose], "loose.log")
    rc = exit_code(p)
    check("token file others may read: refused at start, naming the file and the mode",
          rc not in (0, None) and loose in log_text("loose.log") and "mode 0644" in log_text("loose.log"), log_text("loose.log")[-800:])

    # --- a daemon without a token: TCP is read-only ------------------------------------------------------------
    plain_sock = os.path.join(tmp, "plain.sock")
    plain = start(["--config", pipeline(os.path.join(conf, "plain.yaml"), "plain", os.path.join(out, "plain.jsonl")),
                   "--socket", plain_sock, "--control-tcp", "127.0.0.1:0"], "plain.log")
    check("no-token daemon up", wait_for(lambda: tcp_port("plain.log") is not None), log_text("plain.log")[-800:])
    plain_tcp = ("127.0.0.1", tcp_port("plain.log"))
    r = request(plain_tcp, {"request": "status"})
    check("no token configured: TCP may read", r.get("ok") is True, r)
    r = request(plain_tcp, {"request": "pause"})
    check("no token configured: TCP may not mutate", not r["ok"] and "permission denied" in r["error"], r)
    r = request(plain_tcp, {"request": "pause", "token": "correct-horse-battery-staple-42"})
    check("no token configured: a token sent over TCP changes nothing", not r["ok"] and "permission denied" in r["error"], r)
    r = request(plain_sock, {"request": "pause"})
    check("no allow list: a UNIX peer may mutate", r.get("ok") is True, r)
    plain.send_signal(signal.SIGTERM)
    check("no-token daemon stops", plain.wait(timeout=30) == 0, log_text("plain.log")[-800:])

    # --- the main daemon: token, roots, hosts, metrics ---------------------------------------------------------
    allowed_listener = socket.socket()
    allowed_listener.bind(("127.0.0.1", 0))
    allowed_listener.listen(4)
    allowed_port = allowed_listener.getsockname()[1]
    denied_listener = socket.socket()
    denied_listener.bind(("127.0.0.1", 0))
    denied_listener.listen(4)
    denied_port = denied_listener.getsockname()[1]
    daemon = start(["--config", p1, "--socket", sock, "--control-tcp", "127.0.0.1:0", "--control-token", token,
                    "--metrics", "127.0.0.1:0", "--config-root", conf, "--config-root", conf2, "--input-root", inp, "--output-root", out,
                    "--allow-source-host", f"127.0.0.1:{allowed_port}", "--state-dir", state], "daemon.log")
    check("daemon up", wait_for(lambda: tcp_port("daemon.log") and request(sock, {"request": "status"})["ok"]),
          log_text("daemon.log")[-800:])
    tcp = ("127.0.0.1", tcp_port("daemon.log"))

    # The started file's directory is not UTF-8: status, metrics and trace show it (or work) with U+FFFD.
    c = Conn(sock)
    raw = c.raw(b'{"request":"status"}').decode("utf-8")  # strict
    c.close()
    st = json.loads(raw)
    check("status: valid UTF-8, the config's directory shown with U+FFFD", "conf-" + REPLACEMENT in st["config"], raw[:300])
    check("status: pipeline and stage names shown with U+FFFD",
          st["pipeline"] == "ctl-" + REPLACEMENT and st["stages"][0]["name"] == "dec" + REPLACEMENT, raw[:600])
    text = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port('daemon.log')}/metrics", timeout=10).read().decode()
    check("metrics: valid UTF-8, config label with U+FFFD",
          any(l.startswith("sluice_pipeline_info{") and "conf-" + REPLACEMENT in l for l in text.splitlines()),
          [l for l in text.splitlines() if l.startswith("sluice_pipeline_info")])
    check("metrics: stage label with U+FFFD", 'stage="dec' + REPLACEMENT + '"' in text)
    r = request(tcp, {"request": "trace", "seconds": 0.2})
    check("trace over TCP (a read): answers", r.get("ok") is True and len(r["trace"]["traceEvents"]) > 0, str(r)[:300])
    names = [e.get("args", {}).get("name", "") for e in r.get("trace", {}).get("traceEvents", [])]
    check("trace: the stage's track named with U+FFFD", any(n.startswith("dec" + REPLACEMENT) for n in names), names[:6])

    def alive_and_answering():
        return daemon.poll() is None and request(sock, {"request": "status"})["ok"] is True

    # Hostile bytes, over UNIX and over TCP (no token: a read-only peer), each on a fresh connection and then on
    # that same connection a status; then all of them on one connection.
    for where, label in ((sock, "unix"), (tcp, "tcp")):
        for payload in ATTACKS:
            c = Conn(where)
            try:
                raw = c.raw(payload)
                text = raw.decode("utf-8")  # strict: a reply that is not UTF-8 fails here
                reply = json.loads(text)
                after = c.ask({"request": "status"})
                good = reply.get("ok") is False and isinstance(reply.get("error"), str) and after.get("ok") is True
                check(f"{label}: {payload[:40]!r} -> error reply, connection usable", good, (text[:200], after.get("ok")))
            except (OSError, ValueError) as e:
                check(f"{label}: {payload[:40]!r} -> error reply, connection usable", False, repr(e))
            finally:
                c.close()
        c = Conn(where)
        replies = [c.raw(p) for p in ATTACKS]
        check(f"{label}: every payload on one connection answered", all(json.loads(r.decode())["ok"] is False for r in replies))
        check(f"{label}: ... and the connection still answers", c.ask({"request": "version"})["ok"] is True)
        c.close()
        check(f"{label}: daemon alive, status answers", alive_and_answering(), log_text("daemon.log")[-1500:])

    # TCP rows.
    r = request(tcp, {"request": "pause"})
    check("tcp without token: pause refused", not r["ok"] and "permission denied" in r["error"], r)
    r = request(tcp, {"request": "stop", "token": "wrong-wrong-wrong-wrong"})
    check("tcp with a wrong token: stop refused", not r["ok"] and r["error"] == "permission denied: wrong token", r)
    r = request(tcp, {"request": "status", "token": "wrong-wrong-wrong-wrong"})
    check("tcp with a wrong token: even status refused", not r["ok"] and "wrong token" in r["error"], r)
    r = request(tcp, {"request": "reload", "path": "/etc/shadow"})
    check("tcp without token: reload refused", not r["ok"] and "permission denied" in r["error"], r)
    r = request(tcp, {"request": "pause", "token": "correct-horse-battery-staple-42"})
    check("tcp with the token: pause", r.get("ok") is True and r["state"] == "paused", r)
    r = request(tcp, {"request": "resume", "token": "correct-horse-battery-staple-42"})
    check("tcp with the token: resume", r.get("ok") is True and r["state"] == "running", r)
    ctl = subprocess.run([sluicectl, "--tcp", f"127.0.0.1:{tcp[1]}", "--token-file", token, "pause"],
                         capture_output=True, text=True, timeout=30)
    check("sluicectl --tcp --token-file pause", ctl.returncode == 0, ctl.stderr)
    ctl = subprocess.run([sluicectl, "--tcp", f"127.0.0.1:{tcp[1]}", "resume"], capture_output=True, text=True, timeout=30)
    check("sluicectl --tcp without a token: refused (exit 1)", ctl.returncode == 1 and "permission denied" in ctl.stderr,
          ctl.stderr)
    subprocess.run([sluicectl, "--socket", sock, "resume"], capture_output=True, timeout=30)

    # reload rows. A FIFO outside the roots: had the daemon opened it, the reply would never come.
    fifo = os.path.join(other, "fifo.yaml")
    os.mkfifo(fifo)
    secret = os.path.join(other, "secret.yaml")
    with open(secret, "w") as f:
        f.write("hunter2-secret-key: value\n")
    for path, why in ((fifo, "a FIFO outside the roots"), ("/etc/shadow", "/etc/shadow"), (secret, "a file outside"),
                      (os.path.join(conf2, "..", "other", "secret.yaml"), "'..' out of the root")):
        r = request(sock, {"request": "reload", "path": path})
        check(f"reload {why}: refused before opening, naming --config-root",
              not r["ok"] and "--config-root" in r["error"] and "hunter2" not in r["error"], r)
    os.symlink(secret, os.path.join(conf2, "link.yaml"))
    r = request(sock, {"request": "reload", "path": os.path.join(conf2, "link.yaml")})
    check("reload a symlink out of the root: refused", not r["ok"] and "--config-root" in r["error"], r)
    leak = os.path.join(conf2, "not-a-pipeline.yaml")
    with open(leak, "w") as f:
        f.write("hunter2-secret-key: value\n")
    r = request(sock, {"request": "reload", "path": leak})
    check("reload a non-pipeline under the root: path:line:col, no content",
          not r["ok"] and "not-a-pipeline.yaml:1:" in r["error"] and "hunter2" not in r["error"], r)
    check("... the full message is in the log", "hunter2-secret-key" in log_text("daemon.log"))
    escape = pipeline(os.path.join(conf2, "escape.yaml"), "escape", os.path.join(other, "stolen.jsonl"))
    r = request(sock, {"request": "reload", "path": escape})
    check("reload a pipeline whose sink is outside --output-root: refused",
          not r["ok"] and "--output-root" in r["error"] and not os.path.exists(os.path.join(other, "stolen.jsonl")), r)
    check("still generation 1", request(sock, {"request": "status"})["generation"] == 1)
    p2 = pipeline(os.path.join(conf2, "p2.yaml"), "ctl2", os.path.join(out, "gen2.jsonl"))
    r = request(sock, {"request": "reload", "path": p2})
    check("reload a file under the config root: ok", r.get("ok") is True and r["generation"] == 2, r)

    # source-add rows.
    clip_outside = os.path.join(other, "clip.mp4")
    open(clip_outside, "wb").close()
    os.symlink(other, os.path.join(inp, "link"))
    for uri, why, needle in ((clip_outside, "outside the input roots", "--input-root"),
                             (os.path.join(inp, "..", "other", "clip.mp4"), "'..'", ".."),
                             (os.path.join(inp, "link", "clip.mp4"), "a symlink out", "--input-root"),
                             ("concat:/etc/passwd", "an ffmpeg protocol", "absolute"),
                             (f"http://127.0.0.1:{denied_port}/internal", "a host not allowed", "--allow-source-host"),
                             (f"http://127.0.0.1:{allowed_port}@127.0.0.1:{denied_port}/x", "userinfo trick",
                              "--allow-source-host")):
        r = request(sock, {"request": "source-add", "uri": uri})
        check(f"source-add {why}: refused", not r["ok"] and needle in r["error"], r)
    # A file under the input root that is not there: refused at once, not accepted and shown failed later; the
    # refusal is logged, and sluicectl exits 1 with the daemon's reason on stderr.
    missing = os.path.join(inp, "missing.mp4")
    wait_for(lambda: request(sock, {"request": "status"})["draining"] is None)  # the reload above has drained
    r = request(sock, {"request": "source-add", "uri": missing})
    check("source-add a missing file under the input root: refused", not r["ok"] and "missing.mp4 refused: No such file"
          in r["error"], r)
    ctl = subprocess.run([sluicectl, "--socket", sock, "add-source", missing], capture_output=True, text=True, timeout=30)
    check("sluicectl add-source of a missing file: exit 1, the daemon's reason on stderr", ctl.returncode == 1 and
          "sluicectl: daemon: source-add " + missing + " refused: No such file" in ctl.stderr, (ctl.returncode, ctl.stderr))
    check("... the refusal is logged", wait_for(lambda: "source-add " + missing + " refused" in log_text("daemon.log")))
    check("... and no source was added", all(s["uri"] != missing for s in request(sock, {"request": "sources"})["sources"]))
    denied_listener.settimeout(1.0)
    try:
        denied_listener.accept()
        check("no connection to a host not allowed", False)
    except socket.timeout:
        check("no connection to a host not allowed", True)
    if media:
        r = request(sock, {"request": "source-add", "uri": f"http://127.0.0.1:{allowed_port}/live", "name": "net"})
        check("source-add an allowed host: accepted", r.get("ok") is True, r)
        allowed_listener.settimeout(15.0)
        try:
            conn, _ = allowed_listener.accept()
            conn.close()
            check("... and the daemon connects to it", True)
        except socket.timeout:
            check("... and the daemon connects to it", False)
        request(sock, {"request": "source-remove", "source": "net"})
    # A camera's URI carries its user and password (and a signed URL its token): FFmpeg needs them, readers of
    # status and the log do not. A TCP peer without a token may read sources and status.
    secret_uri = f"rtsp://admin:S3cr3tPw@127.0.0.1:{allowed_port}/cam?token=T0kEn"
    r = request(sock, {"request": "source-add", "uri": secret_uri, "name": "secretcam"})
    check("source-add a camera with credentials in its URI: accepted", r.get("ok") is True, r)
    for what in ("sources", "status"):
        reply = json.dumps(request(tcp, {"request": what}))
        check(f"... a TCP reader's {what} shows it without its credentials",
              "S3cr3tPw" not in reply and "T0kEn" not in reply and
              f"rtsp://***@127.0.0.1:{allowed_port}/cam?***" in reply, reply[:600])
    request(sock, {"request": "source-remove", "source": "secretcam"})
    check("... and the log never holds them", wait_for(lambda: "source 'secretcam'" in log_text("daemon.log")) and
          "S3cr3tPw" not in log_text("daemon.log") and "T0kEn" not in log_text("daemon.log"),
          [l for l in log_text("daemon.log").splitlines() if "S3cr3t" in l or "T0kEn" in l][:3])
    r = request(sock, {"request": "source-add", "uri": "testsrc:checkerboard", "name": "pattern-\u00e9"})
    check("source-add testsrc (always allowed), a UTF-8 name", r.get("ok") is True and r["name"] == "pattern-\u00e9", r)
    # A name is printed as it is on lines of text (the text sink's records on the journal): one holding a control
    # or invisible character would forge a line there, so it is refused, escaped in the reply.
    for bad in ("cam\n<0>forged", "cam\x1b[2J", "cam\u202egpj.exe", "cam\u0085"):
        r = request(sock, {"request": "source-add", "uri": "testsrc:bars", "name": bad})
        check(f"source-add a name holding a control character ({bad!r}): refused",
              r.get("ok") is False and "control or invisible character" in r.get("error", "") and
              "\n" not in r.get("error", "") and "\x1b" not in r.get("error", ""), r)

    if media:
        # A directory job under the input root holding a file whose name is not UTF-8, made with ffmpeg.
        cafe = os.path.join(inp, "watch", "caf\udce9.mp4")
        made = subprocess.run(["ffmpeg", "-hide_banner", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                               "testsrc2=size=64x48:rate=10", "-frames:v", "10", "-c:v", "libx264", "-preset", "ultrafast",
                               "-pix_fmt", "yuv420p", cafe], capture_output=True, timeout=60)
        check("ffmpeg made caf\\xe9.mp4", made.returncode == 0, made.stderr[-500:])
        r = request(sock, {"request": "source-add", "uri": os.path.join(inp, "watch"), "name": "watch"})
        check("source-add a directory under the input root", r.get("ok") is True, r)

        def watch_source():
            return next(s for s in request(sock, {"request": "sources"})["sources"] if s["name"] == "watch")

        check("the job reads caf\\xe9.mp4 to its end", wait_for(lambda: watch_source()["state"] == "eos", 60), watch_source())
        check("... its 10 frames", watch_source()["frames"] == 10, watch_source())
    c = Conn(sock)
    raw_status = c.raw(b'{"request":"status"}').decode("utf-8")
    raw_sources = c.raw(b'{"request":"sources"}').decode("utf-8")
    c.close()
    check("status after all of it: valid UTF-8", json.loads(raw_status)["ok"] is True, raw_status[:300])
    if media:
        check("sources: the input shown as caf\\ufffd.mp4", "caf" + REPLACEMENT + ".mp4" in raw_sources,
              raw_sources[:800])
    body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port('daemon.log')}/metrics", timeout=10).read()
    text = body.decode("utf-8")  # strict
    check("metrics: the source with a UTF-8 name", 'source="pattern-\u00e9"' in text)
    r = request(sock, {"request": "trace", "seconds": 0.3})
    check("trace answers with events", r.get("ok") is True and len(r["trace"]["traceEvents"]) > 0, str(r)[:300])
    r = request(sock, {"request": "source-remove", "source": "pattern-\u00e9"})
    check("source-remove by a non-ASCII name", r.get("ok") is True, r)
    check("daemon alive after all of it", alive_and_answering(), log_text("daemon.log")[-1500:])

    # Ledger: the status mid-run balances; after stop, the run summary of the last generation balances with
    # nothing in flight, and every frame delivered by either generation has its record on disk.
    st = request(sock, {"request": "status"})
    f, before = st["frames"], st["frames_before_reload"]
    check("ledger: produced = delivered + dropped + failed + in flight",
          f["produced"] == f["delivered"] + f["dropped"] + f["failed"] + f["in_flight"], f)
    check("ledger: earlier generation balanced",
          before["produced"] == before["delivered"] + before["dropped"] + before["failed"], before)
    r = request(sock, {"request": "stop"})
    check("stop", r.get("ok") is True, r)
    check("daemon exits 0", daemon.wait(timeout=60) == 0, log_text("daemon.log")[-1500:])
    summary = [l for l in log_text("daemon.log").splitlines() if l.startswith("frames: produced ")]
    check("run summary printed", len(summary) == 1, summary)
    if summary:
        words = summary[-1].replace("+", " ").replace("=", " ").split()
        produced, delivered, dropped, failed, in_flight = (int(w) for w in words if w.isdigit())
        check("summary ledger: produced = delivered + dropped + failed, nothing in flight",
              produced == delivered + dropped + failed and in_flight == 0, summary[-1])
        total = before["delivered"] + delivered
        on_disk = lines_in(os.path.join(out, "gen1.jsonl")) + lines_in(os.path.join(out, "gen2.jsonl"))
        check("every delivered frame's record is on disk", on_disk == total and total > 0, (on_disk, total))
    check("no conservation violation logged", "conservation violated" not in log_text("daemon.log"))
finally:
    daemon_client.end_all(procs)
    shutil.rmtree(tmp, ignore_errors=True)

print(f"{len(failures)} control checks failed" if failures else "all control checks passed")
sys.exit(1 if failures else 0)
