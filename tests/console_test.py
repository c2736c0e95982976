#!/usr/bin/python3
"""console_test.py SLUICED SRC_DIR [SCREENSHOT]: the browser console (docs/console.md) in headless Chromium.

Starts sluiced in service mode with --console and a control token on a 16-source CPU test pipeline, opens the
console with Selenium (Debian's chromium, chromium-driver, python3-selenium) and checks: the grid shows every
source, the numbers change, every card gets a picture; a client without the token (and one with a wrong token)
cannot pause while one with it can, and resume; hostile requests get clear errors. Then it reloads into the shipped
detector on its clip (config/media/shapes.mp4, looped) teed to records and an annotate sink: the same page
follows the reload and a thumbnail shows a box of the colour annotate gives that track where the record of that
frame says (pixel check in the browser's canvas). SCREENSHOT: write a PNG of the grid there (docs/console.png).
"""
import json
import math
import os
import socket
import sys
import time
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # tests/
import daemon_client  # noqa: E402

from selenium import webdriver  # noqa: E402
from selenium.webdriver.chrome.service import Service as ChromeService  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402

sluiced, src = sys.argv[1], os.path.abspath(sys.argv[2])
screenshot = sys.argv[3] if len(sys.argv) > 3 else None
tmp, failures, procs, check, wait_for = daemon_client.session("sluice-console-", 20.0, 0.1)
SOURCES = 16
TOKEN = "console-test-token-0123456789"

token_file = os.path.join(tmp, "token")
with open(token_file, "w") as f:
    f.write(TOKEN + "\n")
os.chmod(token_file, 0o600)

grid_yaml = os.path.join(tmp, "grid.yaml")
with open(grid_yaml, "w") as f:
    uris = ", ".join(['"testsrc:bars"'] * SOURCES)
    f.write(f"""name: console-grid
device: cpu
batch_size: 8
batch_timeout_ms: 20
stages:
  - kind: decode
    uri: [{uris}]
    rate_limit: 10
    width: 160
    height: 120
  - kind: upload
  - kind: preprocess
    width: 16
    height: 16
  - kind: download
  - kind: sink
    type: "null"
""")

records = os.path.join(tmp, "records.jsonl")
detect_yaml = os.path.join(tmp, "detect.yaml")
with open(detect_yaml, "w") as f:
    f.write(f"""name: console-detect
device: cpu
batch_size: 4
batch_timeout_ms: 20
stages:
  - kind: decode
    uri: ["{src}/config/media/shapes.mp4"]
    loop: true
    rate_limit: 10
    width: 320
    height: 240
    format: bgr8
  - kind: upload
  - kind: preprocess
    width: 192
    height: 192
    letterbox: true
    pad_value: 114
    order: rgb
    layout: nchw
    dtype: f32
    mean: [0, 0, 0]
    std: [1, 1, 1]
  - kind: infer
    model: {src}/models/shapes-detector.onnx
    labels: {src}/models/shapes-detector.labels
    output: detections
    detect:
      head: yolo_anchor_free
      reg_max: 1
      score_threshold: 0.25
      iou_threshold: 0.5
  - kind: download
  - kind: track
  - kind: tee
    branches:
      - - kind: sink
          name: records
          type: jsonl
          path: {records}
      - - kind: annotate
          path: {tmp}/annotated
""")

port = daemon_client.free_port()
base = f"http://127.0.0.1:{port}"
sock = os.path.join(tmp, "control.sock")
log = open(os.path.join(tmp, "sluiced.log"), "w")
import subprocess  # noqa: E402
daemon = subprocess.Popen([sluiced, "--config", grid_yaml, "--config-root", tmp, "--socket", sock,
                           "--console", f"127.0.0.1:{port}", "--control-token", token_file],
                          stdout=log, stderr=subprocess.STDOUT)
procs.append(daemon)


