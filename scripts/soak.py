#!/usr/bin/env python3
"""soak.py: run sluiced as a service for a while under steady load and check that nothing grows or leaks.

Starts `--sluiced` on a pipeline of `--sources` test-pattern sources (testsrc: URIs, so a GPU-host build without
the media library runs it too) through preprocess, the shipped classifier and a jsonl sink (one file per source),
then for `--duration` seconds:
  - reloads it every `--reload-every` seconds (the same file, over the control socket),
  - adds and removes a run-time source every `--churn-every` seconds,
  - keeps `--clients` control clients polling `status` and `sources` (half on one long connection, half with a
    new connection per request),
  - samples every `--sample-every` seconds: RSS, open fds (/proc/PID/fd), threads (/proc/PID/task), device
    memory (nvidia-smi, when it exists) and the frame ledger from `status`.
At the end it pauses the service, waits for the frames in flight, checks that every frame counted delivered has
its record on disk (exactly once), stops it and expects exit status 0.

Warm-up: the run begins with `--warmup-reloads` reloads back to back, then waits out `--warmup` seconds; only
samples after both count. Why: each pipeline generation starts new threads, and glibc's allocator keeps growing
its arenas and free lists for the first few dozen generations (measured on the CPU path with no leak: RSS
83 -> 113 MiB over the first 15 reloads, 125 MiB at 50, flat from there through 77), so a soak that reloads every
30 s would need half an hour before RSS says anything.
Pass/fail rules (on the samples after warm-up; "first"/"last" = their first and last third):
  - RSS: the median of the last third is at most the median of the first third + max(--rss-tolerance %, 4 MiB).
  - fds, threads, device memory: the least of the last third is at most the median of the first third (a reload
    caught half way holds a few more or fewer for a moment; a leak raises the whole last third). A failing fd
    check names what the extra fds point at (sockets, pipes, which files).
  - ledger, at every sample: 0 <= in_flight <= --max-in-flight, produced = delivered + dropped + failed +
    in_flight for the current pipeline, produced = delivered + dropped + failed for the earlier generations
    (frames_before_reload), and the totals over all generations never go down.
  - progress: frames are delivered in every third of the run; every reload is answered ok and counted in
    `generation`; no status/sources request fails; the daemon never dies.
  - at the end: delivered frames = jsonl records on disk; the daemon exits 0 after `stop`.
Writes OUT/samples.csv, OUT/summary.json, OUT/summary.txt and OUT/sluiced.log. Exit status: 0 all rules held,
1 a rule broke (summary says which), 2 the daemon could not be started or the arguments are wrong.
Only the Python standard library is needed; nothing is built.
"""
import argparse
import collections
import csv
import json
import os
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PATTERNS = ["bars", "shapes", "gradient", "checkerboard", "noise"]
MIB = 1024 * 1024


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--sluiced", required=True,
                   help="the sluiced executable to run (already built); may be a command with a wrapper in front "
                        "that execs it, e.g. '.gpu/run bin/sluiced' on the GPU host")
    p.add_argument("--duration", type=float, default=480, help="seconds of load (default 480)")
    p.add_argument("--warmup", type=float, default=None,
                   help="seconds before growth is judged (default: a quarter of --duration, at most 120)")
    p.add_argument("--reload-every", type=float, default=30, help="seconds between reloads (default 30; 0: none)")
    p.add_argument("--warmup-reloads", type=int, default=50,
                   help="reloads back to back at the start, part of the warm-up (default 50; see above)")
    p.add_argument("--churn-every", type=float, default=10,
                   help="seconds between adding and removing a run-time source (default 10; 0: none)")
    p.add_argument("--sources", type=int, default=8, help="test-pattern sources in the pipeline (default 8)")
    p.add_argument("--fps", type=float, default=30, help="frames per second of each source (default 30)")
    p.add_argument("--size", default="320x240", help="frame size WxH (default 320x240)")
    p.add_argument("--batch", type=int, default=8, help="batch size (default 8)")
    p.add_argument("--clients", type=int, default=4, help="control clients polling status/sources (default 4)")
    p.add_argument("--device", choices=["cpu", "auto", "cuda"], default="auto", help="pipeline device (default auto)")
    p.add_argument("--sample-every", type=float, default=5, help="seconds between samples (default 5)")
    p.add_argument("--rss-tolerance", type=float, default=5, help="allowed RSS growth in percent (default 5)")
    p.add_argument("--no-rss-check", action="store_true",
                   help="sample RSS but do not judge it (sanitizer builds: ASan's quarantine grows by design)")
    p.add_argument("--max-in-flight", type=int, default=100000, help="a sane bound on frames in flight")
    p.add_argument("--out", default=None, help="folder for samples.csv, summary.* and the daemon's log "
                                               "(default: a new folder under /tmp)")
    a = p.parse_args()
    if a.warmup is None:
        a.warmup = min(120.0, a.duration / 4)
    if a.duration <= a.warmup + 3 * a.sample_every:
        p.error("--duration must leave at least three samples after --warmup")
    if a.sources < 1 or a.clients < 0 or a.batch < 1:
        p.error("--sources and --batch must be >= 1, --clients >= 0")
    try:
        a.width, a.height = (int(v) for v in a.size.lower().split("x"))
    except ValueError:
        p.error(f"--size must be WxH, got {a.size!r}")
    return a


