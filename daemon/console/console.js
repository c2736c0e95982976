// The sluice console (docs/console.md): polls /api/status once a second and each watched source's last frame
// (/api/frame/ID); changes go to /api/control with the token as "Authorization: Bearer". Daemon data is only ever
// put into the page as text (never as HTML): source names and URIs come from whoever configured them.
"use strict";

const $ = (id) => document.getElementById(id);
const el = (tag, cls, text) => {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined) e.textContent = text;
  return e;
};
const fmt = (v, digits = 1) => (typeof v === "number" && isFinite(v) ? v.toFixed(digits) : "–");

let status = null;
const cards = new Map();   // source id -> its card's elements
const pictures = new Map(); // <img> -> object URL shown now

function message(text, bad) {
  const m = $("message");
  m.textContent = text || "";
  m.style.color = bad ? "var(--bad)" : "";
}

// --- changes ------------------------------------------------------------------------------------------
$("token").value = sessionStorage.getItem("sluice-token") || "";
$("token").addEventListener("change", () => sessionStorage.setItem("sluice-token", $("token").value));

async function control(request) {
  const headers = { "Content-Type": "application/json" };
  const token = $("token").value.trim();
  if (token) headers["Authorization"] = "Bearer " + token;
  const res = await fetch("/api/control", { method: "POST", headers, body: JSON.stringify(request) });
  let reply;
  try { reply = await res.json(); } catch (e) { reply = { ok: false, error: "HTTP " + res.status }; }
  if (!reply.ok) message(request.request + ": " + (reply.error || "HTTP " + res.status), true);
  return reply;
}

for (const name of ["pause", "resume", "reload"]) {
  $(name).addEventListener("click", async () => {
    const reply = await control({ request: name });
    if (reply.ok) message(name + ": done");
    poll();
  });
}

$("trace").addEventListener("click", async () => {
  message("recording a trace for 2 s…");
  const reply = await control({ request: "trace", seconds: 2 });
  if (!reply.ok) return;
  const blob = new Blob([JSON.stringify(reply.trace)], { type: "application/json" });
  const a = el("a");
  a.href = URL.createObjectURL(blob);
  a.download = "sluice-trace-" + new Date().toISOString().replace(/[:.]/g, "-") + ".json";
  document.body.appendChild(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(a.href), 10000);
  message("trace saved: open it in ui.perfetto.dev or chrome://tracing");
});

// --- pictures -----------------------------------------------------------------------------------------
// Fetched as blobs (not <img src=...> directly): a source without a frame yet keeps its last picture instead of
// a broken image, and the page never asks twice at once for the same picture.
const busy = new WeakSet();
async function refresh(img, id) {
  if (busy.has(img)) return;
  busy.add(img);
  try {
    const res = await fetch("/api/frame/" + id + "?t=" + Date.now());
    if (res.ok) {
      const url = URL.createObjectURL(await res.blob());
      const old = pictures.get(img);
      img.src = url;
      pictures.set(img, url);
      img.dataset.frames = String(Number(img.dataset.frames || 0) + 1);
      if (old) URL.revokeObjectURL(old);
    }
  } catch (e) {
    // the daemon is away (reload, restart): the next round tries again
  } finally {
    busy.delete(img);
  }
}

// --- the pipeline graph -------------------------------------------------------------------------------
// As `sluiced check` prints it: the trunk as a chain, then after a tee one row per branch.
function stageBox(s) {
  const box = el("div", "stage");
  box.dataset.stage = s.name;
  const name = el("div", "name", s.name);
  name.appendChild(el("span", "kind", " " + s.kind + (s.on_gpu ? " (GPU)" : "")));
  box.appendChild(name);
  box.appendChild(el("div", "rate", fmt(s.fps_1s) + " frames/s"));
  box.appendChild(el("div", "busy", "busy " + fmt(100 * (s.busy || 0), 0) + "%" +
                     (s.gpu_ms_per_batch ? " · GPU " + fmt(s.gpu_ms_per_batch, 2) + " ms/batch" : "")));
  const cap = s.queue_capacity || 0;
  box.appendChild(el("div", "queue dim", cap ? "queue " + s.queue_depth + "/" + cap : "no queue"));
  const bar = el("div", "bar");
  const fill = el("div");
  fill.style.width = (cap ? Math.min(100, 100 * s.queue_depth / cap) : 0) + "%";
  bar.appendChild(fill);
  box.appendChild(bar);
  return box;
}

function chain(stages) {
  const row = el("div", "chain");
  stages.forEach((s, i) => {
    if (i > 0) row.appendChild(el("span", "arrow", "→"));
    row.appendChild(stageBox(s));
  });
  return row;
}

function drawGraph(stages) {
  const graph = $("graph");
  graph.replaceChildren();
  graph.appendChild(chain(stages.filter((s) => !s.branch)));
  const branches = new Map();
  for (const s of stages) if (s.branch) (branches.get(s.branch) || branches.set(s.branch, []).get(s.branch)).push(s);
  if (!branches.size) return;
  const fan = el("div", "branches");
  for (const [n, list] of [...branches].sort((a, b) => a[0] - b[0])) {
    const row = chain(list);
    row.prepend(el("span", "arrow", "↳ " + n));
    fan.appendChild(row);
  }
  graph.appendChild(fan);
}