def http(method, path, body=None, headers=None, raw=None):
    """(status, headers, body bytes) of one request; raw: bytes sent as they are on a fresh socket instead."""
    if raw is not None:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            s.sendall(raw)
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        return int(data.split(b" ", 2)[1]) if data.startswith(b"HTTP/") else 0, {}, data
    req = urllib.request.Request(base + path, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read()


def status():
    return json.loads(http("GET", "/api/status")[2])


driver = None
try:
    check("the console answers", wait_for(lambda: http("GET", "/api/status")[0] == 200))

    # --- hostile clients get clear errors (the listener's limits are the metrics listener's) -----------------
    check("a bad path is 400", http("GET", "/../etc/passwd", raw=b"GET /../etc/passwd HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")[0] == 400)
    check("a DNS name in Host is 421 (DNS rebinding)",
          http("GET", "/", raw=b"GET /api/status HTTP/1.1\r\nHost: attacker.example\r\nConnection: close\r\n\r\n")[0] == 421)
    check("an unknown path is 404", http("GET", "/nope")[0] == 404)
    check("GET /api/control is 405", http("GET", "/api/control")[0] == 405)
    huge = b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 20000 + b"\r\n\r\n"
    check("a huge header is 431", http("GET", "/", raw=huge)[0] == 431)
    big_body = b"POST /api/control HTTP/1.1\r\nHost: x\r\nContent-Length: 20000\r\n\r\n" + b"x" * 20000
    check("a huge body is 413", http("POST", "/", raw=big_body)[0] == 413)
    code, _, body = http("POST", "/api/control", b'{"request":"pause"}', {"Authorization": "Bearer wrong-token-123456"})
    check("a wrong token cannot pause (403)", code == 403 and b"wrong token" in body, (code, body))
    code, _, body = http("POST", "/api/control", b"{not json")
    check("a malformed request is 400", code == 400 and b'"ok":false' in body, (code, body))
    slow = socket.create_connection(("127.0.0.1", port))
    slow.sendall(b"GET / HTTP/1.1\r\n")  # and nothing more: the 5 s request deadline closes it
    check("a slow client does not block others", http("GET", "/api/status")[0] == 200)

    # --- the page in a browser ---------------------------------------------------------------------------------
    options = webdriver.ChromeOptions()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--window-size=1280,900"):
        options.add_argument(arg)
    options.binary_location = "/usr/bin/chromium"
    driver = webdriver.Chrome(service=ChromeService("/usr/bin/chromedriver"), options=options)
    driver.get(base + "/")

    def cards():
        return driver.find_elements(By.CSS_SELECTOR, "#sources .source")

    check(f"the grid shows all {SOURCES} sources", wait_for(lambda: len(cards()) == SOURCES), len(cards()))
    check("the graph shows every stage",
          wait_for(lambda: len(driver.find_elements(By.CSS_SELECTOR, "#graph .stage")) == 5))
    first = driver.find_element(By.CSS_SELECTOR, "#sources .source .frames").text
    summary = driver.find_element(By.ID, "summary").text
    check("the numbers change", wait_for(lambda: driver.find_element(By.CSS_SELECTOR, "#sources .source .frames").text != first
                                         and driver.find_element(By.ID, "summary").text != summary), first)
    check("every source gets a picture", wait_for(lambda: all(
        int(c.find_element(By.TAG_NAME, "img").get_attribute("data-frames") or 0) >= 1 for c in cards())))
    check("the pictures are refreshed", wait_for(lambda: all(
        int(c.find_element(By.TAG_NAME, "img").get_attribute("data-frames") or 0) >= 2 for c in cards())))
    if screenshot:
        driver.save_screenshot(screenshot)

    state = lambda: driver.find_element(By.ID, "state").text  # noqa: E731
    message = lambda: driver.find_element(By.ID, "message").text  # noqa: E731
    driver.find_element(By.ID, "pause").click()
    check("without the token Pause is refused, saying why", wait_for(lambda: "permission denied" in message()), message())
    check("... and the daemon still runs", status()["state"] == "running")
    driver.find_element(By.ID, "token").send_keys(TOKEN)
    driver.find_element(By.ID, "pause").click()
    check("with the token Pause pauses", wait_for(lambda: state() == "paused" and status()["state"] == "paused"), state())
    driver.find_element(By.ID, "resume").click()
    check("and Resume resumes", wait_for(lambda: state() == "running"), state())

    driver.find_element(By.ID, "trace").click()
    check("Record trace downloads a trace", wait_for(lambda: "trace saved" in message(), 15), message())
    driver.get(base + "/#source=" + cards()[0].get_attribute("data-id"))
    live = lambda: int(driver.find_element(By.ID, "live").get_attribute("data-frames") or 0)  # noqa: E731
    check("the source page shows a live view", wait_for(lambda: live() >= 5) and
          driver.find_element(By.ID, "source-name").text == "testsrc-bars", driver.find_element(By.ID, "source-name").text)
    driver.get(base + "/")
    check("and back to the grid", wait_for(lambda: len(cards()) == SOURCES))

    # --- reload into the detector: the same page follows ---------------------------------------------------
    code, _, body = http("POST", "/api/control", json.dumps({"request": "reload", "path": detect_yaml}).encode(),
                         {"Authorization": "Bearer " + TOKEN})
    check("reload into the detector pipeline", code == 200, (code, body))
    check("the page follows the reload", wait_for(
        lambda: "console-detect" in driver.find_element(By.ID, "pipeline").text and len(cards()) == 1
        and cards()[0].find_element(By.TAG_NAME, "a").text == "shapes", 30))
    check("the graph shows the tee's two branches", wait_for(
        lambda: len(driver.find_elements(By.CSS_SELECTOR, "#graph .branches .chain")) == 2
        and len(driver.find_elements(By.CSS_SELECTOR, "#graph .stage")) == 9))
    source_id = int(cards()[0].get_attribute("data-id")) if cards() else 0
    check("the detector's thumbnail appears", wait_for(lambda: int(
        cards()[0].find_element(By.TAG_NAME, "img").get_attribute("data-frames") or 0) >= 1, 30))

    # The pixel check: the picture the page shows, read back through a canvas, against the record of its frame.
    def picture():
        return driver.execute_async_script("""
            const done = arguments[arguments.length - 1];
            fetch('/api/frame/' + arguments[0]).then(async (r) => {
              const bitmap = await createImageBitmap(await r.blob());
              const c = document.createElement('canvas');
              c.width = bitmap.width; c.height = bitmap.height;
              const g = c.getContext('2d');
              g.drawImage(bitmap, 0, 0);
              done({seq: Number(r.headers.get('X-Sluice-Frame')), drawn: r.headers.get('X-Sluice-Drawn'),
                    w: c.width, h: c.height, rgba: Array.from(g.getImageData(0, 0, c.width, c.height).data)});
            }).catch((e) => done({error: String(e)}));""", source_id)

    def record(seq):
        with open(records) as f:
            for line in f:
                r = json.loads(line)
                if r.get("sequence") == seq:
                    return r
        return None

    def colour(d):
        key = d["track"] if d.get("track", -1) >= 0 else (1 << 40) + d["class"]
        mask = (1 << 64) - 1
        key ^= key >> 33
        key = (key * 0xff51afd7ed558ccd) & mask
        key ^= key >> 33
        key = (key * 0xc4ceb9fe1a85ec53) & mask
        key ^= key >> 33
        palette = [(56, 56, 255), (151, 157, 255), (31, 112, 255), (29, 178, 255), (49, 210, 207), (10, 249, 72),
                   (23, 204, 146), (134, 219, 61), (52, 147, 26), (187, 212, 0), (168, 153, 44), (255, 194, 0),
                   (147, 69, 52), (255, 115, 100), (236, 24, 0), (255, 56, 132), (133, 0, 82), (255, 56, 203),
                   (200, 149, 255), (199, 55, 255)]
        b, g, r = palette[key % len(palette)]
        return r, g, b

    boxed, seen = None, []
    for _ in range(40):
        p = picture()
        seen.append({k: p.get(k) for k in ("error", "seq", "drawn", "w", "h")})
        if "error" in p or p["drawn"] != "1":
            time.sleep(0.2)
            continue
        wait_for(lambda: record(p["seq"]) is not None, 5)  # the records branch may be a moment behind
        rec = record(p["seq"])
        boxes = [d for d in (rec or {}).get("detections", []) if d.get("track", -1) >= 0]
        if rec and boxes:
            boxed = (p, boxes[0])
            break
        time.sleep(0.2)
    if check("a drawn thumbnail of a frame with a tracked box", boxed is not None, f"source {source_id}: {seen[-3:]}"):
        p, d = boxed
        x1, y1, x2, y2 = d["box"]
        want = colour(d)
        w = p["w"]

        def px(x, y):
            i = 4 * (int(y) * w + int(x))
            return tuple(p["rgba"][i:i + 3])

        # The box's left and right edges as annotate rounds them (2 px lines on them), away from the corners and
        # the tag; per row the best of the line's pixels (JPEG's chroma subsampling blurs 2 px colour lines).
        left, right = math.floor(x1), math.ceil(x2) - 1
        ys = range(math.floor(y1) + 4, math.ceil(y2) - 4)

        def distance(s):
            return sum(abs(a - b) for a, b in zip(s, want))

        samples = [min((px(min(w - 1, max(0, x + dx)), y) for dx in (-1, 0, 1)), key=distance)
                   for x in (left, right) for y in ys]
        near = [s for s in samples if distance(s) < 100]
        print(f"     box {d['box']} of track {d['track']}: {len(near)}/{len(samples)} edge pixels in {want}")
        check("the thumbnail shows the record's box in its track's colour", samples and len(near) >= 0.75 * len(samples),
              f"box {d['box']} colour {want}: {len(near)}/{len(samples)} edge pixels match, e.g. {samples[:4]}")
finally:
    if driver:
        driver.quit()
    daemon_client.end_all(procs)
    log.close()
    if failures:
        with open(os.path.join(tmp, "sluiced.log")) as f:
            print(f.read()[-4000:])
daemon_client.conclude(failures, tmp)
