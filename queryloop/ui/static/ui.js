// queryloop ui: every string from a session's files goes into the page as text (textContent), never as markup.
"use strict";

const SVG_NS = "http://www.w3.org/2000/svg";
const COLOURS = ["#ef6c00", "#1565c0", "#2e7d32", "#6a1b9a", "#c62828", "#00838f", "#5d4037", "#ad1457"];

function el(tag, props, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (key === "class") node.className = value;
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child ?? "")));
  }
  return node;
}

// The launch's token: handed over in the address's fragment (never sent to a server), kept in this origin's
// storage — bound to the scheme, host and port, unlike a cookie, which a browser sends to every port of a host —
// and sent in a header with each request for data.
const TOKEN_KEY = "queryloop-ui-token";
const given = new URLSearchParams(location.hash.slice(1)).get("token");
if (given) {
  localStorage.setItem(TOKEN_KEY, given);
  history.replaceState(null, "", location.pathname + location.search);
}

function get(url) {
  const headers = { "X-Queryloop-Token": localStorage.getItem(TOKEN_KEY) || "" };
  return fetch(url, { credentials: "omit", cache: "no-store", headers });
}

async function getJson(url) {
  const response = await get(url);
  if (!response.ok) throw new Error(`${url}: ${response.status} ${await response.text()}`);
  return response.json();
}

function fill(tbody, rows) {
  tbody.replaceChildren(...rows.map((cells) => el("tr", {}, ...cells.map((c) => el("td", {}, c)))));
}

// ---- the list of sessions ----------------------------------------------------------------------

async function showSessions() {
  const data = await getJson("/api/sessions");
  document.getElementById("home").textContent = `under ${data.home}`;
  const rows = data.sessions.map((s) => [
    el("a", { href: `/session/${encodeURIComponent(s.session_id)}`, class: "session-link" }, s.session_id),
    s.project,
    s.started,
    s.runs,
    s.turns,
    s.cost_usd === null ? "—" : `$${s.cost_usd.toFixed(4)}`,
    s.ended,
  ]);
  fill(document.querySelector("#sessions tbody"), rows);
  document.getElementById("empty").hidden = rows.length > 0;
  document.getElementById("list-warnings").replaceChildren(...data.warnings.map((w) => el("li", {}, w)));
  document.getElementById("fleet").hidden = data.database === null;
  if (data.database !== null) {
    document.getElementById("database").textContent = data.database;
    fill(
      document.querySelector("#workers tbody"),
      data.workers.map((w) => [w.executor_id, w.state, w.host, w.pid ?? "—", w.beat_age_s === null ? "—" : `${w.beat_age_s} s ago`, w.recovered_by || "—"]),
    );
  }
}

// ---- one session ------------------------------------------------------------------------------

const sessionId = decodeURIComponent(location.pathname.split("/").pop());
const api = `/api/sessions/${encodeURIComponent(sessionId)}`;
let seen = null; // what the pictures were last drawn for: "<steps>/<running>"

function showTranscript(entries) {
  const items = entries.map((e) => {
    const head = el("div", { class: "entry-head" }, el("strong", {}, e.meta ? `${e.role} (hidden)` : e.role));
    if (e.reason) head.append(" · ", el("code", {}, e.reason));
    head.append(" · ", el("span", { class: "muted" }, e.timestamp));
    const blocks = e.blocks.map((b) =>
      el("div", { class: `block block-${b.kind.split(" ")[0]}` }, el("span", { class: "kind" }, b.kind), el("pre", {}, b.text)),
    );
    return el("li", { class: `entry entry-${e.type}` }, head, ...blocks);
  });
  document.getElementById("transcript").replaceChildren(...items);
}

