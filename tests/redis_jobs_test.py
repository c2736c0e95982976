#!/usr/bin/env python3
"""redis_jobs_test.py SLUICED SLUICECTL: one job shared by three sluiced through a Redis stream (issue 16).

A real redis-server (append-only file, fsync at every write) on a free loopback port; 240 small images plus
poisoned entries (a corrupt image, a path that does not exist, a relative path, an entry without `input`),
submitted with `sluicectl jobs submit`; three `sluiced run` processes in one consumer group (decode
`uri: redis://...?group=workers&until_empty=true`, one directory sink each: one result file per input).

(a) kill -9 of one instance mid-job: the others take over its pending entries (XAUTOCLAIM after claim_idle_s)
    and the job ends. Every input has its result; no input is processed twice by the survivors; an input with a
    result from the killed instance and from a survivor is one the killed instance had committed (its job
    ledger says done) but not yet acknowledged when it died, redone into the same result. Every entry is
    acknowledged exactly once (the sources' counts: 240 done, 4 dead-lettered; nothing pending); the dead
    letters carry the reason for each poisoned entry. `sluicectl jobs status` says the same.
(b) redis-server restarted mid-job: the sources reconnect; every input exactly once across the three result
    directories, every entry acknowledged exactly once, nothing pending.
(c) `sluicectl jobs requeue-dead` puts the dead letters with an input back; a worker dead-letters them again
    (they are still broken), the one without an input stays where it was.
No timing assertions: waits are bounded, the rate limit only keeps the job long enough to be cut mid-way.
"""
import glob
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/
import daemon_client  # noqa: E402

sluiced, sluicectl = sys.argv[1:3]
tmp = tempfile.mkdtemp(prefix="sluice-redis-jobs-")
failures = []
procs = []
check = daemon_client.checker(failures)
wait_for = daemon_client.waiter(60.0, 0.05)
N = 240


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


port = free_port()
redis_dir = os.path.join(tmp, "redis")
os.makedirs(redis_dir)
redis_proc = None


def cli(*args, json_out=False):
    cmd = ["redis-cli", "-p", str(port)] + (["-2", "--json"] if json_out else ["--raw"]) + [str(a) for a in args]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out) if json_out else out.strip()


def start_redis():
    global redis_proc
    redis_proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", redis_dir,
                                   "--save", "", "--appendonly", "yes", "--appendfsync", "always", "--daemonize",
                                   "no", "--logfile", os.path.join(redis_dir, "redis.log")])

    def up():
        return subprocess.run(["redis-cli", "-p", str(port), "PING"], capture_output=True, text=True).stdout.strip() == "PONG"

    if not wait_for(up, 20, 0.05):
        raise SystemExit("redis-server did not come up")


def stop_redis():
    redis_proc.terminate()  # SIGTERM: it finishes the append-only file and exits
    redis_proc.wait(timeout=30)


# --- inputs: tiny PPM images, and a corrupt one ---------------------------------------------------------------
inputs_dir = os.path.join(tmp, "inputs")
os.makedirs(inputs_dir)
valid = []
for i in range(N):
    path = os.path.join(inputs_dir, f"img{i:03d}.ppm")
    with open(path, "wb") as f:
        f.write(b"P6\n16 12\n255\n" + bytes([(i * 7 + k) % 256 for k in range(16 * 12 * 3)]))
    valid.append(path)
broken = os.path.join(inputs_dir, "broken.ppm")
with open(broken, "wb") as f:
    f.write(b"P6\nthis is not an image\n\x00\xff\xfe")
missing = os.path.join(tmp, "no-such-dir", "gone.ppm")


def pipeline(name, stream, consumer, out, state):
    uri = (f"redis://127.0.0.1:{port}/{stream}?group=workers&consumer={consumer}&until_empty=true"
           f"&claim_idle_s=4&count=2")
    path = os.path.join(tmp, name + ".yaml")
    with open(path, "w") as f:
        f.write(f"""name: {name}
device: cpu
batch_size: 4
batch_timeout_ms: 5
stages:
  - kind: decode
    uri: ["{uri}"]
    width: 32
    height: 24
    format: bgr8
    rate_limit: 40
    decode_threads: 2
  - kind: upload
  - kind: preprocess
    width: 16
    height: 16
  - kind: download
  - kind: sink
    type: directory
    path: {out}
""")
    return [sluiced, "run", path, "--state-dir", state, "--no-progress"]


