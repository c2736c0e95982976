#!/usr/bin/env python3
"""redis_http_jobs_test.py SLUICED SLUICECTL: http(s):// entries of a Redis job (issue 33 item 11).

A real redis-server on a free loopback port, and web servers in this process: one serving small real videos (and
a 404, a redirect to file://, an endless body, 503s and a 429), one that accepts connections and never answers,
and a port with nothing listening. One `sluiced run` worker (decode `uri: redis://...?group=workers&until_empty=true
&claim_idle_s=1&max_deliveries=3`, open_timeout_s and read_timeout_s 2, url_max_mb 1, a directory sink) takes the
entries:

- the good URLs are fetched by FFmpeg and done once each, with every frame of their video; two URLs whose paths
  end in the same file name get two result files, and a URL whose path holds `..%2F` names its result inside
  the output directory;
- transient failures are tried again: a URL answered 503 twice and then served, and one answered 429 once, are
  done once with every frame, never recorded failed; a URL always answered 503, a server that never answers and
  a refused connection are attempted max_deliveries (3) times, then dead-lettered with the last attempt's reason;
- permanent failures are not: a 404, a redirect to file:// and a body past url_max_mb are asked for once;
- every failed URL fails with a reason naming the URL (its query hidden: no token in any reason or log line),
  goes to the dead letters and the job ledger as failed, and the worker ends by itself (never a hang);
- submitted again, the good URLs are acknowledged as skipped by a second worker (done by the group: a URL is
  its identity), their results untouched.
No timing assertions: waits are bounded.
"""
import glob
import http.server
import json
import os
import socket
import subprocess
import sys
import threading

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/
import daemon_client  # noqa: E402
import redis_fixture  # noqa: E402

sluiced, sluicectl = sys.argv[1:3]
tmp, failures, procs, check, wait_for = daemon_client.session("sluice-http-jobs-", 60.0)
SECRET = "s3cr3t-t0ken"


# --- inputs: tiny real videos made by ffmpeg ------------------------------------------------------------------
def make_clip(name, frames, fmt="mp4", seed=0):
    path = os.path.join(tmp, name)
    made = subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-nostdin", "-f", "lavfi", "-i",
                           f"testsrc=size=64x48:rate=25,noise=alls=40:allf=t+u:all_seed={seed},format=yuv420p",
                           "-frames:v", str(frames), "-c:v", "libx264", "-preset", "ultrafast", "-g", "1", "-f", fmt,
                           path], capture_output=True, text=True)
    if made.returncode != 0:
        raise SystemExit("ffmpeg could not make the test videos: " + made.stderr[-2000:])
    with open(path, "rb") as fh:
        return path, fh.read()


clip_a, bytes_a = make_clip("a.mp4", 4, seed=1)
_, bytes_a2 = make_clip("a2.mp4", 3, seed=2)
_, bytes_b = make_clip("b.mp4", 2, seed=3)
_, bytes_d = make_clip("d.mp4", 5, seed=4)
_, bytes_ts = make_clip("loop.ts", 25, fmt="mpegts", seed=5)
local_target = clip_a  # what the redirect points at: a readable local video, never to be read through a URL