function showLedgerAndCheckpoints(data) {
  fill(document.querySelector("#ledger tbody"), data.ledger.map((e) => [e.name, el("pre", {}, e.input), el("pre", {}, e.result), e.tool_use_id]));
  document.getElementById("no-ledger").hidden = data.ledger.length > 0;
  fill(
    document.querySelector("#checkpoints tbody"),
    data.checkpoints.map((c) => [c.seq, c.path, c.created ? "did not exist" : "saved", c.prompt_id]),
  );
  document.getElementById("no-checkpoints").hidden = data.checkpoints.length > 0;
  fill(
    document.querySelector("#agents tbody"),
    data.agents.map((a) => [
      a.agent_id,
      a.type,
      a.description,
      `${a.background ? "background" : "waited for"} · Agent call ${a.tool_use_id}`,
      `${a.ended} · ${a.turns} turn(s)`,
      el("pre", {}, a.answer),
    ]),
  );
  document.getElementById("no-agents").hidden = data.agents.length > 0;
  document.getElementById("calls-section").hidden = data.source !== "fleet";
  if (data.source === "fleet") {
    fill(document.querySelector("#calls tbody"), data.calls.map((c) => [c.tool, c.tool_use_id, c.state, c.executor_id]));
  }
  const select = document.getElementById("rewind-to");
  const chosen = select.value;
  select.replaceChildren(
    el("option", { value: "" }, "the session's first change"),
    ...data.prompts.map((p) => el("option", { value: p.uuid }, `user message ${p.uuid.slice(0, 8)}: ${p.text}`)),
  );
  select.value = chosen;
  document.getElementById("warnings").replaceChildren(...data.warnings.map((w) => el("li", {}, w)));
}

async function showSession() {
  const data = await getJson(api);
  document.getElementById("session-id").textContent = data.session_id;
  document.getElementById("where").textContent =
    data.source === "fleet" ? `ran in ${data.cwd} on the fleet (kept in the ${data.project})` : `ran in ${data.cwd} (project folder ${data.project})`;
  showTranscript(data.transcript);
  showLedgerAndCheckpoints(data);
}

function parseSvg(text) {
  const doc = new DOMParser().parseFromString(text, "image/svg+xml");
  const svg = doc.documentElement;
  for (const bad of svg.querySelectorAll("script, foreignObject")) bad.remove();
  for (const node of svg.querySelectorAll("*")) {
    for (const attr of [...node.attributes]) if (attr.name.startsWith("on")) node.removeAttribute(attr.name);
  }
  return document.importNode(svg, true);
}

// Each layer is drawn at Graphviz's size, so its labels stay readable, and scrolls in its box. A box opens on the
// run's path, not on the picture's top-left corner (the legend); "whole layer" fits the picture to the box, and a
// click on the fitted picture shows that spot at full size. A live redraw keeps what the reader chose.
const views = new Map(); // layer → { open, fit, left, top } of the box as it was before a redraw

function pathNames(path, layer) {
  // the layer's states the run left and the decisions it met there (Graphviz titles a node by its id)
  const names = new Set();
  for (const s of path.steps) if (s.layer === layer) names.add(s.from).add(`d.${s.from}.${s.event}`);
  return names;
}

function pathBox(picture, names) {
  // where the run's nodes lie in the picture, in its own pixels (scroll offsets included)
  const base = picture.getBoundingClientRect();
  let box = null;
  for (const node of picture.querySelectorAll("g.node")) {
    const title = node.querySelector("title");
    const current = node.classList.contains("current");
    if (!current && (title === null || !names.has(title.textContent))) continue;
    const r = node.getBoundingClientRect();
    const left = r.left - base.left + picture.scrollLeft;
    const top = r.top - base.top + picture.scrollTop;
    const here = { left, top, right: left + r.width, bottom: top + r.height };
    if (current) return here;
    box = box === null ? here : {
      left: Math.min(box.left, here.left), top: Math.min(box.top, here.top),
      right: Math.max(box.right, here.right), bottom: Math.max(box.bottom, here.bottom),
    };
  }
  return box;
}

function scrollToPath(picture, names) {
  const box = pathBox(picture, names);
  if (box === null) return;
  const margin = 24;
  const along = (low, high, size) => (high - low <= size ? (low + high - size) / 2 : low - margin);
  picture.scrollLeft = along(box.left, box.right, picture.clientWidth);
  picture.scrollTop = along(box.top, box.bottom, picture.clientHeight);
}