def results(out):
    """input path -> result file, for the per-input results in `out` (one JSON file per input)."""
    got = {}
    for path in glob.glob(os.path.join(out, "*.json")):
        with open(path) as fh:
            r = json.load(fh)
        got.setdefault(r["input"], []).append(r)
    return got


def ledger_done(state):
    done = set()
    for path in glob.glob(os.path.join(state, "jobs", "*.ledger")):
        for line in open(path):
            e = json.loads(line)
            if e["status"] == "done":
                done.add(e["input"])
    return done


def submit(stream):
    rc = subprocess.run([sluicectl, "jobs", "submit", f"redis://127.0.0.1:{port}/{stream}", inputs_dir],
                        capture_output=True, text=True)
    check(f"{stream}: sluicectl jobs submit adds the directory's inputs", rc.returncode == 0 and
          f"submitted {N + 1} input(s)" in rc.stdout, rc.stdout + rc.stderr)


def job_status(stream):
    rc = subprocess.run([sluicectl, "jobs", "status", f"redis://127.0.0.1:{port}/{stream}?group=workers", "--json"],
                        capture_output=True, text=True)
    check(f"{stream}: sluicectl jobs status answers", rc.returncode == 0, rc.stderr)
    return json.loads(rc.stdout) if rc.returncode == 0 else {}


def dead_letters(stream):
    entries = cli("XRANGE", stream + ":dead", "-", "+", json_out=True)
    out = []
    for _, fields in entries:
        out.append(dict(zip(fields[0::2], fields[1::2])))
    return out


def ended_well(end):
    """Ended by itself: exit 0, or 1 when an input it took could not be read (a poisoned one, run's rule)."""
    rc, _, err = end
    return rc == 0 or (rc == 1 and ("broken.ppm" in err or "gone.ppm" in err))


def count_valid(outs):
    return sum(1 for o in outs for i in results(o) if i in valid)


def run_workers(tag, stream, cut):
    """Three workers over `stream`; cut(workers) is called once some results exist. Returns the workers'
    (rc, stderr), the output and state directories."""
    outs = [os.path.join(tmp, f"{tag}-out{k}") for k in range(3)]
    states = [os.path.join(tmp, f"{tag}-state{k}") for k in range(3)]
    workers = [daemon_client.start(procs, pipeline(f"{tag}{k}", stream, f"w{k}", outs[k], states[k])) for k in range(3)]
    reached = wait_for(lambda: count_valid(outs) >= 50, 90, 0.01)
    done_at_cut = count_valid(outs)
    check(f"{tag}: the cut comes mid-job ({done_at_cut} of {N} results then)", reached and done_at_cut < N, done_at_cut)
    cut(workers)
    ends = [daemon_client.finish(w, 180, killed_rc=True) for w in workers]
    return ends, outs, states


# --- (a) kill -9 of one worker ----------------------------------------------------------------------------------
start_redis()
submit("jobs")
cli("XADD", "jobs", "*", "input", missing)
cli("XADD", "jobs", "*", "input", "relative/clip.ppm")
cli("XADD", "jobs", "*", "path", "/srv/forgot-the-field.ppm")


def kill_first(workers):
    workers[0].kill()  # SIGKILL
    workers[0].wait()


ends, outs, states = run_workers("a", "jobs", kill_first)
for k in (1, 2):
    check(f"a: survivor w{k} ends by itself (until_empty)", ended_well(ends[k]), (ends[k][0], ends[k][2][-2000:]))
check("a: a survivor took over entries of the killed one", any("took over" in e[2] for e in ends[1:]),
      [e[2][-800:] for e in ends[1:]])
killed, survivors = results(outs[0]), [results(outs[1]), results(outs[2])]
committed_by_killed = ledger_done(states[0])
missing_results = [i for i in valid if i not in killed and not any(i in s for s in survivors)]
check("a: every input has its result", not missing_results, missing_results[:5])
twice_by_survivors = [i for i in valid if sum(len(s.get(i, [])) for s in survivors) > 1]
check("a: no input was processed twice by the survivors", not twice_by_survivors, twice_by_survivors[:5])
redone = [i for i in valid if i in killed and any(i in s for s in survivors)]
unexplained = [i for i in redone if i not in committed_by_killed]
check(f"a: an input with results from the killed worker and a survivor ({len(redone)}) is one the killed worker "
      "had committed but not acknowledged", not unexplained, unexplained[:5])
