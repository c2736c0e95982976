#!/usr/bin/env python3
"""redis_jobs_test.py SLUICED SLUICECTL: one job shared by three sluiced through a Redis stream (issue 16).

A real redis-server (append-only file, fsync at every write) on a free loopback port; 240 small real video files
(64x48 H.264 in MP4, 2 to 4 frames each, every file different: one ffmpeg run cuts a test pattern into them)
plus poisoned entries (a corrupt image, a truncated MP4, a path that does not exist, a relative path, an entry
without `input`), submitted with `sluicectl jobs submit`; three `sluiced run` processes in one consumer group
(decode `uri: redis://...?group=workers&until_empty=true`).

(a) kill -9 of one instance mid-job (a directory sink each: one result file per input): the others take over
    its pending entries (XAUTOCLAIM after claim_idle_s) and the job ends. Every input has its result, with as
    many frames as its video holds; no input is processed twice by the survivors; an input with a result from
    the killed instance and from a survivor is one the killed instance had not yet acknowledged when it died
    (its result file, and maybe its ledger line, were written before the kill), redone into the same result. Every entry is acknowledged exactly once
    (the sources' counts: 240 done, 5 dead-lettered; nothing pending); the dead letters carry the reason for
    each poisoned entry. `sluicectl jobs status` says the same.
(b) redis-server restarted mid-job, with the results of two workers going to a Redis stream (the redis sink)
    and the third's to a directory: the sources and the sinks reconnect; every input exactly once across the
    result stream and the directory, each of its frames once (stream records: one per frame, input_frame
    0..n-1), every entry acknowledged exactly once, nothing pending.
(c) `sluicectl jobs requeue-dead` puts the dead letters with an input back; a worker dead-letters them again
    (they are still broken), the one without an input stays where it was.
(d) per-input options (`sluicectl jobs submit --option ...`, or fields of an entry): max_frames and fit are
    honoured and recorded in the result and the job ledger; an unknown option or a bad value is a dead letter
    naming it, which requeue-dead leaves; the same input with the same options again is not redone, without
    them it is (another request), its result replaced.
(e) redis-server stopped for longer than claim_idle_s and the redis sink's write_retry_s while three live workers
    hold entries (issue 33): each writes result files and, through a tee, records to a stream. Every input has
    one result file and one ledger `done` line among them (nobody takes over a live worker's entries after the
    outage, nobody commits an entry it lost), the stream holds each frame once (a redo appends only what is
    missing), every worker exits 0, the job stream is trimmed, and `sluicectl jobs status` shows the workers gone
    with their counts. Resubmitted, the inputs are skipped by a new worker (done by the group), not redone.
No timing assertions: waits are bounded, the rate limit only keeps the job long enough to be cut mid-way.
"""
import glob
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/
import daemon_client  # noqa: E402
import redis_fixture  # noqa: E402

sluiced, sluicectl = sys.argv[1:3]
tmp, failures, procs, check, wait_for = daemon_client.session("sluice-redis-jobs-", 60.0)
N = 240


redis = redis_fixture.RedisServer(os.path.join(tmp, "redis"), appendonly=True)
port = redis.port
cli = redis.cli
start_redis = redis.start
stop_redis = redis.stop


# --- inputs: tiny real videos, a corrupt image and a truncated video ----------------------------------------
inputs_dir = os.path.join(tmp, "inputs")
os.makedirs(inputs_dir)
# One ffmpeg run writes all of them: a test pattern with temporal noise (every frame differs; the pattern alone
# repeats itself at this size), every frame a key frame, cut
# by the segment muxer after 2, 3 or 4 frames in turn, so every file is different and its frame count known.
clip_frames = [2 + i % 3 for i in range(N)]
cuts = [sum(clip_frames[:i + 1]) for i in range(N - 1)]
made = subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-nostdin", "-f", "lavfi", "-i",
                       "testsrc=size=64x48:rate=25,noise=alls=40:allf=t+u,format=yuv420p", "-frames:v", str(sum(clip_frames)),
                       "-c:v", "libx264", "-preset", "ultrafast", "-g", "1", "-f", "segment", "-segment_format", "mp4",
                       "-segment_frames", ",".join(map(str, cuts)), "-reset_timestamps", "1",
                       os.path.join(inputs_dir, "clip%03d.mp4")], capture_output=True, text=True)