# --- the control socket -------------------------------------------------------------------------------------------
class Connection:
    """One control connection: JSON lines both ways."""

    def __init__(self, path, timeout=30.0):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.buf = b""

    def request(self, obj):
        self.sock.sendall((json.dumps(obj) + "\n").encode())
        while b"\n" not in self.buf:
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                raise ConnectionError("the daemon closed the connection")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)

    def close(self):
        self.sock.close()


def request(path, obj, timeout=30.0):
    c = Connection(path, timeout)
    try:
        return c.request(obj)
    finally:
        c.close()


# --- what is sampled ----------------------------------------------------------------------------------------------
def rss_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def count_dir(path):
    return len(os.listdir(path))


def fd_kinds(pid):
    """What the process's fds point at, counted: 'socket', 'pipe', 'anon_inode:[eventfd]', or the file's path."""
    kinds = collections.Counter()
    fd_dir = f"/proc/{pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:  # closed between listing and reading
            continue
        kinds[re.sub(r":\[\d+\]$", "", target)] += 1
    return kinds


def kinds_difference(before, after):
    """'+2 socket, -1 /x' for two fd_kinds counts, or 'same kinds'."""
    parts = [f"{after[k] - before[k]:+d} {k}" for k in sorted(set(before) | set(after)) if after[k] != before[k]]
    return ", ".join(parts) or "same kinds"


def device_mib(pid):
    """Device memory the process holds (MiB), or None without nvidia-smi."""
    if not shutil.which("nvidia-smi"):
        return None
    try:
        out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                             capture_output=True, text=True, timeout=20).stdout
    except (subprocess.SubprocessError, OSError):
        return None
    total = 0
    for line in out.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0] == str(pid) and parts[1].isdigit():
            total += int(parts[1])
    return total


def ledger(st):
    """(current, before, total) frame counts from a status reply."""
    f = st["frames"]
    b = st.get("frames_before_reload") or {}
    cur = {k: int(f[k]) for k in ("produced", "delivered", "dropped", "failed", "in_flight")}
    before = {k: int(b.get(k, 0)) for k in ("produced", "delivered", "dropped", "failed")}
    total = {k: cur[k] + before[k] for k in ("produced", "delivered", "dropped", "failed")}
    return cur, before, total