served = {  # path (without the query) -> (bytes, frames)
    "/clips/a.mp4": (bytes_a, 4),
    "/other/a.mp4": (bytes_a2, 3),
    "/signed/b.mp4": (bytes_b, 2),
    "/dir/..%2F..%2Fescape.mp4": (bytes_d, 5),
}
requests_seen = []
# path -> how many requests it answers with that status before it serves its file (None: every request)
failing = {"/flaky.mp4": (503, 2), "/busy.mp4": (503, None), "/throttled.mp4": (429, 1)}
served["/flaky.mp4"] = (bytes_b, 2)
served["/throttled.mp4"] = (bytes_a2, 3)


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def do_GET(self):
        requests_seen.append(self.path)
        path = self.path.split("?", 1)[0]
        if path in failing:
            status, times = failing[path]
            if times is None or requests_seen.count(self.path) <= times:
                body = b"try again later\n"
                self.send_response(status)
                self.send_header("Content-Length", str(len(body)))
                if status == 429:
                    self.send_header("Retry-After", "1")
                self.end_headers()
                self.wfile.write(body)
                return
        if path == "/redirect.mp4":
            self.send_response(302)
            self.send_header("Location", "file://" + local_target)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        if path == "/endless.ts":  # a body that never ends (no length, the same clip over and over)
            self.send_response(200)
            self.send_header("Content-Type", "video/mp2t")
            self.send_header("Connection", "close")
            self.end_headers()
            try:
                while True:
                    self.wfile.write(bytes_ts)
            except OSError:
                return
        if path not in served:
            body = b"not here\n"
            self.send_response(404)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            return
        data = served[path][0]
        start, end = 0, len(data) - 1
        rng = self.headers.get("Range")
        if rng and rng.startswith("bytes="):
            lo, _, hi = rng[6:].partition("-")
            start = int(lo or 0)
            end = min(int(hi), end) if hi else end
        if start > end:
            self.send_response(416)
            self.send_header("Content-Range", f"bytes */{len(data)}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(206 if rng else 200)
        self.send_header("Content-Type", "video/mp4")
        self.send_header("Accept-Ranges", "bytes")
        if rng:
            self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
        self.send_header("Content-Length", str(end - start + 1))
        self.end_headers()
        try:
            self.wfile.write(data[start:end + 1])
        except OSError:
            pass


web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
web.daemon_threads = True
threading.Thread(target=web.serve_forever, daemon=True).start()
web_port = web.server_address[1]

# A server that accepts and never answers: connections are held open, nothing is ever sent.
silent = socket.socket()
silent.bind(("127.0.0.1", 0))
silent.listen(16)
held = []


def hold():
    while True:
        try:
            conn, _ = silent.accept()
        except OSError:
            return
        held.append(conn)


threading.Thread(target=hold, daemon=True).start()
silent_port = silent.getsockname()[1]
closed_port = daemon_client.free_port()  # nothing listens here

base = f"http://127.0.0.1:{web_port}"
good = {
    f"{base}/clips/a.mp4": 4,
    f"{base}/other/a.mp4": 3,  # the same file name as the first
    f"{base}/signed/b.mp4?token={SECRET}&expires=9": 2,
    f"{base}/dir/..%2F..%2Fescape.mp4": 5,
    f"{base}/flaky.mp4": 2,  # 503 twice, then served
    f"{base}/throttled.mp4": 3,  # 429 once, then served
}
retried_good = [f"{base}/flaky.mp4", f"{base}/throttled.mp4"]
ATTEMPTS = "attempt 3 of max_deliveries 3"
bad = {  # URL -> what its reason must say
    f"{base}/missing.mp4?token={SECRET}": ["'" + f"{base}/missing.mp4?***'", "404"],
    f"http://127.0.0.1:{silent_port}/never.mp4": ["nothing answered within 2 s", ATTEMPTS],
    f"http://127.0.0.1:{closed_port}/refused.mp4": ["Connection refused", ATTEMPTS],
    f"{base}/busy.mp4": ["cannot fetch it", "HTTP 503", ATTEMPTS],
    f"{base}/redirect.mp4": ["cannot fetch it", "redirect", "file://"],
    f"{base}/endless.ts": ["larger than 1048576 bytes"],
}
permanent = [f"{base}/missing.mp4?token={SECRET}", f"{base}/redirect.mp4", f"{base}/endless.ts"]

# --- redis ------------------------------------------------------------------------------------------------------
redis = redis_fixture.RedisServer(os.path.join(tmp, "redis")).start()
cli = redis.cli


def pipeline(name, consumer, out, state):
    uri = redis.uri(f"jobs?group=workers&consumer={consumer}&until_empty=true&claim_idle_s=1&max_deliveries=3")
    daemon_client.write_pipeline(
        os.path.join(tmp, name + ".yaml"), name,
        {"uri": [uri], "width": 32, "height": 24, "format": "bgr8", "decode_threads": 2, "open_timeout_s": 2,
         "read_timeout_s": 2, "url_max_mb": 1},
        {"type": "directory", "path": out})
    return [sluiced, "run", os.path.join(tmp, name + ".yaml"), "--state-dir", state, "--no-progress"]


def results(out):
    got = {}
    for path in glob.glob(os.path.join(out, "*.json")):
        with open(path) as fh:
            r = json.load(fh)
        got.setdefault(r["input"], []).append((os.path.basename(path), r))
    return got


def ledger_lines(state):
    return [json.loads(line) for path in glob.glob(os.path.join(state, "jobs", "*.ledger")) for line in open(path)]


def ledger(state):
    return {e["input"]: e for e in ledger_lines(state) if e["status"] in ("done", "failed")}


def dead_letters():
    return redis.entries("jobs:dead")


def group_status():
    return (redis_fixture.job_status(sluicectl, redis.uri("jobs?group=workers"), check, "").get("groups") or [{}])[0]


try:
    for url in list(good) + list(bad):
        cli("XADD", "jobs", "*", "input", url)

    out, state = os.path.join(tmp, "out"), os.path.join(tmp, "state")
    rc, _, err = daemon_client.finish(daemon_client.start(procs, pipeline("web", "w0", out, state)), 180)
    check("the worker ends by itself (until_empty), exit 1 for its failed inputs: no hang", rc == 1,
          (rc, err[-3000:]))

    got = results(out)
    for url, frames in good.items():
        rs = got.get(url, [])
        check(f"{url}: done once, every frame ({frames})",
              len(rs) == 1 and rs[0][1].get("frames") == rs[0][1].get("delivered") == frames, (rs, err[-2000:]))
    names = [name for rs in got.values() for name, _ in rs]
    check("two URLs with the same file name get two result files", len(set(names)) == len(names) >= 2, names)
    escape = [n for n, _ in got.get(f"{base}/dir/..%2F..%2Fescape.mp4", [])]
    check("a URL's result is named after the last segment of its path, escapes kept as they are",
          escape == ["_2F.._2Fescape.json"], escape)
    check("every result lies in the output directory (no path from the URL escapes it)",
          all(os.path.dirname(os.path.realpath(p)) == os.path.realpath(out)
              for p in glob.glob(os.path.join(out, "**", "*.json"), recursive=True)) and
          not os.path.exists(os.path.join(tmp, "escape.json")), sorted(os.listdir(out)) if os.path.isdir(out) else None)
    check("a failed URL's result file says its error; none but the endless body's holds a frame",
          all(len(got.get(u, [])) == 1 and got[u][0][1].get("error") and
              (got[u][0][1].get("delivered") == 0 or u.endswith("/endless.ts")) for u in bad),
          {u: got.get(u) for u in bad})

    dead = {d.get("input"): d for d in dead_letters()}
    for url, says in bad.items():
        reason = dead.get(url, {}).get("reason", "")
        check(f"{url}: a dead letter whose reason says {says}", all(s in reason for s in says), reason or dead)
    check("no reason holds the URL's query (its token)", not any(SECRET in d.get("reason", "") for d in dead.values()),
          [d.get("reason") for d in dead.values()])
    check("the worker's log never shows the token", SECRET not in err,
          [line for line in err.splitlines() if SECRET in line][:3])
    check("the redirect was asked for once, and its local file was never read: no record",
          requests_seen.count("/redirect.mp4") == 1 and
          not any(r.get("records") for _, r in got.get(f"{base}/redirect.mp4", [])), requests_seen)
    check("a permanent failure (404, a refused redirect, a body past url_max_mb) is not tried again",
          all(requests_seen.count(u[len(base):]) == 1 for u in permanent) and
          not any("attempt" in dead.get(u, {}).get("reason", "") for u in permanent),
          {u: requests_seen.count(u[len(base):]) for u in permanent})
    check("503 twice, then served: asked for until it was served (two 503s, then the file)",
          requests_seen.count("/flaky.mp4") >= 3, requests_seen)
    check("429 once, then served: the 429 was tried again", requests_seen.count("/throttled.mp4") >= 2, requests_seen)
    check("always 503: asked for once per attempt (3)", requests_seen.count("/busy.mp4") == 3, requests_seen)
    check("the server that never answers: one connection per attempt (3)", len(held) == 3, len(held))

    led = ledger(state)
    check("the job ledger: the good URLs done, the bad ones failed with their reason",
          all(led.get(u, {}).get("status") == "done" for u in good) and
          all(led.get(u, {}).get("status") == "failed" and led[u].get("reason") for u in bad),
          {u: led.get(u, {}).get("status") for u in list(good) + list(bad)})
    check("a transient failure that was tried again is never recorded failed (the URLs done after 503 or 429)",
          not any(e["input"] in retried_good and e["status"] == "failed" for e in ledger_lines(state)),
          [e for e in ledger_lines(state) if e["input"] in retried_good])
    g = group_status()
    check(f"every entry acknowledged: {len(good)} done, {len(bad)} dead-lettered, none pending",
          (g.get("done"), g.get("dead"), g.get("pending")) == (len(good), len(bad), 0), g)

    # --- submitted again: the group did them; a second worker skips them, their results untouched ----------------
    stamps = {p: os.stat(p).st_mtime_ns for p in glob.glob(os.path.join(out, "*.json"))}
    for url in good:
        cli("XADD", "jobs", "*", "input", url)
    out2, state2 = os.path.join(tmp, "out2"), os.path.join(tmp, "state2")
    before = len(requests_seen)
    rc, _, err2 = daemon_client.finish(daemon_client.start(procs, pipeline("web2", "w1", out2, state2)), 120)
    check("submitted again: the second worker ends with exit 0", rc == 0, (rc, err2[-2000:]))
    check("submitted again: nothing fetched again, no new result", len(requests_seen) == before and not results(out2),
          (requests_seen[before:], results(out2)))
    check("the first results untouched",
          {p: os.stat(p).st_mtime_ns for p in glob.glob(os.path.join(out, "*.json"))} == stamps)
    g = group_status()
    check(f"submitted again: {len(good)} skipped (done by the group), none pending",
          (g.get("skipped"), g.get("pending")) == (len(good), 0), g)

    # --- the service judges its exit like `sluiced run`: by its inputs' final outcomes --------------------------
    # An attempt handed back to the job (503 twice, tried again, then served) is not the input's outcome: a service
    # (sluiced --config) whose inputs all ended done exits 0; it counted the failed attempts and exited 1.
    failing["/flaky-svc.mp4"] = (503, 2)
    served["/flaky-svc.mp4"] = (bytes_b, 2)
    cli("XADD", "jobs-svc", "*", "input", f"{base}/flaky-svc.mp4")
    svc_out = os.path.join(tmp, "out-svc")
    svc_config = os.path.join(tmp, "svc.yaml")
    daemon_client.write_pipeline(
        svc_config, "svc",
        {"uri": [redis.uri("jobs-svc?group=svc&consumer=s0&until_empty=true&claim_idle_s=1&max_deliveries=3")],
         "width": 32, "height": 24, "format": "bgr8", "open_timeout_s": 2, "read_timeout_s": 2},
        {"type": "directory", "path": svc_out})
    rc, _, err3 = daemon_client.finish(daemon_client.start(procs, [
        sluiced, "--config", svc_config, "--socket", os.path.join(tmp, "svc.sock"),
        "--state-dir", os.path.join(tmp, "state-svc")]), 120)
    check("service: the input was tried again until served", requests_seen.count("/flaky-svc.mp4") >= 3, requests_seen)
    check("service: done once, every frame", [r.get("delivered") for _, r in results(svc_out).get(f"{base}/flaky-svc.mp4", [])] == [2],
          results(svc_out))
    check("service: every input done in the end: exit 0", rc == 0, (rc, err3[-2500:]))
finally:
    daemon_client.end_all(procs)
    redis.stop()
    web.shutdown()
    silent.close()
    for c in held:
        c.close()

daemon_client.conclude(failures, tmp)