if made.returncode != 0:
    raise SystemExit("ffmpeg could not make the test videos: " + made.stderr[-2000:])
valid = [os.path.join(inputs_dir, f"clip{i:03d}.mp4") for i in range(N)]
expected_frames = dict(zip(valid, clip_frames))


def mp4_sample_count(path):
    """The video's frame count as its MP4 index says (the sample count of its one track's stsz box)."""
    with open(path, "rb") as fh:
        data = fh.read()
    at = data.find(b"stsz")
    return int.from_bytes(data[at + 12:at + 16], "big") if at >= 4 else None


contents = set()
for path in valid:
    with open(path, "rb") as fh:
        contents.add(fh.read())
check(f"the {N} videos are all different", len(contents) == N, len(contents))
check("each video holds the frames it was cut to (2, 3 or 4)",
      all(mp4_sample_count(p) == expected_frames[p] for p in valid),
      [(p, mp4_sample_count(p), expected_frames[p]) for p in valid if mp4_sample_count(p) != expected_frames[p]][:5])
broken = os.path.join(inputs_dir, "broken.ppm")
with open(broken, "wb") as f:
    f.write(b"P6\nthis is not an image\n\x00\xff\xfe")
truncated = os.path.join(inputs_dir, "truncated.mp4")  # the first half of a video: its index (moov) is gone
with open(valid[1], "rb") as fh, open(truncated, "wb") as f:
    whole = fh.read()
    f.write(whole[:len(whole) // 2])
missing = os.path.join(tmp, "no-such-dir", "gone.mp4")
POISONED_FILES = 2  # broken.ppm and truncated.mp4, submitted with the directory


def pipeline(name, stream, consumer, out, state, result_stream=None, claim_idle_s=4, tee_stream=None):
    """A worker's pipeline: results to the directory `out`, or with result_stream to that Redis stream; with
    tee_stream to both `out` and that stream (a tee; the redis sink gives up on a batch after 1 s)."""
    sink = ({"type": "redis", "path": redis.uri(result_stream)} if result_stream
            else {"type": "directory", "path": out})
    if tee_stream:
        sink = f"""  - kind: tee
    branches:
    - - kind: sink
        type: directory
        name: files
        path: {out}
    - - kind: sink
        name: records
        type: redis
        path: {redis.uri(tee_stream)}
        write_retry_s: 1
"""
    uri = redis.uri(f"{stream}?group=workers&consumer={consumer}&until_empty=true&claim_idle_s={claim_idle_s}&count=2")
    path = daemon_client.write_pipeline(
        os.path.join(tmp, name + ".yaml"), name,
        {"uri": [uri], "width": 32, "height": 24, "format": "bgr8", "rate_limit": 40, "decode_threads": 2}, sink)
    return [sluiced, "run", path, "--state-dir", state, "--no-progress"]


def results(out):
    """input path -> result file, for the per-input results in `out` (one JSON file per input)."""
    got = {}
    for path in glob.glob(os.path.join(out, "*.json")):
        with open(path) as fh:
            r = json.load(fh)
        got.setdefault(r["input"], []).append(r)
    return got


def stream_results(stream):
    """input path -> the input_frame of each record the redis sinks wrote to `stream` (one record per frame)."""
    got = {}
    for fields in redis.entries(stream):
        record = json.loads(fields["record"])
        got.setdefault(record["input"], []).append(record["input_frame"])
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
          f"submitted {N + POISONED_FILES} input(s)" in rc.stdout, rc.stdout + rc.stderr)


def job_status(stream):
    return redis_fixture.job_status(sluicectl, redis.uri(f"{stream}?group=workers"), check, f"{stream}: ")


def dead_letters(stream):
    return redis.entries(stream + ":dead")


def ended_well(end):
    """Ended by itself: exit 0, or 1 when an input it took could not be read (a poisoned one, run's rule)."""
    rc, _, err = end
    return rc == 0 or (rc == 1 and any(name in err for name in ("broken.ppm", "truncated.mp4", "gone.mp4")))


def count_valid(outs, result_stream=None):
    """Inputs with results so far: files in the directories, and inputs with records in result_stream."""
    in_stream = stream_results(result_stream) if result_stream else {}
    return sum(1 for o in outs for i in results(o) if i in valid) + sum(1 for i in in_stream if i in valid)


def run_workers(tag, stream, cut, result_stream=None):
    """Three workers over `stream`; cut(workers) is called once some results exist. With result_stream, workers
    1 and 2 write their results to that Redis stream, worker 0 to its directory. Returns the workers'
    (rc, stdout, stderr), the output and state directories."""
    outs = [os.path.join(tmp, f"{tag}-out{k}") for k in range(3)]
    states = [os.path.join(tmp, f"{tag}-state{k}") for k in range(3)]
    workers = [daemon_client.start(procs, pipeline(f"{tag}{k}", stream, f"w{k}", outs[k], states[k],
                                                   result_stream if k > 0 else None)) for k in range(3)]
    reached = wait_for(lambda: count_valid(outs, result_stream) >= 50, 90, 0.05 if result_stream else 0.01)
    done_at_cut = count_valid(outs, result_stream)
    check(f"{tag}: the cut comes mid-job ({done_at_cut} of {N} results then)", reached and done_at_cut < N, done_at_cut)
    cut(workers)
    ends = [daemon_client.finish(w, 180, killed_rc=True) for w in workers]
    return ends, outs, states


# --- (a) kill -9 of one worker ----------------------------------------------------------------------------------
start_redis()
rc = subprocess.run([sluicectl, "jobs", "status", f"redis://127.0.0.1:{port}/jobs?group=workers"], capture_output=True,
                    text=True)
check("status before the job exists: exit 0, no such job yet", rc.returncode == 0 and "no such job yet" in rc.stdout,
      (rc.returncode, rc.stdout, rc.stderr))
submit("jobs")
cli("XADD", "jobs", "*", "input", missing)
cli("XADD", "jobs", "*", "input", "relative/clip.mp4")
cli("XADD", "jobs", "*", "path", "/srv/forgot-the-field.mp4")


held_by_killed = set()  # inputs of the entries w0 had not acknowledged when it died


def kill_first(workers):
    workers[0].kill()  # SIGKILL
    workers[0].wait()
    # Read at once: the survivors claim these only after claim_idle_s (4 s) of idleness.
    pending = cli("XPENDING", "jobs", "workers", "-", "+", 1000, "w0", json_out=True)
    for entry_id, *_ in pending:
        for _, fields in cli("XRANGE", "jobs", entry_id, entry_id, json_out=True):
            held_by_killed.add(dict(zip(fields[0::2], fields[1::2])).get("input"))


ends, outs, states = run_workers("a", "jobs", kill_first)
for k in (1, 2):
    check(f"a: survivor w{k} ends by itself (until_empty)", ended_well(ends[k]), (ends[k][0], ends[k][2][-2000:]))
check("a: a survivor took over entries of the killed one", any("took over" in e[2] for e in ends[1:]),
      [e[2][-800:] for e in ends[1:]])
killed, survivors = results(outs[0]), [results(outs[1]), results(outs[2])]
committed_by_killed = ledger_done(states[0])
missing_results = [i for i in valid if i not in killed and not any(i in s for s in survivors)]
check("a: every input has its result", not missing_results, missing_results[:5])
wrong_frames = [(i, r["frames"], r["delivered"], expected_frames[i]) for o in [killed] + survivors
                for i, rs in o.items() if i in expected_frames for r in rs
                if not r["frames"] == r["delivered"] == expected_frames[i]]
check("a: each result holds as many frames as its video, all delivered", not wrong_frames, wrong_frames[:5])
twice_by_survivors = [i for i in valid if sum(len(s.get(i, [])) for s in survivors) > 1]
check("a: no input was processed twice by the survivors", not twice_by_survivors, twice_by_survivors[:5])
redone = [i for i in valid if i in killed and any(i in s for s in survivors)]
# The killed worker's result file is renamed into place before its ledger line is written and before the entry
# is acknowledged: a kill between any two of these steps leaves an entry that a survivor rightly redoes.
unexplained = [i for i in redone if i not in held_by_killed]
check(f"a: an input with results from the killed worker and a survivor ({len(redone)}, "
      f"{len([i for i in redone if i in committed_by_killed])} in its ledger) is one the killed worker had not "
      "acknowledged", not unexplained, (unexplained[:5], sorted(held_by_killed)[:5]))
same = all(killed[i][0]["frames"] == s[i][0]["frames"] == expected_frames[i] and killed[i][0]["delivered"] == s[i][0]["delivered"]
           for i in redone for s in survivors if i in s)
check("a: such a redo wrote the same result", same)
st = job_status("jobs")
g = (st.get("groups") or [{}])[0]
check("a: every entry acknowledged exactly once: 240 done, 5 dead-lettered, none pending",
      (g.get("done"), g.get("dead"), g.get("pending")) == (N, 5, 0), g)
consumers = {c["consumer"]: c for c in g.get("consumers", [])}
check("a: the killed consumer holds nothing any more", consumers.get("w0", {}).get("pending") == 0, consumers)
check("a: the survivors acknowledged the rest", consumers.get("w1", {}).get("done", 0) +
      consumers.get("w2", {}).get("done", 0) + consumers.get("w0", {}).get("done", 0) == N, consumers)
dead = {d.get("input", ""): d for d in dead_letters("jobs")}
check("a: five dead letters", len(dead) == 5, list(dead))
check("a: the corrupt image is dead-lettered with the reader's reason",
      broken in dead and dead[broken]["reason"] != "" and dead[broken]["entry"] != "", dead.get(broken))
check("a: the truncated video is dead-lettered with the reader's reason",
      truncated in dead and dead[truncated]["reason"] != "" and dead[truncated]["entry"] != "", dead.get(truncated))
check("a: the missing path is dead-lettered with the reason", dead.get(missing, {}).get("reason", "") != "",
      dead.get(missing))
check("a: the relative path is dead-lettered: not an absolute path",
      "not an absolute path" in dead.get("relative/clip.mp4", {}).get("reason", ""), dead.get("relative/clip.mp4"))
check("a: the entry without `input` is dead-lettered saying so", "no field 'input'" in dead.get("", {}).get("reason", ""),
      dead.get(""))

# --- (c) requeue-dead: back into the stream, dead-lettered again ------------------------------------------------
rc = subprocess.run([sluicectl, "jobs", "requeue-dead", f"redis://127.0.0.1:{port}/jobs"], capture_output=True, text=True)
check("c: requeue-dead moves the four with an input", rc.returncode == 0 and "requeued 4 " in rc.stdout,
      rc.stdout + rc.stderr)
check("c: the one without an input stays a dead letter", len(dead_letters("jobs")) == 1, dead_letters("jobs"))
w = daemon_client.start(procs, pipeline("c", "jobs", "w9", os.path.join(tmp, "c-out"), os.path.join(tmp, "c-state")))
rc_c, _, err_c = daemon_client.finish(w, 120, killed_rc=True)
check("c: a worker takes them and ends", ended_well((rc_c, "", err_c)), (rc_c, err_c[-1500:]))
check("c: still broken, they are dead letters again", len(dead_letters("jobs")) == 5, dead_letters("jobs"))
check("c: nothing pending", job_status("jobs").get("groups", [{}])[0].get("pending") == 0)

# --- (b) redis-server restarted mid-job, results of two workers going to a Redis stream -----------------------
submit("jobs-b")


def restart_redis(workers):
    stop_redis()
    time.sleep(0.5)  # the workers find it gone (not a measurement: any gap will do)
    start_redis()


ends, outs, states = run_workers("b", "jobs-b", restart_redis, result_stream="results-b")
for k in range(3):
    check(f"b: worker w{k} ends by itself", ended_well(ends[k]), (ends[k][0], ends[k][2][-2000:]))
check("b: the sources saw the server go and come back", any("connected again" in e[2] for e in ends),
      [e[2][-600:] for e in ends])
# A redis sink that writes after the restart finds its connection dead, reconnects and logs that it works again.
check("b: the redis sinks reconnected after the restart", all("works again" in e[2] for e in ends[1:]),
      [e[2][-600:] for e in ends[1:]])
in_directory = results(outs[0])
in_stream = stream_results("results-b")
per_input = {i: len(in_directory.get(i, [])) + (1 if i in in_stream else 0) for i in valid}
check("b: every input exactly once across the result stream and the directory",
      all(n == 1 for n in per_input.values()), {i: n for i, n in per_input.items() if n != 1})
check("b: the workers writing to the stream did some of the inputs", len(in_stream) > 0, len(in_stream))
wrong_stream_frames = {i: sorted(f) for i, f in in_stream.items()
                       if i in expected_frames and sorted(f) != list(range(expected_frames[i]))}
check("b: each input's frames are in the stream once each (input_frame 0..n-1, n the video's frames)",
      not wrong_stream_frames, list(wrong_stream_frames.items())[:5])
check("b: nothing but the job's inputs in the stream", set(in_stream) <= set(valid), set(in_stream) - set(valid))
wrong_frames = [(i, r["frames"], r["delivered"]) for i, rs in in_directory.items() if i in expected_frames for r in rs
                if not r["frames"] == r["delivered"] == expected_frames[i]]
check("b: each directory result holds as many frames as its video", not wrong_frames, wrong_frames[:5])
g = (job_status("jobs-b").get("groups") or [{}])[0]
check("b: every entry acknowledged exactly once: 240 done, 2 dead-lettered, none pending",
      (g.get("done"), g.get("dead"), g.get("pending")) == (N, POISONED_FILES, 0), g)

# --- (e) an outage longer than claim_idle_s and write_retry_s, no kill (issue 33, items 9 and 10) -------------
# Every worker is cut off at once while holding entries; when the server is back their entries are idle past
# claim_idle_s. A worker must not take over entries that live workers still process (nor commit one it lost),
# and a redis sink whose batches failed in the outage must not write an input's records twice when the input
# is redone. Each worker writes a result file per input and, through a tee, a record per frame to one stream.
E = 60
e_inputs = valid[:E]
rc = subprocess.run([sluicectl, "jobs", "submit", f"redis://127.0.0.1:{port}/jobs-e"] + e_inputs,
                    capture_output=True, text=True)
check("e: submit", rc.returncode == 0, rc.stdout + rc.stderr)
e_outs = [os.path.join(tmp, f"e-out{k}") for k in range(3)]
e_states = [os.path.join(tmp, f"e-state{k}") for k in range(3)]
e_workers = [daemon_client.start(procs, pipeline(f"e{k}", "jobs-e", f"w{k}", e_outs[k], e_states[k], claim_idle_s=2,
                                                 tee_stream="results-e")) for k in range(3)]


def e_count():
    return sum(1 for o in e_outs for i in results(o))


reached = wait_for(lambda: e_count() >= 12, 90, 0.02)
check(f"e: the outage comes mid-job ({e_count()} of {E} results then)", reached and e_count() < E, e_count())
stop_redis()
time.sleep(5)  # longer than claim_idle_s (2 s) and write_retry_s (1 s): held entries go idle, batches give up
start_redis()
e_ends = [daemon_client.finish(w, 180, killed_rc=True) for w in e_workers]
for k in range(3):
    check(f"e: worker w{k} ends by itself with exit 0 (every input it took ended delivered)", e_ends[k][0] == 0,
          (e_ends[k][0], e_ends[k][2][-2500:]))
e_files = [results(o) for o in e_outs]
e_count_per_input = {i: sum(len(f.get(i, [])) for f in e_files) for i in e_inputs}
check("e: every input has exactly one result file among the three workers",
      all(n == 1 for n in e_count_per_input.values()), {i: n for i, n in e_count_per_input.items() if n != 1})
e_stream = stream_results("results-e")
e_twice = {i: sorted(e_stream.get(i, [])) for i in e_inputs if sorted(e_stream.get(i, [])) != list(range(expected_frames[i]))}
check("e: the stream holds each frame of each input once (a redo does not write a record again)",
      not e_twice, list(e_twice.items())[:5])
e_done_lines = {}
for st in e_states:
    for path in glob.glob(os.path.join(st, "jobs", "*.ledger")):
        for line in open(path):
            entry = json.loads(line)
            if entry["status"] == "done":
                e_done_lines[entry["input"]] = e_done_lines.get(entry["input"], 0) + 1
check("e: one ledger `done` line per input among the three workers",
      all(e_done_lines.get(i) == 1 for i in e_inputs), {i: e_done_lines.get(i) for i in e_inputs if e_done_lines.get(i) != 1})
g = (job_status("jobs-e").get("groups") or [{}])[0]
check(f"e: every entry acknowledged once: {E} done, none dead, none pending",
      (g.get("done"), g.get("dead"), g.get("pending")) == (E, 0, 0), g)
check("e: the job stream was trimmed to its last delivered entry (issue 33 item 12)", cli("XLEN", "jobs-e") == "1",
      cli("XLEN", "jobs-e"))
e_consumers = {c["consumer"]: c for c in g.get("consumers", [])}
check("e: status: the three workers ended and left the group, their done counts add up, nothing in progress",
      sorted(e_consumers) == ["w0", "w1", "w2"] and all(c["state"] == "gone" for c in e_consumers.values()) and
      sum(c["done"] for c in e_consumers.values()) == E and g.get("in_progress") == 0 and g.get("read_ahead") == 0
      and g.get("in_progress_inputs") == [] and g.get("rate_per_s") is not None, g)

# Resubmitted: a new worker (its own ledger empty) redoes none of the inputs the others finished.
rc = subprocess.run([sluicectl, "jobs", "submit", f"redis://127.0.0.1:{port}/jobs-e"] + e_inputs,
                    capture_output=True, text=True)
check("e: resubmit", rc.returncode == 0, rc.stdout + rc.stderr)
w = daemon_client.start(procs, pipeline("e3", "jobs-e", "w3", os.path.join(tmp, "e-out3"), os.path.join(tmp, "e-state3"),
                                        claim_idle_s=2, tee_stream="results-e"))
rc_e3, _, err_e3 = daemon_client.finish(w, 120, killed_rc=True)
check("e: a new worker ends by itself", rc_e3 == 0, (rc_e3, err_e3[-1500:]))
check("e: it redid none of the inputs the group had done", not results(os.path.join(tmp, "e-out3")),
      sorted(results(os.path.join(tmp, "e-out3")))[:5])
g = (job_status("jobs-e").get("groups") or [{}])[0]
check(f"e: the resubmitted entries are counted skipped, not done again: {E} done, {E} skipped",
      (g.get("done"), g.get("skipped"), g.get("pending")) == (E, E, 0), g)

# --- (d) per-input options: honoured, recorded, told apart; refused ones dead-lettered, not requeued -----------
d_inputs = valid[:6]  # 2, 3, 4, 2, 3, 4 frames
d_out, d_state = os.path.join(tmp, "d-out"), os.path.join(tmp, "d-state")


def submit_d(options, inputs, what):
    args = [sluicectl, "jobs", "submit", f"redis://127.0.0.1:{port}/jobs-d"]
    for o in options:
        args += ["--option", o]
    rc = subprocess.run(args + inputs, capture_output=True, text=True)
    check(f"d: submit {what}", rc.returncode == 0 and f"submitted {len(inputs)} input(s)" in rc.stdout,
          rc.stdout + rc.stderr)


def run_d(tag):
    w = daemon_client.start(procs, pipeline("d", "jobs-d", "wd", d_out, d_state))
    rc, _, err = daemon_client.finish(w, 120, killed_rc=True)
    check(f"d: {tag}: the worker ends by itself", rc == 0, (rc, err[-1500:]))
    return err


bad = subprocess.run([sluicectl, "jobs", "submit", f"redis://127.0.0.1:{port}/jobs-d", "--option", "fit=sideways",
                      d_inputs[0]], capture_output=True, text=True)
check("d: submit refuses a bad option before adding anything", bad.returncode == 2 and
      "'fit' is 'sideways'" in bad.stderr and cli("XLEN", "jobs-d") == "0", (bad.returncode, bad.stderr))
submit_d(["max_frames=2", "fit=letterbox"], d_inputs, "six inputs with options")
cli("XADD", "jobs-d", "*", "input", d_inputs[0], "fit", "sideways")
cli("XADD", "jobs-d", "*", "input", d_inputs[1], "rate_limit", "5")
run_d("first run")
got = results(d_out)
wrong = [(i, [(r.get("options"), r["frames"], r["delivered"]) for r in got.get(i, [])]) for i in d_inputs
         if [(r.get("options"), r["frames"], r["delivered"]) for r in got.get(i, [])] != [("fit=letterbox max_frames=2", 2, 2)]]
check("d: each input's result says its options and holds max_frames=2 frames", not wrong, wrong)
ledger_options = {json.loads(l)["input"]: json.loads(l).get("options") for p in glob.glob(os.path.join(d_state, "jobs", "*.ledger"))
                  for l in open(p) if json.loads(l)["status"] == "done"}
check("d: the job ledger records the options", all(ledger_options.get(i) == "fit=letterbox max_frames=2" for i in d_inputs),
      ledger_options)
d_dead = dead_letters("jobs-d")
reasons = sorted(d.get("reason", "") for d in d_dead)
check("d: the two entries with options it cannot honour are dead letters naming the option",
      len(d_dead) == 2 and "'fit' is 'sideways'" in " ".join(reasons) and "unknown option 'rate_limit'" in " ".join(reasons)
      and all(d.get("options_rejected") == "1" for d in d_dead), d_dead)
rc = subprocess.run([sluicectl, "jobs", "requeue-dead", f"redis://127.0.0.1:{port}/jobs-d"], capture_output=True, text=True)
check("d: requeue-dead leaves letters whose options were refused", rc.returncode == 0 and "requeued 0 " in rc.stdout and
      "2 whose options were refused stay" in rc.stdout and len(dead_letters("jobs-d")) == 2, rc.stdout + rc.stderr)


def result_stamps():
    """input -> modification time of its result file."""
    return {json.load(open(p))["input"]: os.stat(p).st_mtime_ns for p in glob.glob(os.path.join(d_out, "*.json"))}


stamps = result_stamps()
submit_d(["fit=letterbox", "max_frames=2"], d_inputs[:3], "three again with the same options")
submit_d([], d_inputs[2:3], "one again without options")
err = run_d("second run")
got = results(d_out)
after = result_stamps()
check("d: the same input with the same options is not done again (its result untouched)",
      all(after.get(i) == stamps.get(i) is not None for i in d_inputs[:2]), (stamps, after))
redone = got.get(d_inputs[2], [{}])
check("d: without the options it is another request: done again, all its frames, the result replaced",
      len(redone) == 1 and redone[0].get("options") is None and redone[0].get("frames") == expected_frames[d_inputs[2]],
      redone)
g = (job_status("jobs-d").get("groups") or [{}])[0]
check("d: every entry acknowledged: 7 done, 3 skipped (done before, not counted done again), 2 dead-lettered, none "
      "pending", (g.get("done"), g.get("skipped"), g.get("dead"), g.get("pending")) == (7, 3, 2, 0), g)

daemon_client.end_all(procs)
stop_redis()
daemon_client.conclude(failures, tmp)
