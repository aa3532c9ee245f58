// The Mantle dashboard: polls api/state for the samples after the last one it has, keeps a
// window of them, and draws the charts on canvas. No library, nothing fetched from elsewhere.
// Polling (not an event stream) so `chromium --dump-dom` can load the page and return.
"use strict";

const POLL_MS = 500;
const WINDOW = 240; // samples shown: two minutes at the server's 500 ms period
const CHANGE_EVENTS = new Set(["loaded", "activated", "rolled_back", "param", "switched"]);
// Capacity events have their own colour and a light stroke: a sizing policy changes the
// capacity at many ticks, and drawn as version changes they covered the charts in bands.
const CAPACITY_EVENTS = new Set(["capacity"]);
const ERROR_EVENTS = new Set(["error", "rejected", "quarantined", "suspended"]);
// The log panel shows entries at this level and above (`?log=warn` in the URL sets it).
const LEVELS = { info: 0, warn: 1, error: 2 };
let minLevel = LEVELS[new URLSearchParams(location.search).get("log")] ?? 0;

const $ = (id) => document.getElementById(id);
let samples = [];
let lastSeq = 0;
let received = 0;
let lastOk = 0;
let log = [];

function css(name) {
  return getComputedStyle(document.documentElement).getPropertyValue(name).trim();
}

function human(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return "–";
  const a = Math.abs(n);
  if (a >= 1e9) return (n / 1e9).toFixed(1) + "G";
  if (a >= 1e6) return (n / 1e6).toFixed(1) + "M";
  if (a >= 1e4) return (n / 1e3).toFixed(1) + "k";
  if (a >= 100 || Number.isInteger(n)) return String(Math.round(n));
  return n.toFixed(2);
}

function bytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : String(n)) + " " + units[i];
}

function time(ms) {
  return new Date(ms).toLocaleTimeString([], { hour12: false });
}

