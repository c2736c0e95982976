#!/usr/bin/env python3
"""metrics_test.py SLUICED SRC_DIR [SCRAPE_OUT]: a live sluiced's Prometheus endpoint, against Prometheus practice.

Starts sluiced in service mode on a CPU pipeline with a managed test source, scrapes /metrics while it runs,
after pause, after resume and after a reload of the same file, and checks: the set of series never changes;
counters (the process's, and the pipeline's within one generation) only go up; sluice_state has one series
per state with exactly one 1; per-stage series carry no label but `stage`; the thread groups add up to
process_cpu_seconds_total and the source's decode thread is counted. Then `promtool check metrics` (Debian's
package `prometheus`) on the live scrape and on the checked-in example docs/metrics-example.txt, whose
families must be the live ones. Without promtool the test fails, saying so. SCRAPE_OUT: where to write the
last scrape (to refresh the example).
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/
import daemon_client  # noqa: E402

sluiced, src = sys.argv[1:3]
scrape_out = sys.argv[3] if len(sys.argv) > 3 else None
example = os.path.join(src, "docs", "metrics-example.txt")
tmp = tempfile.mkdtemp(prefix="sluice-metrics-")
sock = os.path.join(tmp, "control.sock")
failures = []
check = daemon_client.checker(failures)
wait_for = daemon_client.waiter(20.0, 0.05)

config = os.path.join(tmp, "metrics.yaml")
with open(config, "w") as f:
    f.write("""name: metrics
device: cpu
batch_size: 4
batch_timeout_ms: 5
stages:
  - kind: decode
    uri: ["testsrc:bars"]
    rate_limit: 100
    width: 640
    height: 480
  - kind: upload
  - kind: preprocess
    width: 32
    height: 32
  - kind: download
  - kind: sink
    type: "null"