def ledger_problems(st, max_in_flight):
    cur, before, _ = ledger(st)
    problems = []
    if not 0 <= cur["in_flight"] <= max_in_flight:
        problems.append(f"in_flight {cur['in_flight']} outside 0..{max_in_flight}")
    settled = cur["delivered"] + cur["dropped"] + cur["failed"]
    if cur["produced"] != settled + cur["in_flight"]:
        problems.append(f"produced {cur['produced']} != delivered+dropped+failed+in_flight {settled + cur['in_flight']}")
    settled_before = before["delivered"] + before["dropped"] + before["failed"]
    if before["produced"] != settled_before:
        problems.append(f"frames_before_reload: produced {before['produced']} != settled {settled_before}")
    return problems


# --- the daemon's pipeline ----------------------------------------------------------------------------------------
def write_pipeline(path, a, results):
    uris = "\n".join(f"      - testsrc:{PATTERNS[i % len(PATTERNS)]}" for i in range(a.sources))
    models = os.path.join(REPO, "models")
    with open(path, "w") as f:
        f.write(f"""# Written by scripts/soak.py.
name: soak
device: {a.device}
batch_size: {a.batch}
batch_timeout_ms: 20
stages:
  - kind: decode
    uri:
{uris}
    width: {a.width}
    height: {a.height}
    fps: {a.fps:g}
  - kind: upload
  - kind: preprocess
    width: 64
    height: 64
    order: rgb
    layout: nchw
    dtype: f32
    mean: [0.485, 0.456, 0.406]
    std: [0.229, 0.224, 0.225]
  - kind: infer
    model: {os.path.join(models, "testsrc-classifier.onnx")}
    labels: {os.path.join(models, "testsrc-classifier.labels")}
    output: classes
    top_k: 1
  - kind: download
  - kind: sink
    type: jsonl
    per: source
    path: {results}
""")


def exit_summary_ledger(log_path):
    """(produced, delivered, dropped, failed, in_flight) from the last `frames: produced ...` line of the log."""
    pattern = re.compile(r"frames: produced (\d+) = delivered (\d+) \+ dropped (\d+) \+ failed (\d+) \+ in flight (-?\d+)")
    found = None
    with open(log_path, errors="replace") as f:
        for line in f:
            m = pattern.search(line)
            if m:
                found = tuple(int(x) for x in m.groups())
    return found


def count_records(results):
    n = 0
    for root, _, files in os.walk(results):
        for name in files:
            if ".jsonl" in name:
                with open(os.path.join(root, name), "rb") as f:
                    n += sum(1 for line in f if line.strip())
    return n


# --- load ---------------------------------------------------------------------------------------------------------
class Quiet:
    """Clients hold it shared around a request; the sampler holds it alone, so fds and threads are counted while
    no request is in the middle of connecting."""

    def __init__(self):
        self.cv = threading.Condition()
        self.readers = 0
        self.writer = False

    def shared(self):
        return _Held(self, False)

    def alone(self):
        return _Held(self, True)


class _Held:
    def __init__(self, q, alone):
        self.q, self.alone = q, alone

    def __enter__(self):
        with self.q.cv:
            if self.alone:
                self.q.writer = True  # new readers wait; the ones inside finish
                self.q.cv.wait_for(lambda: self.q.readers == 0)
            else:
                self.q.cv.wait_for(lambda: not self.q.writer)
                self.q.readers += 1

    def __exit__(self, *exc):
        with self.q.cv:
            if self.alone:
                self.q.writer = False
            else:
                self.q.readers -= 1
            self.q.cv.notify_all()