function setFit(box, fit) {
  box.querySelector(".picture").classList.toggle("fit", fit);
  box.querySelector(".fit-toggle").textContent = fit ? "actual size" : "whole layer";
}

function zoomInAt(box, event) {
  const picture = box.querySelector(".picture");
  const r = picture.querySelector("svg").getBoundingClientRect();
  const fx = (event.clientX - r.left) / r.width, fy = (event.clientY - r.top) / r.height;
  setFit(box, false);
  picture.scrollLeft = fx * picture.scrollWidth - picture.clientWidth / 2;
  picture.scrollTop = fy * picture.scrollHeight - picture.clientHeight / 2;
}

function layerBox(layer, text, ok, path, names) {
  const toggle = el("button", { type: "button", class: "fit-toggle" }, "whole layer");
  // not drawn (no Graphviz on the server): the line saying why, as text
  const picture = el("div", { class: "picture" }, ok ? parseSvg(text) : el("p", { class: "error" }, text));
  const box = el("details", { class: "layer", "data-layer": layer }, el("summary", {}, `layer ${layer}`), toggle, picture);
  toggle.addEventListener("click", () => setFit(box, !picture.classList.contains("fit")));
  picture.addEventListener("click", (event) => picture.classList.contains("fit") && zoomInAt(box, event));
  box.addEventListener("toggle", () => {
    if (box.open && !box.dataset.placed) {
      box.dataset.placed = "yes";
      scrollToPath(picture, names);
    }
  });
  const view = views.get(layer);
  box.open = view ? view.open : layer === path.layer || path.layers_taken.includes(layer);
  return box;
}

function keepViews() {
  for (const box of document.querySelectorAll("#layers details")) {
    const picture = box.querySelector(".picture");
    const fit = picture.classList.contains("fit");
    views.set(box.dataset.layer, { open: box.open, fit, left: picture.scrollLeft, top: picture.scrollTop });
  }
}

async function showLayers(path) {
  const pictures = await Promise.all(
    path.layers.map(async (layer) => {
      const response = await get(`${api}/layers/${encodeURIComponent(layer)}.svg`);
      return [layer, await response.text(), response.ok];
    }),
  );
  keepViews();
  const boxes = pictures.map(([layer, text, ok]) => layerBox(layer, text, ok, path, pathNames(path, layer)));
  document.getElementById("layers").replaceChildren(...boxes);
  highlight(path);
  for (const box of boxes) {
    const view = views.get(box.dataset.layer);
    if (!view) continue; // a first drawing: its toggle event places it on the path
    box.dataset.placed = "yes";
    setFit(box, view.fit);
    box.querySelector(".picture").scrollLeft = view.left;
    box.querySelector(".picture").scrollTop = view.top;
  }
}

function highlight(path) {
  // the state's own layer only: other layers draw it as a stub where their edges reach it
  for (const node of document.querySelectorAll("#layers g.node")) {
    const home = node.closest("details").dataset.layer === path.layer;
    const title = node.querySelector("title");
    node.classList.toggle("current", home && path.running && title !== null && title.textContent === path.current);
  }
}