same = all(killed[i][0]["frames"] == s[i][0]["frames"] == 1 and killed[i][0]["delivered"] == s[i][0]["delivered"]
           for i in redone for s in survivors if i in s)
check("a: such a redo wrote the same result", same)
st = job_status("jobs")
g = (st.get("groups") or [{}])[0]
check("a: every entry acknowledged exactly once: 240 done, 4 dead-lettered, none pending",
      (g.get("done"), g.get("dead"), g.get("pending")) == (N, 4, 0), g)
consumers = {c["consumer"]: c for c in g.get("consumers", [])}
check("a: the killed consumer holds nothing any more", consumers.get("w0", {}).get("pending") == 0, consumers)
check("a: the survivors acknowledged the rest", consumers.get("w1", {}).get("done", 0) +
      consumers.get("w2", {}).get("done", 0) + consumers.get("w0", {}).get("done", 0) == N, consumers)
dead = {d.get("input", ""): d for d in dead_letters("jobs")}
check("a: four dead letters", len(dead) == 4, list(dead))
check("a: the corrupt image is dead-lettered with the reader's reason",
      broken in dead and dead[broken]["reason"] != "" and dead[broken]["entry"] != "", dead.get(broken))
check("a: the missing path is dead-lettered with the reason", dead.get(missing, {}).get("reason", "") != "",
      dead.get(missing))
check("a: the relative path is dead-lettered: not an absolute path",
      "not an absolute path" in dead.get("relative/clip.ppm", {}).get("reason", ""), dead.get("relative/clip.ppm"))
check("a: the entry without `input` is dead-lettered saying so", "no field 'input'" in dead.get("", {}).get("reason", ""),
      dead.get(""))

# --- (c) requeue-dead: back into the stream, dead-lettered again ------------------------------------------------
rc = subprocess.run([sluicectl, "jobs", "requeue-dead", f"redis://127.0.0.1:{port}/jobs"], capture_output=True, text=True)
check("c: requeue-dead moves the three with an input", rc.returncode == 0 and "requeued 3 " in rc.stdout,
      rc.stdout + rc.stderr)
check("c: the one without an input stays a dead letter", len(dead_letters("jobs")) == 1, dead_letters("jobs"))
w = daemon_client.start(procs, pipeline("c", "jobs", "w9", os.path.join(tmp, "c-out"), os.path.join(tmp, "c-state")))
rc_c, _, err_c = daemon_client.finish(w, 120, killed_rc=True)
check("c: a worker takes them and ends", ended_well((rc_c, "", err_c)), (rc_c, err_c[-1500:]))
check("c: still broken, they are dead letters again", len(dead_letters("jobs")) == 4, dead_letters("jobs"))
check("c: nothing pending", job_status("jobs").get("groups", [{}])[0].get("pending") == 0)

# --- (b) redis-server restarted mid-job -------------------------------------------------------------------------
submit("jobs-b")


def restart_redis(workers):
    stop_redis()
    time.sleep(0.5)  # the workers find it gone (not a measurement: any gap will do)
    start_redis()


ends, outs, states = run_workers("b", "jobs-b", restart_redis)
for k in range(3):
    check(f"b: worker w{k} ends by itself", ended_well(ends[k]), (ends[k][0], ends[k][2][-2000:]))
check("b: the workers saw the server go and come back", any("connected again" in e[2] for e in ends),
      [e[2][-600:] for e in ends])
per_input = {i: sum(len(results(o).get(i, [])) for o in outs) for i in valid}
check("b: every input exactly once across the three result directories",
      all(n == 1 for n in per_input.values()), {i: n for i, n in per_input.items() if n != 1})
g = (job_status("jobs-b").get("groups") or [{}])[0]
check("b: every entry acknowledged exactly once: 240 done, 1 dead-lettered, none pending",
      (g.get("done"), g.get("dead"), g.get("pending")) == (N, 1, 0), g)

daemon_client.end_all(procs)
stop_redis()
if failures:
    print(f"{len(failures)} check(s) failed; files kept in {tmp}")
    sys.exit(1)
shutil.rmtree(tmp, ignore_errors=True)
print("all checks passed")
