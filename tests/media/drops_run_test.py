#!/usr/bin/env python3
"""drops_run_test.py SLUICED INPUTS_DIR: `sluiced run` over files with irregular frame drops (issue 30).

make_inputs.sh's drops/ holds 72 of 150 frames in MKV, WebM, MPEG-TS, FLV, AVI and MP4, and an MP4 whose edit
list hides its first 6 samples (24 frames shown). Only MP4 states its frame count; the others' headers say 30 fps
over 4.9 s (147 frames), which once failed them as "truncated or corrupt".

- a directory job over drops/: exit 0, every input done in the ledger with ffprobe's frame count, every frame
  delivered with the presentation time ffprobe gives it;
- the same job with drops.mp4 cut in half beside them: exit 1, that one input failed as truncated, the rest done;
- the same job with every other container cut (at half its bytes, and a few bytes into its 41st packet) beside
  them: each cut file failed, its reason "ended early after N frames (truncated or corrupt): " and what its
  container showed; the whole files done.
"""
import glob
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # tests/
import daemon_client  # noqa: E402

sluiced, inputs = sys.argv[1], os.path.abspath(sys.argv[2])
tmp, failures, _procs, check, _wait = daemon_client.session("sluice-drops-", 10.0)
drops = os.path.join(inputs, "drops")
names = sorted(os.listdir(drops))