class Load:
    def __init__(self, sock, a):
        self.sock, self.a = sock, a
        self.stop = threading.Event()
        self.quiet = Quiet()
        self.lock = threading.Lock()
        self.requests = 0
        self.errors = []  # first few failed requests, with what came back
        self.started = time.monotonic()
        self.error_count = 0
        self.reloads_ok = 0
        self.warm_reloads_done = threading.Event()
        self.churn_ok = 0
        self.threads = []

    def failed(self, what):
        with self.lock:
            self.error_count += 1
            if len(self.errors) < 20:
                self.errors.append(what)
                print(f"soak: request failed at {time.monotonic() - self.started:.1f} s: {what}", flush=True)

    def counted(self):
        with self.lock:
            self.requests += 1

    def start(self):
        for i in range(self.a.clients):
            self.threads.append(threading.Thread(target=self.poll, args=(i % 2 == 0,), daemon=True))
        if self.a.reload_every > 0 or self.a.warmup_reloads > 0:
            self.threads.append(threading.Thread(target=self.reloader, daemon=True))
        else:
            self.warm_reloads_done.set()
        if self.a.churn_every > 0:
            self.threads.append(threading.Thread(target=self.churner, daemon=True))
        for t in self.threads:
            t.start()

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(60)

    def poll(self, long_lived):
        conn = None
        n = 0
        while not self.stop.is_set():
            what = "status" if n % 2 == 0 else "sources"
            n += 1
            with self.quiet.shared():
                try:
                    if long_lived:
                        conn = conn or Connection(self.sock)
                        reply = conn.request({"request": what})
                    else:
                        reply = request(self.sock, {"request": what})
                    if not reply.get("ok"):
                        self.failed(f"{what}: {reply}")
                    self.counted()
                except (OSError, ValueError) as e:
                    self.failed(f"{what}: {e}")
                    if conn:
                        conn.close()
                        conn = None
            self.stop.wait(0.05)
        if conn:
            conn.close()

    def reloader(self):
        quick = self.a.warmup_reloads
        if quick <= 0:
            self.warm_reloads_done.set()
        while not self.stop.wait(0 if quick > 0 else self.a.reload_every):
            if quick > 0:
                quick -= 1
                if quick == 0:
                    self.warm_reloads_done.set()
            elif self.a.reload_every <= 0:
                self.warm_reloads_done.set()
                return
            with self.quiet.shared():
                try:
                    reply = request(self.sock, {"request": "reload"}, timeout=120)
                    if reply.get("ok"):
                        with self.lock:
                            self.reloads_ok += 1
                    else:
                        self.failed(f"reload: {reply}")
                    self.counted()
                    self.wait_drained()
                except (OSError, ValueError) as e:
                    self.failed(f"reload: {e}")

    def wait_drained(self, limit_s=60):
        """A reload answers once the new generation is built; the old one drains in the background and a
        second reload meanwhile is refused. Waits until `status` shows no draining generation."""
        deadline = time.monotonic() + limit_s
        while not self.stop.is_set() and time.monotonic() < deadline:
            try:
                if request(self.sock, {"request": "status"}, timeout=30).get("draining") is None:
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.02)
        if not self.stop.is_set():
            self.failed(f"reload: the old generation still drains after {limit_s} s")

    def churner(self):
        added = None
        while not self.stop.wait(self.a.churn_every):
            with self.quiet.shared():
                try:
                    # During a reload's drain sources cannot change (docs/protocol.md): try again a little later.
                    reloading = lambda r: not r.get("ok") and "a reload is in progress" in r.get("error", "")
                    for _ in range(200):
                        if added is None:
                            reply = request(self.sock, {"request": "source-add", "uri": "testsrc:noise",
                                                        "name": "soak-churn", "rate_limit": self.a.fps})
                        else:
                            reply = request(self.sock, {"request": "source-remove", "source": added})
                        if not reloading(reply) or self.stop.wait(0.05):
                            break
                    if reply.get("ok"):
                        added = reply.get("name", "soak-churn") if added is None else None
                    else:
                        self.failed(f"source-{'add' if added is None else 'remove'}: {reply}")
                    if reply.get("ok"):
                        with self.lock:
                            self.churn_ok += 1
                    self.counted()
                except (OSError, ValueError) as e:
                    self.failed(f"source churn: {e}")