""")


EXAMPLE_HEADER = """\
# A scrape of sluiced's /metrics: tests/metrics_test.py's CPU pipeline (a managed test source, 640x480 at 100 fps),
# after a pause, a resume and a reload of the same file. Refresh: python3 tests/metrics_test.py build/cpu/sluiced . docs/metrics-example.txt
# (the test checks that this file has the live families and that promtool check metrics passes on it).
"""


def parse(text):
    """{series: value} and {family: type}; a series twice fails the test."""
    samples, types = {}, {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
        elif line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            if series in samples:
                check("no duplicate series", False, series)
            samples[series] = float(value)
    return samples, types


def family(series, types):
    name = series.split("{", 1)[0]
    for suffix in ("_bucket", "_sum", "_count"):
        if name not in types and name.endswith(suffix) and name[: -len(suffix)] in types:
            return name[: -len(suffix)]
    return name


def value(samples, series):
    return samples.get(series, float("nan"))


log_path = os.path.join(tmp, "sluiced.log")
log = open(log_path, "w")
proc = subprocess.Popen([sluiced, "--config", config, "--config-root", tmp, "--socket", sock,
                         "--metrics", "127.0.0.1:0", "--drain-timeout", "20"], stdout=log, stderr=subprocess.STDOUT)
try:
    def port():
        for line in open(log_path):
            if " ready: " in line and "metrics on " in line:
                return int(line.split("metrics on ", 1)[1].split()[0].rsplit(":", 1)[1])
        return None

    check("daemon ready", wait_for(lambda: port() is not None), open(log_path).read()[-2000:])
    url = f"http://127.0.0.1:{port()}/metrics"

    def scrape():
        return urllib.request.urlopen(url, timeout=10).read().decode("utf-8")

    def request(obj):
        return daemon_client.request(sock, obj, 10.0)

    def running(generation):
        st = request({"request": "status"})
        return st["state"] == "running" and st["generation"] == generation and st["frames"]["delivered"] > 20

    check("frames flow", wait_for(lambda: running(1)))
    scrapes = [("running", scrape())]
    check("pause", request({"request": "pause"}).get("state") == "paused")
    scrapes.append(("paused", scrape()))
    check("resume", request({"request": "resume"}).get("state") == "running")
    time.sleep(0.2)
    scrapes.append(("resumed", scrape()))
    check("reload", request({"request": "reload"}).get("ok") is True)
    check("reloaded: generation 2 runs", wait_for(lambda: running(2)))
    time.sleep(0.2)
    scrapes.append(("reloaded", scrape()))

    parsed = [(name, *parse(text)) for name, text in scrapes]
    first_series = set(parsed[0][1])
    for name, samples, types in parsed[1:]:
        check(f"{name}: the same series as the first scrape", set(samples) == first_series,
              sorted(set(samples) ^ first_series)[:10])
    for name, samples, _ in parsed:
        states = {s: v for s, v in samples.items() if s.startswith("sluice_state{")}
        check(f"{name}: sluice_state has 5 series and one 1", len(states) == 5 and sorted(states.values()) == [0, 0, 0, 0, 1],
              states)
    check("paused scrape says paused", value(parsed[1][1], 'sluice_state{state="paused"}') == 1)
    check("reloaded scrape says generation 2", value(parsed[3][1], "sluice_pipeline_generation") == 2)

    # Counters only go up: all within a generation, the process's across the reload too.
    for (prev_name, prev, _), (name, cur, types) in zip(parsed, parsed[1:]):
        across_reload = name == "reloaded"
        decreased = []
        for series, v in cur.items():
            fam = family(series, types)
            process_wide = fam in ("process_cpu_seconds_total", "sluice_thread_cpu_seconds_total")
            if types.get(fam) in ("counter", "histogram") and (process_wide or not across_reload) and v < prev[series]:
                decreased.append((series, prev[series], v))
        check(f"{prev_name} -> {name}: no counter decreased" + (" (the process's; a reload restarts the pipeline's)"
                                                                  if across_reload else ""), not decreased, decreased)

    samples, types = parsed[-1][1], parsed[-1][2]
    check("every family is sluice_ or process_", all(f.startswith(("sluice_", "process_")) for f in types), sorted(types))
    check("no summary, one latency histogram",
          "summary" not in types.values() and types.get("sluice_frame_latency_seconds") == "histogram", types)
    check("per-stage series are labelled by stage only",
          all(s.split("{", 1)[1].startswith('stage="') and s.count('="') == 1
              for s in samples if s.startswith("sluice_stage_") and not s.startswith("sluice_stage_info{")),
          [s for s in samples if s.startswith("sluice_stage_")][:5])
    groups = {s: v for s, v in samples.items() if s.startswith("sluice_thread_cpu_seconds_total{")}
    cpu = value(samples, "process_cpu_seconds_total")
    threads = value(samples, "process_threads")
    # Per-thread times are whole ticks, each rounded down: the groups may fall short by a tick a thread.
    check("thread groups add up to the process's CPU", abs(sum(groups.values()) - cpu) <= 0.01 * threads + 0.02,
          (groups, cpu))
    # CPU time comes in ticks (10 ms): wait until the source's thread and the stages have used one.
    def busy_groups():
        s, _ = parse(scrape())
        return all(s.get(f'sluice_thread_cpu_seconds_total{{group="{g}"}}', 0) > 0 for g in ("sources", "stages"))
    check("the source's decode thread and the stages are counted", wait_for(busy_groups), groups)
    check("process_* facts", value(samples, "process_resident_memory_bytes") > 0 and
          value(samples, "process_open_fds") >= 3 and value(samples, "process_max_fds") >= value(samples, "process_open_fds")
          and threads >= 6 and time.time() - 3600 < value(samples, "process_start_time_seconds") <= time.time(),
          {k: v for k, v in samples.items() if k.startswith("process_")})

    if scrape_out:
        with open(scrape_out, "w") as f:
            f.write(EXAMPLE_HEADER + scrapes[-1][1])

    # The checked-in example shows the families a live daemon has (so it stays true).
    with open(example) as f:
        _, example_types = parse(f.read())
    check("docs/metrics-example.txt has the live families", example_types == types,
          sorted(set(example_types.items()) ^ set(types.items())))

    promtool = shutil.which("promtool")
    if not promtool:
        check("promtool found", False, "not on PATH: scripts/setup.sh (as root) extracts it from Debian's package "
              "'prometheus' into /usr/local/bin")
    else:
        for name, text in (("live scrape", scrapes[-1][1]), ("docs/metrics-example.txt", open(example).read())):
            r = subprocess.run([promtool, "check", "metrics"], input=text, capture_output=True, text=True, timeout=60)
            check(f"promtool check metrics: {name} is clean", r.returncode == 0 and not (r.stdout + r.stderr).strip(),
                  r.stdout + r.stderr)
finally:
    proc.terminate()
    try:
        code = proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        code = proc.wait()
    check("daemon stops on SIGTERM", code == 0, open(log_path).read()[-1500:])
    if not failures:
        shutil.rmtree(tmp, ignore_errors=True)

print(f"{len(failures)} failure(s)" if failures else "all checks passed")
sys.exit(1 if failures else 0)