// The smallest round number at or above `v` whose quarters are round too, for the grid.
function niceCeiling(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 1.2, 1.6, 2, 2.4, 3.2, 4, 5, 6, 8, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

// One chart: `series` are {values, color, dash}; markers are {t_ms, kind}.
function draw(canvas, times, series, opts) {
  const dpr = window.devicePixelRatio || 1;
  const w = canvas.clientWidth || 380, h = canvas.clientHeight || 170;
  if (canvas.width !== Math.round(w * dpr) || canvas.height !== Math.round(h * dpr)) {
    canvas.width = Math.round(w * dpr);
    canvas.height = Math.round(h * dpr);
  }
  const g = canvas.getContext("2d");
  g.setTransform(dpr, 0, 0, dpr, 0, 0);
  g.clearRect(0, 0, w, h);
  const left = 52, right = 8, top = 8, bottom = 20;
  const pw = w - left - right, ph = h - top - bottom;
  let max = opts.max;
  if (max === undefined) {
    max = 0;
    for (const s of series) for (const v of s.values) if (v !== null && v > max) max = v;
    max = niceCeiling(max > 0 ? max * 1.05 : 1);
  }
  const t0 = times.length ? times[0] : 0;
  const t1 = times.length ? Math.max(times[times.length - 1], t0 + 1) : 1;
  const x = (t) => left + ((t - t0) / (t1 - t0)) * pw;
  const y = (v) => top + ph - (v / max) * ph;
  g.strokeStyle = css("--line");
  g.fillStyle = css("--muted");
  g.font = "11px system-ui, sans-serif";
  g.lineWidth = 1;
  for (let i = 0; i <= 4; i++) {
    const v = (max * i) / 4;
    g.beginPath();
    g.moveTo(left, y(v));
    g.lineTo(left + pw, y(v));
    g.stroke();
    g.fillText(opts.format ? opts.format(v) : human(v), 2, y(v) + 4);
  }
  if (times.length) {
    g.fillText(time(t0), left, h - 4);
    const label = time(t1);
    g.fillText(label, left + pw - g.measureText(label).width, h - 4);
  }
  const drawnKinds = {};
  for (const m of opts.markers || []) {
    if (m.t_ms < t0 || m.t_ms > t1) continue;
    const style = MARKER_STYLE[m.kind];
    g.strokeStyle = markerColor(m.kind);
    g.setLineDash(style.dash);
    g.globalAlpha = style.alpha;
    g.lineWidth = style.width;
    g.beginPath();
    g.moveTo(x(m.t_ms), top);
    g.lineTo(x(m.t_ms), top + ph);
    g.stroke();
    drawnKinds[m.kind] = g.strokeStyle;
  }
  // What was drawn, kind=colour, for tests (the legend's swatches carry the same colours).
  canvas.dataset.markers = Object.entries(drawnKinds).map(([k, c]) => k + "=" + c).sort().join(";");
  g.setLineDash([]);
  g.globalAlpha = 1;
  let drawn = 0;
  for (const s of series) {
    g.strokeStyle = s.color;
    g.lineWidth = 1.6;
    g.setLineDash(s.dash || []);
    g.beginPath();
    let pen = false;
    s.values.forEach((v, i) => {
      if (v === null || v === undefined) { pen = false; return; }
      drawn++;
      if (pen) g.lineTo(x(times[i]), y(v)); else g.moveTo(x(times[i]), y(v));
      pen = true;
    });
    g.stroke();
  }
  g.setLineDash([]);
  canvas.dataset.points = String(drawn);
}

const MARKER_STYLE = {
  decision: { dash: [2, 3], alpha: 0.45, width: 1 },
  capacity: { dash: [1, 2], alpha: 0.6, width: 1 },
  change: { dash: [], alpha: 1, width: 1.5 },
  error: { dash: [], alpha: 1, width: 1.5 },
};

// A marker's colour is its legend swatch's, so the legend cannot disagree with the charts.
function markerColor(kind) {
  const swatch = document.querySelector(`.markers-key li[data-kind="${kind}"] i`);
  return swatch ? getComputedStyle(swatch).backgroundColor : css("--" + kind);
}

function markers() {
  const out = [];
  for (const s of samples) if (s.policy_actions > 0) out.push({ t_ms: s.t_ms, kind: "decision" });
  for (const e of log) {
    if (ERROR_EVENTS.has(e.kind)) out.push({ t_ms: e.at_ms, kind: "error" });
    else if (CAPACITY_EVENTS.has(e.kind)) out.push({ t_ms: e.at_ms, kind: "capacity" });
    else if (CHANGE_EVENTS.has(e.kind)) out.push({ t_ms: e.at_ms, kind: "change" });
  }
  return out;
}

function drawCharts() {
  const times = samples.map((s) => s.t_ms);
  const col = (k) => samples.map((s) => s[k]);
  const m = markers();
  draw($("chart-rate"), times, [
    { values: col("requests_per_s"), color: css("--c0") },
    { values: col("hits_per_s"), color: css("--c1") },
    { values: col("misses_per_s"), color: css("--c2") },
  ], { markers: m });
  draw($("chart-hit"), times, [{ values: col("hit_ratio"), color: css("--c1") }],
    { max: 1, format: (v) => (v * 100).toFixed(0) + "%", markers: m });
  // Bytes when the capacity is in bytes, objects otherwise.
  const last = samples[samples.length - 1] || {};
  const inBytes = last.capacity_bytes !== null && last.capacity_bytes !== undefined;
  $("size-unit").textContent = inBytes ? "(bytes)" : "(objects)";
  const size = inBytes ? col("bytes") : col("objects");
  const cap = inBytes ? col("capacity_bytes") : col("capacity_objects");
  draw($("chart-size"), times, [
    { values: size, color: css("--c0") },
    { values: cap, color: css("--c3"), dash: [5, 3] },
  ], { markers: m, format: inBytes ? bytes : human });
  draw($("chart-evict"), times, [{ values: col("evictions_per_s"), color: css("--c2") }], { markers: m });
  draw($("chart-store"), times, [{ values: col("store_reads_per_s"), color: css("--c0") }], { markers: m });
  if (samples.length) {
    const secs = Math.round((samples[samples.length - 1].t_ms - samples[0].t_ms) / 1000);
    $("window").textContent = "Window: last " + secs + " s, " + samples.length + " samples.";
  }
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows.map(([cells, cls]) => {
    const tr = document.createElement("tr");
    if (cls) tr.className = cls;
    for (const [text, num] of cells) {
      const td = document.createElement("td");
      td.textContent = text;
      if (num) td.className = "num";
      tr.append(td);
    }
    return tr;
  }));
}

