#!/usr/bin/env python3
"""resume_full_disk_test.py SLUICED: a job killed on a nearly full disk resumes (issue 33). Drives the real
`sluiced run` (cpu build with the media library, a few seconds; mounts a small tmpfs, so it needs root: without
it the test exits 77, which CTest reports as skipped).

A directory job (many images with long names, then a short video) writes one jsonl per-run file on a 1 MiB tmpfs.
It is killed (-9) while the video's records are being written; the tmpfs is then filled until less room is left
than the file takes (what copying it needed) but enough for the video's records. The resumed run must take the
interrupted video's records out without that room, finish with every input's records exactly once and leave no
temporary or redo record behind.
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
VIDEO_FRAMES = 40
IMAGES = 100


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


try:
    job = os.path.join(tmp, "job")
    os.makedirs(job)
    subprocess.run(["ffmpeg", "-hide_banner", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                    "testsrc2=size=64x48:rate=24", "-frames:v", str(VIDEO_FRAMES), "-c:v", "libx264", "-preset",
                    "ultrafast", os.path.join(job, "z.mp4")], check=True)
    first_png = os.path.join(tmp, "first.png")
    subprocess.run(["ffmpeg", "-hide_banner", "-nostdin", "-loglevel", "error", "-y", "-f", "lavfi", "-i",
                    "testsrc2=size=64x48", "-frames:v", "1", first_png], check=True)
    for i in range(IMAGES):  # long names: the images' records are most of the file
        with open(first_png, "rb") as src, open(os.path.join(job, f"{i:03d}-" + "x" * 180 + ".png"), "wb") as dst:
            dst.write(src.read())
    out = os.path.join(disk, "out.jsonl")
    state = os.path.join(tmp, "state")
    config = os.path.join(tmp, "job.yaml")
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
    video = os.path.join(job, "z.mp4")
    run = [sluiced, "run", config, "--state-dir", state, "--no-progress"]

    first = daemon_client.start(procs, run)
    caught = wait_for(lambda: sum(1 for r in records(out) if r.get("input") == video) >= 6)
    os.kill(first.pid, signal.SIGKILL)
    daemon_client.finish(first, 10)
    got = records(out)
    check("the first run was killed while the video's records were written",
          caught and 0 < sum(1 for r in got if r.get("input") == video) < VIDEO_FRAMES, len(got))
    ledger = [json.loads(l) for p in glob.glob(os.path.join(state, "jobs", "*.ledger")) for l in open(p) if l.strip()]
    check("the ledger says the video started and not done",
          [r["status"] for r in ledger if r["input"] == video] == ["started"], ledger[-3:])

    # Fill the disk: less room than the file (a copy of it cannot be made), enough for the video's records again.
    size = os.path.getsize(out)
    per_record = size // max(1, len(got))
    leave = VIDEO_FRAMES * per_record + 16384
    check("the test leaves less room than the file takes", leave < size, (leave, size))
    filler = os.open(os.path.join(disk, "filler"), os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while os.write(filler, b"\0" * 4096) > 0:
            pass
    except OSError:
        pass
    os.ftruncate(filler, max(0, os.fstat(filler).st_size - leave))
    os.close(filler)
    check("the disk has less room than the file takes", free_bytes(disk) < size, (free_bytes(disk), size))

    rc, _, err = daemon_client.finish(daemon_client.start(procs, run), 60)
    check("the resumed run completes (exit 0)", rc == 0, (rc, err))
    by_input = {}
    for r in records(out):
        by_input.setdefault(r.get("input"), []).append(r["input_frame"])
    check("every image's record is there once", sum(1 for k, v in by_input.items() if k != video and v == [0]) == IMAGES,
          {k: v for k, v in by_input.items() if v != [0]})
    check("the video's records are there exactly once", sorted(by_input.get(video, [])) == list(range(VIDEO_FRAMES)),
          sorted(by_input.get(video, [])))
    leftovers = [n for n in os.listdir(disk) if ".sluice-tmp" in n or ".sluice-redo" in n]
    check("no temporary or redo record is left", leftovers == [], leftovers)
except Exception as e:
    check("no step failed", False, repr(e))
finally:
    daemon_client.end_all(procs)
    subprocess.run(["umount", "-l", disk], capture_output=True)

print("FAILED: " + ", ".join(failures) if failures else "all resume-on-a-full-disk checks passed", flush=True)
sys.exit(1 if failures else 0)
