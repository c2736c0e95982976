#!/usr/bin/env python3
"""resume_full_disk_test.py SLUICED: a job killed on a nearly full disk resumes (issue 33). Drives the real
`sluiced run` (cpu build with the media library, a few seconds; mounts a small tmpfs, so it needs root: without
it the test exits 77, which CTest reports as skipped).

A directory job (many images with long names, then videos) writes one jsonl per-run file on a 1 MiB tmpfs. It is
killed (-9) while the last video's records are being written; the tmpfs is then filled until less room is left than
the file takes (what copying it needed) but enough for that video's records. The resumed run must take the
interrupted video's records out without that room, finish with every input's records exactly once and leave no
temporary or redo record behind. Two shapes:
  cut   one video last: its records are the file's last ones, which is cut back.
  redo  a short video decoded beside the long one finishes (done) while the long one goes on: records to keep
        follow the first one to go, so they are saved in a redo record and written again.
"""
import glob
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
import daemon_client  # noqa: E402

sluiced = sys.argv[1]
tmp = tempfile.mkdtemp(prefix="sluice-resume-full-")
failures = []
procs = []
_check = daemon_client.checker(failures)
wait_for = daemon_client.waiter(20.0, 0.01)
IMAGES = 120


def check(name, cond, detail=""):
    return _check(name, cond, str(detail)[-1500:])


disk = os.path.join(tmp, "disk")
os.makedirs(disk)
mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", disk], capture_output=True, text=True)
if mounted.returncode != 0:
    print(f"skip: cannot mount a tmpfs here ({mounted.stderr.strip()})", flush=True)
    sys.exit(77)


def records(path):
    with open(path, "rb") as f:
        data = f.read()
    return [json.loads(l) for l in data.split(b"\n") if l.strip()]


def free_bytes(path):
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def ffmpeg(args):
    subprocess.run(["ffmpeg", "-hide_banner", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i", *args],
                   check=True)


def scenario(name, videos):
    """videos: [(file name, frames)], the last one is the one the kill interrupts."""
    job = os.path.join(tmp, name)
    os.makedirs(job)
    for video, frames in videos:
        ffmpeg(["testsrc2=size=64x48:rate=24", "-frames:v", str(frames), "-c:v", "libx264", "-preset", "ultrafast",
                os.path.join(job, video)])
    first_png = os.path.join(tmp, "first.png")
    if not os.path.exists(first_png):
        ffmpeg(["testsrc2=size=64x48", "-frames:v", "1", first_png])
    for i in range(IMAGES):  # long names: the images' records are most of the file
        with open(first_png, "rb") as src, open(os.path.join(job, f"{i:03d}-" + "x" * 180 + ".png"), "wb") as dst:
            dst.write(src.read())
    for n in os.listdir(disk):
        os.remove(os.path.join(disk, n))
    out = os.path.join(disk, "out.jsonl")
    state = os.path.join(tmp, name + "-state")
    config = os.path.join(tmp, name + ".yaml")
    with open(config, "w") as f:
        f.write(f"""name: full
device: cpu
batch_size: 4
batch_timeout_ms: 5
stages:
  - kind: decode
    uri: [{job}]
    width: 64
    height: 48
    format: bgr8
    rate_limit: 60
    decode_threads: 2
  - kind: sink
    type: jsonl
    per: run
    path: {out}
""")
    last, last_frames = os.path.join(job, videos[-1][0]), videos[-1][1]
    others = [os.path.join(job, v) for v, _ in videos[:-1]]

    def ledger():
        return [json.loads(l) for p in glob.glob(os.path.join(state, "jobs", "*.ledger")) for l in open(p) if l.strip()]

    def interrupted_now():
        done = {r["input"] for r in ledger() if r["status"] == "done"}
        return all(o in done for o in others) and sum(1 for r in records(out) if r.get("input") == last) >= 6

    run = [sluiced, "run", config, "--state-dir", state, "--no-progress"]
    first = daemon_client.start(procs, run)
    caught = wait_for(interrupted_now)
    os.kill(first.pid, signal.SIGKILL)
    daemon_client.finish(first, 10)
    got = records(out)
    check(f"{name}: the first run was killed while the last video's records were written",
          caught and 0 < sum(1 for r in got if r.get("input") == last) < last_frames, len(got))
    check(f"{name}: the ledger says it started and not done",
          [r["status"] for r in ledger() if r["input"] == last] == ["started"], ledger()[-3:])

    # Fill the disk: less room than the file (a copy of it cannot be made), enough for the video's records again
    # and for the records saved in a redo record.
    size = os.path.getsize(out)
    with open(out, "rb") as f:
        lines = [l for l in f.read().split(b"\n") if l]
    video_record = max(len(l) + 1 for l in lines if json.loads(l).get("input") in [last] + others)
    leave = (last_frames + sum(v for _, v in videos[:-1])) * video_record + 16384
    check(f"{name}: the test leaves less room than the file takes", leave < size, (leave, size))
    filler = os.open(os.path.join(disk, "filler"), os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(filler, b"\0" * 4096) > 0:
            pass
    except OSError:
        pass
    os.ftruncate(filler, max(0, os.fstat(filler).st_size - leave))
    os.close(filler)
    check(f"{name}: the disk has less room than the file takes", free_bytes(disk) < size, (free_bytes(disk), size))

    rc, _, err = daemon_client.finish(daemon_client.start(procs, run), 60)
    check(f"{name}: the resumed run completes (exit 0)", rc == 0, (rc, err))
    redone = "completed from its redo record" in err
    check(f"{name}: " + ("the records to keep were saved in a redo record and written again" if name == "redo"
                         else "the file was cut back"), redone == (name == "redo"), err)
    by_input = {}
    for r in records(out):
        by_input.setdefault(r.get("input"), []).append(r["input_frame"])
    check(f"{name}: every image's record is there once",
          sum(1 for k, v in by_input.items() if k.endswith(".png") and v == [0]) == IMAGES,
          {k: v for k, v in by_input.items() if k.endswith(".png") and v != [0]})
    for video, frames in videos:
        path = os.path.join(job, video)
        check(f"{name}: {video}'s records are there exactly once", sorted(by_input.get(path, [])) == list(range(frames)),
              sorted(by_input.get(path, [])))
    leftovers = [n for n in os.listdir(disk) if ".sluice-tmp" in n or ".sluice-redo" in n]
    check(f"{name}: no temporary or redo record is left", leftovers == [], leftovers)


try:
    scenario("cut", [("z.mp4", 40)])
    scenario("redo", [("y.mp4", 20), ("z.mp4", 60)])
except Exception as e:
    check("no step failed", False, repr(e))
finally:
    daemon_client.end_all(procs)
    subprocess.run(["umount", "-l", disk], capture_output=True)

print("FAILED: " + ", ".join(failures) if failures else "all resume-on-a-full-disk checks passed", flush=True)
sys.exit(1 if failures else 0)