# --- judging ------------------------------------------------------------------------------------------------------
def thirds(values):
    k = max(1, len(values) // 3)
    return values[:k], values[-k:]


def judge(samples, a):
    """The growth rules over the samples after warm-up: list of (check, ok, detail)."""
    later = [s for s in samples if s["warm"]]
    verdicts = []
    if len(later) < 9:  # three per third at least
        return [("enough samples after warm-up", False, f"{len(later)} samples")]
    first, last = thirds(later)
    rss_first = statistics.median(s["rss_kib"] for s in first)
    rss_last = statistics.median(s["rss_kib"] for s in last)
    allowed = max(rss_first * a.rss_tolerance / 100, 4 * 1024)
    detail = (f"median {rss_first / 1024:.1f} MiB -> {rss_last / 1024:.1f} MiB "
              f"(allowed +{allowed / 1024:.1f} MiB)")
    if a.no_rss_check:
        verdicts.append(("rss flat (not judged: --no-rss-check)", True, detail))
    else:
        verdicts.append(("rss flat", rss_last <= rss_first + allowed, detail))
    # Counts: the floor of the last third against the median of the first. The churned source and a draining
    # generation add a thread and an fd for part of the time, and a reload caught half way holds a few fewer (one
    # CI run sampled 13 fds once among 17s and 18s), so neither a median-to-median nor a floor-to-floor comparison
    # is stable; a leak raises the whole last third above the usual count of the first.
    for key, unit in (("fds", ""), ("threads", ""), ("device_mib", " MiB")):
        if any(s[key] is None for s in later):
            continue
        usual_first = statistics.median(s[key] for s in first)
        lowest_last = min(last, key=lambda s: s[key])
        detail = f"median of the first third {usual_first:g}{unit}, least of the last {lowest_last[key]:g}{unit}"
        ok = lowest_last[key] <= usual_first
        if key == "fds" and not ok:  # name what the extra fds point at
            usual = min(first, key=lambda s: abs(s[key] - usual_first))
            detail += (f" ({kinds_difference(usual['fd_kinds'], lowest_last['fd_kinds'])} between "
                       f"{usual['t_s']} s and {lowest_last['t_s']} s)")
        verdicts.append((f"{key} flat", ok, detail))
    # Frames reach the sink in each third of the whole run.
    k = max(1, len(samples) // 3)
    parts = [samples[:k + 1], samples[k:2 * k + 1], samples[2 * k:]]
    grew = [p[-1]["total_delivered"] > p[0]["total_delivered"] for p in parts if len(p) >= 2]
    verdicts.append(("frames delivered throughout", all(grew) and len(grew) == 3,
                     " ".join(str(p[-1]["total_delivered"]) for p in parts if p)))
    return verdicts


def main():
    a = parse_args()
    out = a.out or tempfile.mkdtemp(prefix="sluice-soak-")
    os.makedirs(out, exist_ok=True)
    work = tempfile.mkdtemp(prefix="sluice-soak-run-")
    sock = os.path.join(work, "control.sock")
    results = os.path.join(work, "results")
    config = os.path.join(work, "soak.yaml")
    write_pipeline(config, a, results)
    log = open(os.path.join(out, "sluiced.log"), "w")
    cmd = shlex.split(a.sluiced) + ["--config", config, "--socket", sock, "--drain-timeout", "30"]
    print("soak: " + " ".join(cmd), flush=True)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    failures = []
    samples = []
    load = None
    exit_status = None
    records = None
    final = None
    try:
        deadline = time.monotonic() + 60
        st = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                st = request(sock, {"request": "status"}, timeout=5)
                if st.get("ok") and st.get("state") == "running":
                    break
            except (OSError, ValueError):
                pass
            time.sleep(0.2)
        if proc.poll() is not None or not st or not st.get("ok"):
            print(f"soak: sluiced did not come up (exit {proc.poll()}); log: {log.name}", file=sys.stderr)
            sys.stdout.write(open(log.name).read()[-4000:])
            return 2

        load = Load(sock, a)
        load.start()
        start = time.monotonic()
        last_total = None
        csv_file = open(os.path.join(out, "samples.csv"), "w", newline="")
        columns = ["t_s", "warm", "rss_kib", "fds", "threads", "device_mib", "state", "generation", "produced", "delivered",
                   "dropped", "failed", "in_flight", "before_produced", "before_delivered", "before_dropped",
                   "before_failed", "total_produced", "total_delivered", "requests", "request_errors", "reloads_ok"]
        writer = csv.DictWriter(csv_file, fieldnames=columns, extrasaction="ignore")  # not fd_kinds
        writer.writeheader()
        next_sample = start
        while True:
            now = time.monotonic()
            if now - start > a.duration:
                break
            time.sleep(max(0.0, next_sample - now))
            next_sample += a.sample_every
            if proc.poll() is not None:
                failures.append(f"daemon died (exit {proc.returncode}) at {time.monotonic() - start:.0f} s")
                break
            with load.quiet.alone():
                time.sleep(0.05)  # the daemon closes what the last client left
                try:
                    t = time.monotonic() - start
                    s = {"t_s": round(t, 1), "warm": t >= a.warmup and load.warm_reloads_done.is_set(),
                         "rss_kib": rss_kib(proc.pid),
                         "fds": count_dir(f"/proc/{proc.pid}/fd"), "threads": count_dir(f"/proc/{proc.pid}/task"),
                         "fd_kinds": fd_kinds(proc.pid)}
                except OSError as e:
                    failures.append(f"daemon gone while sampling: {e}")
                    break
                try:
                    st = request(sock, {"request": "status"}, timeout=30)
                except (OSError, ValueError) as e:
                    failures.append(f"status at {s['t_s']} s: {e}")
                    continue
            s["device_mib"] = device_mib(proc.pid)
            if not st.get("ok"):
                failures.append(f"status at {s['t_s']} s: {st}")
                continue
            cur, before, total = ledger(st)
            s.update(state=st.get("state"), generation=st.get("generation"), **cur,
                     **{"before_" + k: v for k, v in before.items()},
                     total_produced=total["produced"], total_delivered=total["delivered"],
                     requests=load.requests, request_errors=load.error_count, reloads_ok=load.reloads_ok)
            for problem in ledger_problems(st, a.max_in_flight):
                failures.append(f"ledger at {s['t_s']} s: {problem}")
            if last_total:
                for k in ("produced", "delivered", "dropped", "failed"):
                    if total[k] < last_total[k]:
                        failures.append(f"ledger at {s['t_s']} s: total {k} went down {last_total[k]} -> {total[k]}")
            last_total = total
            samples.append(s)
            writer.writerow(s)
            csv_file.flush()
            print(f"soak {s['t_s']:7.1f}s rss {s['rss_kib'] / 1024:7.1f} MiB fds {s['fds']:3d} "
                  f"threads {s['threads']:3d} dev {s['device_mib'] if s['device_mib'] is not None else '-':>5} "
                  f"gen {s['generation']} delivered {s['total_delivered']} in flight {s['in_flight']} "
                  f"requests {s['requests']} errors {s['request_errors']}", flush=True)
        csv_file.close()
        load.finish()
        if load.error_count:
            failures.append(f"{load.error_count} control requests failed; first: {load.errors[:3]}")
        if proc.poll() is None:
            # Every frame counted delivered has its record on disk: pause, let the frames in flight settle, compare.
            request(sock, {"request": "pause"})
            end = time.monotonic() + 60
            while time.monotonic() < end:
                final = request(sock, {"request": "status"})
                if final["frames"]["in_flight"] == 0:
                    break
                time.sleep(0.2)
            cur, _, total = ledger(final)
            if cur["in_flight"] != 0:
                failures.append(f"{cur['in_flight']} frames still in flight 60 s after pause")
            expected_generation = 1 + load.reloads_ok
            if final.get("generation") != expected_generation:
                failures.append(f"generation {final.get('generation')} after {load.reloads_ok} reloads "
                                f"(expected {expected_generation})")
            request(sock, {"request": "stop"})
            try:
                exit_status = proc.wait(90)
            except subprocess.TimeoutExpired:
                failures.append("the daemon did not exit within 90 s of stop")
            if exit_status not in (None, 0):
                failures.append(f"the daemon exited {exit_status} after stop")
            # A batch the decode stage was assembling when the pause came may still go out after `status` said
            # nothing was in flight: the last generation's final count is the exit summary's, and the records
            # are counted once the daemon has exited.
            log.flush()
            last = exit_summary_ledger(os.path.join(out, "sluiced.log"))
            if last is None:
                failures.append("no frame ledger in the daemon's exit summary")
            else:
                produced, delivered, dropped, failed, in_flight = last
                if in_flight != 0 or produced != delivered + dropped + failed:
                    failures.append(f"exit summary ledger broken: {last}")
                before = final.get("frames_before_reload") or {}
                total = dict(total, delivered=before.get("delivered", 0) + delivered)
            records = count_records(results)
            if records != total["delivered"]:
                failures.append(f"{total['delivered']} frames counted delivered but {records} records on disk")
        elif not any("died" in f for f in failures):
            failures.append(f"daemon died (exit {proc.returncode})")
    except (OSError, ValueError, KeyError) as e:
        failures.append(f"soak driver: {type(e).__name__}: {e}")
    finally:
        if load:
            load.stop.set()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        log.close()
        shutil.rmtree(work, ignore_errors=True)

    verdicts = judge(samples, a) if samples else [("samples taken", False, "none")]
    warm = [s for s in samples if s["warm"]]
    failures += [f"{name}: {detail}" for name, ok, detail in verdicts if not ok]
    summary = {
        "ok": not failures,
        "failures": failures,
        "settings": {k: v for k, v in vars(a).items()},
        "rules": {
            "rss": f"median of the last third <= median of the first third + max({a.rss_tolerance}%, 4 MiB)"
                   + (" (not judged)" if a.no_rss_check else ""),
            "fds, threads, device_mib": "least of the last third <= median of the first third",
            "ledger": "every sample: produced = delivered + dropped + failed + in_flight (current), "
                      "produced = settled (earlier generations), totals never decrease",
            "end": "after pause: in_flight 0, records on disk = delivered, generation = 1 + reloads; exit 0 on stop",
        },
        "checks": [{"check": n, "ok": ok, "detail": d} for n, ok, d in verdicts],
        "samples": len(samples),
        "warm_from_s": warm[0]["t_s"] if warm else None,
        "requests": load.requests if load else 0,
        "request_errors": load.error_count if load else 0,
        "reloads_ok": load.reloads_ok if load else 0,
        "source_churn_ok": load.churn_ok if load else 0,
        "final_status_frames": final["frames"] if final else None,
        "frames_before_reload": final.get("frames_before_reload") if final else None,
        "records_on_disk": records,
        "exit_status": exit_status,
        "first_sample": samples[0] if samples else None,
        "last_sample": samples[-1] if samples else None,
    }
    with open(os.path.join(out, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2)
    lines = [f"sluice soak: {'PASS' if not failures else 'FAIL'} - {a.duration:g} s, {a.sources} sources at "
             f"{a.fps:g} fps, device {a.device}, reload every {a.reload_every:g} s, {a.clients} clients, "
             f"warm-up {a.warmup_reloads} reloads and {a.warmup:g} s (over at "
             f"{warm[0]['t_s'] if warm else '-'} s)",
             f"samples {len(samples)}, control requests {summary['requests']} ({summary['request_errors']} failed), "
             f"reloads {summary['reloads_ok']}, source add/remove {summary['source_churn_ok']}",
             f"delivered {records} records on disk; exit status {exit_status}"]
    lines += [f"  {'ok  ' if ok else 'FAIL'} {n}: {d}" for n, ok, d in verdicts]
    lines += [f"  FAIL {f}" for f in failures if not any(f.startswith(n + ":") for n, _, _ in verdicts)]
    lines.append(f"files: {out}/samples.csv summary.json summary.txt sluiced.log")
    text = "\n".join(lines) + "\n"
    with open(os.path.join(out, "summary.txt"), "w") as f:
        f.write(text)
    sys.stdout.write(text)
    return 0 if not failures else 1


if __name__ == "__main__":
    sys.exit(main())