function defs(dl, pairs) {
  dl.replaceChildren();
  if (!pairs.length) {
    const dd = document.createElement("dd");
    dd.className = "muted";
    dd.textContent = "none";
    dl.append(dd);
  }
  for (const [k, v] of pairs) {
    const dt = document.createElement("dt");
    dt.textContent = k;
    const dd = document.createElement("dd");
    dd.textContent = v === "" ? "–" : String(v);
    dl.append(dt, dd);
  }
}

function showPolicy(policy) {
  const status = policy.status || {};
  $("policy-active").textContent = policy.active || "none";
  const keys = ["previous", "suspended", "tick_ms", "ticks", "actions", "errors", "fallbacks", "last_decision", "last_error", "durable"];
  const pairs = keys.filter((k) => k in status).map((k) => [k, status[k]]);
  if (policy.error) pairs.push(["dashboard", policy.error]);
  defs($("policy-status"), pairs);
  defs($("policy-params"), Object.entries(policy.params || {}));
  log = policy.log || [];
  showLog();
}

// The policy log at the chosen level and above; the table says how many rows it shows.
function showLog() {
  const shown = log.filter((e) => (LEVELS[e.level] ?? 0) >= minLevel);
  const table = $("policy-log");
  table.dataset.shown = String(shown.length);
  table.dataset.hidden = String(log.length - shown.length);
  fill(table.tBodies[0], shown.slice().reverse().map((e) => [[
    [time(e.at_ms)], [e.kind], [e.policy || "–"], [e.message],
  ], e.level === "error" ? "error" : e.level === "warn" ? "warn" : "info"]));
}

function showClasses(classes) {
  $("classes-card").hidden = !classes.length;
  fill($("classes").tBodies[0], classes.map((c) => [[
    [c.name], [human(c.objects), 1], [bytes(c.bytes), 1],
    [c.hit_ratio === null ? "–" : (c.hit_ratio * 100).toFixed(1) + "%", 1],
    [human(c.hits), 1], [human(c.misses), 1], [human(c.evictions), 1],
    [human(c.bypassed), 1], [human(c.fenced), 1], [human(c.refused), 1],
  ]]));
}

function showCluster(cluster) {
  $("cluster-card").hidden = !cluster;
  if (!cluster) return;
  $("cluster-name").textContent = cluster.name || "";
  const unassigned = (cluster.unassigned || []).join(", ");
  $("cluster-summary").textContent = "this node: " + cluster.node + " · epoch " + cluster.epoch +
    " · etcd " + (cluster.connected ? "connected" : "unreachable (last view shown)") +
    " · slots without a live owner: " + cluster.failed_slots + (unassigned ? " · unassigned: " + unassigned : "");
  // Each node samples only itself: the load column is this node's (open another node's
  // dashboard for its own).
  const last = samples[samples.length - 1];
  fill($("cluster-nodes").tBodies[0], cluster.nodes.map((n) => [[
    [n.id + (n.me ? " (this node)" : "")], [n.addr || "–"], [n.alive ? "up" : "down"],
    [String(n.slots), 1], [n.me && last ? human(last.requests_per_s) : "–", 1], [n.ranges.join(", ")],
  ], n.alive ? "" : "error"]));
  fill($("cluster-migrations").tBodies[0], cluster.migrations.map((m) => [[[m.range], [m.from], [m.to]]]));
}