// --- the grid of sources ------------------------------------------------------------------------------
function card(source) {
  let c = cards.get(source.id);
  if (c) return c;
  const root = el("div", "source");
  root.dataset.id = source.id;
  const img = el("img");
  img.alt = "last frame of " + source.name;
  const facts = el("div", "facts");
  const title = el("div", "title");
  const link = el("a", null, source.name);
  link.href = "#source=" + source.id;
  const state = el("span", "badge");
  title.append(link, state);
  const fps = el("span", "fps"), frames = el("span", "frames"), late = el("span", "late"), dropped = el("span", "dropped");
  const inputs = el("span", "inputs dim");
  facts.append(title, fps, frames, late, dropped, inputs);
  root.append(img, facts);
  c = { root, img, link, state, fps, frames, late, dropped, inputs };
  cards.set(source.id, c);
  return c;
}

function drawSources(s) {
  const grid = $("sources");
  const seen = new Set();
  const late = (s.frames && s.frames.late_by_source) || {};
  for (const src of s.sources || []) {
    const c = card(src);
    seen.add(src.id);
    c.link.textContent = src.name;  // ids may be reused by another source after a reload
    c.img.alt = "last frame of " + src.name;
    c.state.textContent = src.state;
    c.state.className = "badge " + src.state;
    c.fps.textContent = fmt(src.fps) + " fps";
    c.frames.textContent = src.frames + " frames";
    c.late.textContent = (late[src.name] || 0) + " late";
    c.dropped.textContent = src.dropped + " dropped";
    // Files, directories and jobs: how far the source is through its inputs.
    const io = src.inputs || {};
    c.inputs.textContent = io.total ? io.done + "/" + io.total + " inputs" + (io.failed ? ", " + io.failed + " failed" : "") : "";
    if (c.root.parentNode !== grid) grid.appendChild(c.root);
  }
  for (const [id, c] of cards) {
    if (seen.has(id)) continue;
    c.root.remove();
    cards.delete(id);
  }
}

// --- one source ---------------------------------------------------------------------------------------
function route() {
  const m = /^#source=(\d+)$/.exec(location.hash);
  return m ? Number(m[1]) : null;
}

function drawSource(s, id) {
  const src = (s.sources || []).find((x) => x.id === id);
  $("source-name").textContent = src ? src.name : "source " + id + " (gone)";
  const facts = $("source-facts");
  facts.replaceChildren();
  if (!src) return;
  const late = (s.frames && s.frames.late_by_source) || {};
  const rows = [["state", src.state + (src.reason ? " (" + src.reason + ")" : "")], ["uri", src.uri],
                ["fps", fmt(src.fps)], ["frames", src.frames], ["late", late[src.name] || 0],
                ["dropped", src.dropped], ["errors", src.errors], ["reconnects", src.reconnects],
                ["decoder", src.decoder || "–"],
                ["pipeline latency p50 / p99", fmt(s.latency_ms.p50) + " / " + fmt(s.latency_ms.p99) + " ms"]];
  for (const [k, v] of rows) facts.append(el("dt", null, k), el("dd", null, String(v)));
}

function show() {
  const id = route();
  $("overview").hidden = id !== null;
  $("source-view").hidden = id === null;
  if (status) draw(status);
}
window.addEventListener("hashchange", show);

function draw(s) {
  $("pipeline").textContent = s.pipeline + " · " + s.device + " · generation " + s.generation;
  $("state").textContent = s.state;
  $("state").className = "badge " + s.state;
  const f = s.frames;
  $("summary").textContent = f.produced + " produced · " + f.delivered + " delivered · " + f.dropped + " dropped · " +
      f.late + " late · latency p50 " + fmt(s.latency_ms.p50) + " ms, p99 " + fmt(s.latency_ms.p99) + " ms";
  const id = route();
  if (id === null) {
    drawGraph(s.stages || []);
    drawSources(s);
  } else {
    drawSource(s, id);
  }
}

// --- polling ------------------------------------------------------------------------------------------
async function poll() {
  try {
    const res = await fetch("/api/status");
    const reply = await res.json();
    if (!reply.ok) throw new Error(reply.error || "HTTP " + res.status);
    status = reply;
    draw(reply);
    if ($("message").dataset.offline) { message(""); delete $("message").dataset.offline; }
  } catch (e) {
    $("state").textContent = "offline";
    $("state").className = "badge offline";
    message("no answer from sluiced (" + e.message + "); trying again", true);
    $("message").dataset.offline = "1";
  }
}

function tick() {
  poll();
  if (route() === null) for (const [id, c] of cards) refresh(c.img, id);  // the grid: one picture a second each
}

// The live view: as fast as pictures come, at most 8 a second.
async function live() {
  const id = route();
  if (id !== null) await refresh($("live"), id);
  setTimeout(live, 125);
}

show();
tick();
setInterval(tick, 1000);
live();