function showCounters(path) {
  fill(document.querySelector("#steps tbody"), path.steps.map((s) => [s.n, s.from, s.event, s.reason, s.to]));
  const names = [...new Set(path.counters.flatMap((c) => Object.keys(c)))].filter((n) => path.counters.some((c) => c[n]));
  const box = document.getElementById("counters");
  if (names.length === 0) {
    box.replaceChildren(el("p", { class: "muted" }, path.traced ? "No counter moved." : "No path recorded."));
    return;
  }
  const width = 900, height = 180, pad = 30;
  const top = Math.max(1, ...path.counters.flatMap((c) => names.map((n) => c[n] || 0)));
  const x = (i) => pad + (i * (width - 2 * pad)) / Math.max(1, path.counters.length - 1);
  const y = (v) => height - pad - (v * (height - 2 * pad)) / top;
  const chart = document.createElementNS(SVG_NS, "svg");
  chart.setAttribute("viewBox", `0 0 ${width} ${height}`);
  chart.setAttribute("class", "chart");
  const axis = document.createElementNS(SVG_NS, "path");
  axis.setAttribute("d", `M${pad},${pad} V${height - pad} H${width - pad}`);
  axis.setAttribute("class", "axis");
  chart.append(axis);
  for (const [label, value] of [[String(top), top], ["0", 0]]) {
    const text = document.createElementNS(SVG_NS, "text");
    text.setAttribute("x", "4");
    text.setAttribute("y", String(y(value) + 4));
    text.textContent = label;
    chart.append(text);
  }
  const legend = el("ul", { class: "legend" });
  names.forEach((name, k) => {
    const line = document.createElementNS(SVG_NS, "polyline");
    const points = path.counters.map((c, i) => `${x(i)},${y(c[name] || 0)}`);
    line.setAttribute("points", points.join(" "));
    line.setAttribute("stroke", COLOURS[k % COLOURS.length]);
    line.setAttribute("class", "series");
    chart.append(line);
    const swatch = el("span", { class: "swatch" }, "━━ ");
    swatch.style.color = COLOURS[k % COLOURS.length];
    legend.append(el("li", {}, swatch, name));
  });
  box.replaceChildren(chart, legend);
}

function showStatus(path) {
  const status = document.getElementById("status");
  status.classList.toggle("running", path.running);
  if (!path.traced) status.textContent = "no path recorded";
  else if (path.running) status.textContent = `running · step ${path.steps.length} · now in ${path.current} (layer ${path.layer})`;
  else status.textContent = `ended in ${path.current} after ${path.steps.length} steps`;
  document.getElementById("no-path").hidden = path.traced;
  document.getElementById("path-problems").replaceChildren(...path.problems.map((p) => el("li", {}, p)));
}

async function poll() {
  try {
    const path = await getJson(`${api}/path`);
    const key = `${path.steps.length}/${path.running}`;
    if (key !== seen) {
      const first = seen === null;
      seen = key;
      showCounters(path);
      await showLayers(path);
      if (!first) await showSession();
      showStatus(path); // last: once the status says so, everything it says is drawn
    }
    setTimeout(poll, path.running ? 700 : 3000);
  } catch (error) {
    document.getElementById("status").textContent = `cannot read the session: ${error.message}`;
    setTimeout(poll, 3000);
  }
}

async function dryRun(event) {
  event.preventDefault();
  const to = document.getElementById("rewind-to").value;
  const plan = await getJson(`${api}/rewind?to=${encodeURIComponent(to)}`);
  const out = document.getElementById("rewind-result");
  if (plan.error) {
    out.replaceChildren(el("p", { class: "error" }, plan.error));
    return;
  }
  const parts = [el("p", { class: "rewind-summary" }, `dry run: ${plan.files.length} file(s) would be restored; nothing was changed`)];
  for (const f of plan.files) parts.push(el("h4", {}, f.path), el("pre", { class: "diff" }, f.diff));
  if (plan.incomplete) parts.push(el("p", {}, `${plan.dropped} older checkpoint(s) were dropped: files go back to the oldest state still kept`));
  if (plan.irreversible.length) {
    parts.push(el("p", {}, "cannot undo (side effects outside the checkpointed files):"));
    parts.push(el("ul", {}, ...plan.irreversible.map((e) => el("li", {}, `${e.name} ${e.input}`))));
  }
  for (const w of plan.warnings) parts.push(el("p", { class: "error" }, w));
  out.replaceChildren(...parts);
}

document.addEventListener("DOMContentLoaded", () => {
  if (document.body.dataset.page === "sessions") {
    showSessions().catch((error) => (document.getElementById("home").textContent = error.message));
  } else {
    showSession().catch((error) => (document.getElementById("status").textContent = error.message));
    document.getElementById("rewind").addEventListener("submit", dryRun);
    poll();
  }
});