function apply(state) {
  const sv = state.server;
  $("server").textContent = "v" + sv.version + " · " + sv.addr + " · " + sv.backend + " · " +
    sv.algorithm + " · up " + sv.uptime_s + " s";
  $("admin-card").hidden = !sv.admin;
  if (state.samples.length) {
    samples = samples.concat(state.samples).slice(-WINDOW);
    lastSeq = samples[samples.length - 1].seq;
    received += state.samples.length;
    document.body.dataset.points = String(received);
    $("points").textContent = String(received);
  }
  showPolicy(state.policy);
  showClasses(state.classes || []);
  showCluster(state.cluster);
  drawCharts();
  lastOk = Date.now();
}

async function poll() {
  try {
    const response = await fetch("api/state?after=" + lastSeq, { cache: "no-store" });
    if (!response.ok) throw new Error(response.status);
    const state = await response.json();
    // A server that restarted has fewer samples than this page saw: start over.
    if (state.samples.length && state.samples[state.samples.length - 1].seq < lastSeq) {
      samples = [];
      lastSeq = 0;
    }
    apply(state);
  } catch (e) {
    // Shown by the stale dot; the next poll tries again.
  }
  $("live").className = "dot " + (Date.now() - lastOk < 3 * POLL_MS ? "ok" : "stale");
  setTimeout(poll, POLL_MS);
}

async function admin(path, body) {
  const result = $("admin-result");
  result.className = "";
  result.textContent = "…";
  try {
    const response = await fetch("api/admin/" + path, {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Mantle-Password": $("admin-password").value },
      body: JSON.stringify(body || {}),
    });
    const answer = await response.json();
    if (!response.ok) throw new Error(answer.error || response.status);
    result.textContent = path + ": " + JSON.stringify(answer.ok);
  } catch (e) {
    result.className = "error";
    result.textContent = path + " failed: " + e.message;
  }
}

$("form-push").addEventListener("submit", (e) => {
  e.preventDefault();
  admin("push", { name: $("push-name").value, source: $("push-source").value });
});
$("form-use").addEventListener("submit", (e) => {
  e.preventDefault();
  const v = $("use-version").value;
  admin("use", { name: $("use-name").value, version: v ? Number(v) : null });
});
$("rollback").addEventListener("click", () => admin("rollback"));
$("form-param").addEventListener("submit", (e) => {
  e.preventDefault();
  admin("param", { key: $("param-key").value, value: $("param-value").value });
});
window.addEventListener("resize", drawCharts);
poll();

{
  const select = $("log-level");
  select.value = Object.keys(LEVELS).find((k) => LEVELS[k] === minLevel);
  select.addEventListener("change", () => {
    minLevel = LEVELS[select.value];
    showLog();
  });
}
// The command latency panel: its own endpoint, polled less often than the charts (the
// figures are cumulative). `data-rows` on the table counts the commands shown.
const COMMANDS_POLL_MS = 2000;

async function pollCommands() {
  try {
    const response = await fetch("api/commands", { cache: "no-store" });
    if (!response.ok) throw new Error(response.status);
    const answer = await response.json();
    const table = $("commands");
    const body = table.tBodies[0];
    if (answer.commands.length) {
      body.replaceChildren(...answer.commands.map((c) => {
        const tr = document.createElement("tr");
        const cells = [c.name, human(c.calls), c.usec_per_call.toFixed(2), c.p50_us, c.p99_us, c.p999_us, c.max_us];
        cells.forEach((v, i) => {
          const td = document.createElement("td");
          td.textContent = i === 0 ? v : String(v);
          if (i > 0) td.className = "num";
          tr.appendChild(td);
        });
        return tr;
      }));
    }
    table.dataset.rows = String(answer.commands.length);
  } catch (e) {
    // The next poll tries again; the charts' dot shows a server that stopped answering.
  }
  setTimeout(pollCommands, COMMANDS_POLL_MS);
}

pollCommands();