def probe_times(path):
    """ffprobe's presentation time of every frame of path, in ns, in output order (rounded as av_rescale_q)."""
    out = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "stream=time_base",
                          "-show_entries", "frame=best_effort_timestamp", "-of", "csv=p=0", path],
                         capture_output=True, text=True, check=True).stdout
    num, den, ts = 0, 1, []
    for line in out.splitlines():
        line = line.strip().rstrip(",")
        if not line:
            continue
        if "/" in line:
            num, den = (int(x) for x in line.split("/"))
        else:
            ts.append(int(line))
    return [(t * 1_000_000_000 * num + den // 2) // den for t in ts]


def run_job(name, in_dir):
    out_dir, state = os.path.join(tmp, name + "-out"), os.path.join(tmp, name + "-state")
    yaml = os.path.join(tmp, name + ".yaml")
    with open(yaml, "w") as f:
        f.write(f"""name: {name}
device: cpu
batch_size: 4
batch_timeout_ms: 5
stages:
  - kind: decode
    uri: [{in_dir}]
    width: 64
    height: 48
    format: bgr8
  - kind: upload
  - kind: download
  - kind: sink
    type: directory
    path: {out_dir}
""")
    r = subprocess.run([sluiced, "run", yaml, "--state-dir", state, "--no-progress"], capture_output=True, text=True,
                       timeout=300)
    results = {}
    for path in glob.glob(os.path.join(out_dir, "*.json")):
        with open(path) as f:
            res = json.load(f)
        results[os.path.basename(res["input"])] = res
    ledger = {}
    for path in glob.glob(os.path.join(state, "jobs", "*.ledger")):
        for line in open(path):
            rec = json.loads(line)
            if rec["status"] != "started":
                ledger[os.path.basename(rec["input"])] = rec
    return r, results, ledger


# --- every file whole --------------------------------------------------------------------------------------
want = {n: probe_times(os.path.join(drops, n)) for n in names}
check("inputs: ffprobe finds 72 frames in each drops file and 24 in editlist.mp4",
      all(len(v) == (24 if n == "editlist.mp4" else 72) for n, v in want.items()),
      {n: len(v) for n, v in want.items()})
r, results, ledger = run_job("drops", drops)
check("whole: exit 0", r.returncode == 0, f"{r.returncode}\n{r.stderr[-3000:]}")
check("whole: nothing called truncated", "truncated" not in r.stderr, r.stderr[-3000:])
check("whole: every input done in the ledger with ffprobe's count",
      {n: (x["status"], x.get("frames")) for n, x in ledger.items()} ==
      {n: ("done", len(v)) for n, v in want.items()}, ledger)
for n in names:
    res = results.get(n, {})
    check(f"whole {n}: every frame delivered, none failed",
          res.get("frames") == len(want[n]) and res.get("delivered") == len(want[n]) and res.get("failed") == 0,
          {k: res.get(k) for k in ("frames", "delivered", "failed", "error")})
    got = [rec["pts_ns"] for rec in sorted(res.get("records", []), key=lambda rec: rec["input_frame"])]
    check(f"whole {n}: the container's presentation times", got == want[n], f"{got[:8]} vs {want[n][:8]}")

# --- a truncated MP4 beside them still fails ---------------------------------------------------------------
mixed = os.path.join(tmp, "mixed")
os.makedirs(mixed)
for n in names:
    os.symlink(os.path.join(drops, n), os.path.join(mixed, n))
with open(os.path.join(drops, "drops.mp4"), "rb") as f:
    whole = f.read()
with open(os.path.join(mixed, "zz_cut.mp4"), "wb") as f:
    f.write(whole[:len(whole) // 2])
r, results, ledger = run_job("mixed", mixed)
check("cut: exit 1", r.returncode == 1, f"{r.returncode}\n{r.stderr[-3000:]}")
cut = ledger.get("zz_cut.mp4", {})
check("cut: the cut MP4 failed as truncated, short of the 72 frames its sample table states",
      cut.get("status") == "failed" and "of 72 frames (truncated" in cut.get("reason", ""), cut)
check("cut: the others done", all(ledger.get(n, {}).get("status") == "done" for n in names), ledger)

# --- every other container cut short fails too, with what showed it ------------------------------------------
# No frame count to fall short of: the demuxer says so (Matroska), or the last packet is short (FLV, AVI), or
# the bytes end inside a TS packet (MPEG-TS); see media/demux.cpp Demuxer::end_shows_cut.
shows = {"drops.mkv": "the Matroska demuxer reports 'File ended prematurely",
         "drops.webm": "the Matroska demuxer reports 'File ended prematurely",
         "drops.ts": "its last MPEG-TS packet is incomplete",
         "drops.flv": "the FLV demuxer flagged it corrupt",
         "drops.avi": "the AVI demuxer flagged it corrupt"}
cuts_dir = os.path.join(tmp, "cuts")
os.makedirs(cuts_dir)
for n in names:
    os.symlink(os.path.join(drops, n), os.path.join(cuts_dir, n))
cut_names = {}
for n in shows:
    with open(os.path.join(drops, n), "rb") as f:
        whole = f.read()
    probed = subprocess.run(["ffprobe", "-v", "error", "-select_streams", "v:0", "-show_entries", "packet=pos",
                             "-of", "csv=p=0", os.path.join(drops, n)], capture_output=True, text=True, check=True)
    pos = sorted(int(f) for f in (line.split(",")[0] for line in probed.stdout.split()) if f.isdigit())
    for tag, keep in (("half", len(whole) // 2), ("pkt41", pos[40] + 100)):
        cut_name = f"zz_{tag}_{n}"
        with open(os.path.join(cuts_dir, cut_name), "wb") as f:
            f.write(whole[:keep])
        cut_names[cut_name] = n
r, results, ledger = run_job("cuts", cuts_dir)
check("cuts: exit 1", r.returncode == 1, f"{r.returncode}\n{r.stderr[-3000:]}")
for cut_name, n in sorted(cut_names.items()):
    rec = ledger.get(cut_name, {})
    reason = rec.get("reason", "")
    check(f"cuts: {cut_name} failed: ended early, and what its container showed",
          rec.get("status") == "failed" and "ended early after " in reason and "(truncated or corrupt): " in reason
          and shows[n] in reason, rec)
check("cuts: the whole files done", all(ledger.get(n, {}).get("status") == "done" for n in names), ledger)

daemon_client.conclude(failures, tmp)
