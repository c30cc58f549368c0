// fairgate console: polls the admin JSON API once a second and draws it.
// No framework, no external asset; every value goes in with textContent.
"use strict";

const LAYERS = ["identify", "rate", "concurrency", "shed", "bulkhead", "adaptive"];
const state = { info: null, tenants: [], unauthenticated: {}, pools: null, rejections: [],
  history: null, historyAt: 0, tenantHistory: new Map(), poolHistory: new Map() };
// The history is sampled every 10 s: it is fetched every HISTORY_EVERY ms,
// not at every poll.
const HISTORY_EVERY = 5000;

function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "class") e.className = v;
    else if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return e;
}

function fmt(x, digits) {
  if (x === null || x === undefined) return "–";
  return Number(x).toLocaleString("en-US", { maximumFractionDigits: digits === undefined ? 1 : digits });
}

// meter draws value against max; lowIsBad colours a nearly empty bucket.
function meter(value, max, lowIsBad) {
  const frac = max > 0 ? Math.max(0, Math.min(1, value / max)) : 0;
  let cls = "fill";
  if (lowIsBad && frac < 0.1) cls += " low";
  else if (lowIsBad && frac < 0.3) cls += " mid";
  else if (!lowIsBad && frac >= 1) cls += " low";
  else if (!lowIsBad && frac >= 0.75) cls += " mid";
  const fill = el("div", { class: cls });
  fill.style.width = (frac * 100).toFixed(1) + "%";
  return el("span", { class: "meter" }, el("span", { class: "track" }, fill),
    el("span", { text: fmt(value) + " / " + (max > 0 ? fmt(max) : "∞") }));
}

const SVG_NS = "http://www.w3.org/2000/svg";
// A sparkline's size in px: a line in the upper band (top high), bars below.
const SPARK = { w: 150, h: 30, top: 17 };

function svgEl(tag, attrs) {
  const e = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
  return e;
}

const sum = a => a.reduce((n, v) => n + v, 0);
const peak = a => a.reduce((m, v) => Math.max(m, v), 0);

// sparkline draws series (oldest first, one value per sample) as an inline
// SVG. The x axis is time: the newest sample is at the right edge, so a
// short series (a new server, a tenant a reload added) sits at the right.
// line, and ref dashed on the same scale, go in the upper band; bars in
// the lower one on their own scale, the part of each in a darker shade,
// and a mark under the samples where mark is true. Any non-zero bar is at
// least a pixel high.
function sparkline(o) {
  const n = o.bars.length;
  const cap = Math.max((state.history && state.history.samples) || n, n, 2);
  const slot = SPARK.w / cap, x0 = (cap - n) * slot;
  const lineMax = Math.max(1, peak(o.line), peak(o.ref || []));
  const barMax = Math.max(1, peak(o.bars));
  const barRoom = SPARK.h - SPARK.top - 3;
  const y = v => (SPARK.top - 1 - (v / lineMax) * (SPARK.top - 3)).toFixed(1);
  const points = a => {
    const p = a.map((v, i) => (x0 + (i + 0.5) * slot).toFixed(1) + "," + y(v));
    if (a.length === 1) p.unshift(x0.toFixed(1) + "," + y(a[0]));
    return p.join(" ");
  };
  const s = svgEl("svg", { class: "spark", width: SPARK.w, height: SPARK.h, viewBox: "0 0 " + SPARK.w + " " + SPARK.h,
    role: "img", "aria-label": o.title, "data-samples": n, "data-line": sum(o.line), "data-bars": sum(o.bars) });
  const title = svgEl("title");
  title.textContent = o.title;
  s.append(title, svgEl("rect", { class: "frame", x: 0, y: 0, width: SPARK.w, height: SPARK.h }),
    svgEl("line", { class: "axis", x1: 0, x2: SPARK.w, y1: SPARK.h - 0.5, y2: SPARK.h - 0.5 }));
  if (o.ref) s.append(svgEl("polyline", { class: "ref", points: points(o.ref) }));
  s.append(svgEl("polyline", { class: "line", points: points(o.line) }));
  o.bars.forEach((v, i) => {
    const x = x0 + i * slot + 0.2, w = Math.max(slot - 0.4, 0.8);
    if (o.mark && o.mark[i]) s.append(svgEl("rect", { class: "mark", x: x, width: w, y: SPARK.h - 2, height: 2 }));
    if (v <= 0) return;
    const hgt = Math.max(1, (v / barMax) * barRoom);
    s.append(svgEl("rect", { class: "bar " + (o.barClass || ""), x: x, width: w, y: SPARK.h - 2 - hgt, height: hgt }));
    const part = o.part ? Math.min(o.part[i], v) : 0;
    if (part > 0) {
      const ph = Math.max(1, (part / barMax) * barRoom);
      s.append(svgEl("rect", { class: "bar part", x: x, width: w, y: SPARK.h - 2 - ph, height: ph }));
    }
  });
  return s;
}

// historyNote stands in for a sparkline without samples.
function historyNote() {
  const res = state.history ? state.history.resolution_seconds : 10;
  return el("span", { class: "note spark-empty", text: state.history ? "collecting (every " + res + " s)" : "…" });
}

function historySpan() {
  const h = state.history;
  return "last " + fmt(h.resolution_seconds * h.samples / 60, 0) + " min, " + h.resolution_seconds + " s samples";
}

function tenantSpark(id) {
  const h = state.tenantHistory.get(id);
  if (!h || h.rejected.length === 0) return historyNote();
  const admitted = Array.isArray(h.admitted); // absent when the gate keeps no metrics
  const line = admitted ? h.admitted : h.in_flight;
  const res = state.history.resolution_seconds;
  const title = historySpan() + ": " +
    (admitted ? "admitted " + fmt(sum(h.admitted), 0) + " (peak " + fmt(peak(h.admitted), 0) + " in " + res + " s, the line); " : "") +
    "rejected " + fmt(sum(h.rejected), 0) + ", " + fmt(sum(h.overload), 0) + " of them overload (bars, dark); " +
    "in flight peak " + fmt(peak(h.in_flight), 0) + (admitted ? "" : " (the line)");
  return sparkline({ line: line, bars: h.rejected, part: h.overload, barClass: "rejected", title: title });
}

function poolSpark(name) {
  const h = state.poolHistory.get(name);
  if (!h || h.in_flight.length === 0) return historyNote();
  const shedding = h.shed_threshold.filter(v => v > 0).length;
  const title = historySpan() + ": in flight peak " + fmt(peak(h.in_flight), 0) + " of " + fmt(peak(h.seats), 0) +
    " seats (line, dashed); queued peak " + fmt(peak(h.queued), 0) + " (bars); admitted " + fmt(sum(h.admitted), 0) +
    ", mean wait peak " + fmt(peak(h.mean_wait_ms)) + " ms; shedding in " + shedding + " of " + h.in_flight.length + " samples (red)";
  return sparkline({ line: h.in_flight, ref: h.seats, bars: h.queued, barClass: "queue",
    mark: h.shed_threshold.map(v => v > 0), title: title });
}

function totalRejections(t) {
  return LAYERS.reduce((n, l) => n + (t.rejections_last_minute[l] || 0), 0);
}

function drawTenants() {
  const q = document.getElementById("search").value.trim().toLowerCase();
  const sort = document.getElementById("sort").value;
  let rows = state.tenants.filter(t => !q || t.id.toLowerCase().includes(q) || t.tier.toLowerCase().includes(q));
  rows.sort((a, b) => {
    if (sort === "rejections") return totalRejections(b) - totalRejections(a) || a.id.localeCompare(b.id);
    if (sort === "tier") return a.tier.localeCompare(b.tier) || a.id.localeCompare(b.id);
    return a.id.localeCompare(b.id);
  });
  const body = document.querySelector("#tenants tbody");
  body.replaceChildren(...rows.map(t => {
    const rl = t.rejections_last_minute;
    const top = Math.max(...LAYERS.map(l => rl[l] || 0));
    const chips = LAYERS.map(l => {
      const n = rl[l] || 0;
      const cls = "layer" + (n > 0 && n === top ? " top" : n > 0 ? " some" : "");
      return el("span", { class: cls, "data-layer": l, "data-count": n, title: l + " rejections in the last minute" }, l + " " + n);
    });
    let use = "–";
    if (t.pool_use) {
      use = el("span", { title: t.pool_use.within ? "within its fair share: never shed" : "above its fair share" },
        t.pool + ": " + fmt(t.pool_use.use, 2) + " / " + (t.pool_use.share === null ? "all free" : fmt(t.pool_use.share, 2)) +
        (t.pool_use.within ? "" : " ▲"));
    }
    return el("tr", { "data-tenant": t.id, class: top > 0 ? "hot" : "" },
      el("td", { class: "mono", text: t.id }),
      el("td", { text: t.tier }),
      el("td", {}, t.tokens === undefined ? el("span", { class: "note", text: "in Redis / " + fmt(t.burst) }) : meter(t.tokens, t.burst, true)),
      el("td", {}, meter(t.in_flight, t.max_concurrent, false)),
      el("td", {}, use),
      el("td", {}, el("div", { class: "layers" }, ...chips)),
      el("td", { class: "hist" }, tenantSpark(t.id)));
  }));
}

function drawUnauthenticated() {
  const n = LAYERS.reduce((sum, l) => sum + (state.unauthenticated[l] || 0), 0);
  const p = document.getElementById("unauthenticated");
  p.textContent = "Requests without a valid key rejected in the last minute: " + n +
    (n ? " (" + LAYERS.filter(l => state.unauthenticated[l]).map(l => l + " " + state.unauthenticated[l]).join(", ") + ")" : "");
  p.dataset.count = n;
}

function drawPools() {
  const p = state.pools;
  if (!p) return;
  document.getElementById("adaptive-limit").textContent = p.adaptive ? fmt(p.adaptive.limit, 0) : "off";
  document.getElementById("adaptive-inflight").textContent = p.adaptive ? fmt(p.adaptive.in_flight, 0) + " in flight" : "";
  document.getElementById("instances").textContent = p.instances ? fmt(p.instances, 0) : "–";
  document.getElementById("total-seats").textContent = p.total_seats ? fmt(p.total_seats, 0) : "–";
  const band = pr => {
    if (!pr) return "none";
    const names = Object.entries(p.priorities).sort((a, b) => b[1] - a[1]);
    for (const [name, base] of names) if (pr >= base) return pr + " (" + name + ")";
    return String(pr);
  };
  document.getElementById("shed-floor").textContent = band(p.shed_floor);
  document.getElementById("shed-bands").textContent = "bands: " + Object.entries(p.priorities).map(([k, v]) => k + " ≥ " + v).join(", ");
  const body = document.querySelector("#pools tbody");
  body.replaceChildren(...p.pools.map(s => el("tr", { "data-pool": s.name, class: s.shed_threshold > 0 || s.queued >= s.queue_length && s.queue_length > 0 ? "hot" : "" },
    el("td", { class: "mono", text: s.name }),
    el("td", {}, meter(s.in_flight, s.seats, false)),
    el("td", { text: s.borrowed + " (may " + s.borrow_limit + ")" }),
    el("td", { text: s.lent + " (may " + s.lendable + ")" }),
    el("td", {}, meter(s.queued, s.queue_length, false)),
    el("td", { text: s.admitted_last_minute ? fmt(s.mean_wait_ms) + " ms (" + s.admitted_last_minute + " admitted)" : "–" }),
    el("td", { text: s.mean_hold_ms ? fmt(s.mean_hold_ms) + " ms" : "–" }),
    el("td", { class: s.shed_threshold > 0 ? "shedding" : "", text: band(s.shed_threshold) }),
    el("td", { class: "hist" }, poolSpark(s.name)))));
}

function idButton(id, title) {
  return el("button", { class: "id mono", type: "button", title: title, onclick: () => showTrace(id) }, id);
}

function drawRejections() {
  const jaeger = state.info && state.info.jaeger_ui_url;
  const body = document.querySelector("#rejections tbody");
  document.getElementById("rejections-empty").style.display = state.rejections.length ? "none" : "";
  body.replaceChildren(...state.rejections.map(r => {
    let trace = "–";
    if (r.trace_id) {
      trace = el("span", {}, idButton(r.trace_id, "show the span tree"));
      if (jaeger) trace.append(" ", el("a", { href: jaeger.replace(/\/$/, "") + "/trace/" + r.trace_id, target: "_blank", rel: "noopener", text: "Jaeger ↗" }));
    }
    return el("tr", { "data-layer": r.layer },
      el("td", { class: "mono", text: new Date(r.time).toLocaleTimeString() }),
      el("td", { class: "mono", text: r.tenant || "(no key)" }),
      el("td", { class: "mono", text: r.route || "" }),
      el("td", {}, el("span", { class: "tag " + r.layer, text: r.layer })),
      el("td", { text: r.reason }),
      el("td", { text: r.status + (r.status !== 401 ? " · Retry-After " + Math.max(1, Math.ceil(r.retry_after_ms / 1000)) : "") }),
      el("td", {}, r.request_id ? idButton(r.request_id, "show the span tree") : "–"),
      el("td", {}, trace));
  }));
}

async function getJSON(path) {
  const resp = await fetch(path, { cache: "no-store" });
  const body = await resp.json();
  if (!resp.ok) throw new Error(body.error || resp.statusText);
  return body;
}

async function showTrace(id) {
  document.getElementById("trace-id").value = id;
  const note = document.getElementById("trace-note");
  const out = document.getElementById("trace");
  if (state.info && !state.info.traces) {
    note.textContent = "tracing is off: enable tracing (tracing.endpoint) to keep rejected traces";
    out.replaceChildren();
    return;
  }
  let t;
  try {
    t = await getJSON("admin/traces/" + encodeURIComponent(id));
  } catch (e) {
    note.textContent = e.message;
    out.replaceChildren();
    return;
  }
  note.textContent = "";
  const kids = {};
  for (const s of t.spans) (kids[s.parent_id || ""] = kids[s.parent_id || ""] || []).push(s);
  const ids = new Set(t.spans.map(s => s.span_id));
  const draw = s => {
    const attrs = Object.entries(s.attributes).sort().map(([k, v]) =>
      el("span", {}, el("b", { text: k + "=" }), typeof v === "number" && !Number.isInteger(v) ? fmt(v, 3) : String(v)));
    return el("div", { class: "span" + (s.said_no ? " no" : ""), "data-span": s.name },
      el("div", {}, el("span", { class: "name", text: s.name }), el("span", { class: "dur", text: "+" + fmt(s.start_ms, 2) + " ms, " + fmt(s.duration_ms, 2) + " ms" }),
        s.said_no ? el("span", { class: "said", text: "said no" }) : null, s.error ? el("span", { class: "err", text: s.error }) : null),
      el("div", { class: "attrs" }, ...attrs),
      ...(kids[s.span_id] || []).map(draw));
  };
  const roots = t.spans.filter(s => !s.parent_id || !ids.has(s.parent_id));
  const jaeger = state.info && state.info.jaeger_ui_url;
  out.replaceChildren(
    el("div", { class: "trace-head" }, "trace ", el("span", { class: "mono", text: t.trace_id }), " · request ", el("span", { class: "mono", text: t.request_id }),
      " · rejected by ", el("span", { class: "tag " + t.rejected_by, text: t.rejected_by }), " (" + t.reason + ", " + t.status + ")",
      jaeger ? el("span", {}, " · ", el("a", { href: jaeger.replace(/\/$/, "") + "/trace/" + t.trace_id, target: "_blank", rel: "noopener", text: "open in Jaeger ↗" })) : null),
    ...roots.map(draw));
}

async function poll() {
  const status = document.getElementById("status");
  if (document.hidden) { // a tab in the background asks for nothing
    status.dataset.state = "loading";
    status.textContent = "paused while hidden";
    setTimeout(poll, 1000);
    return;
  }
  try {
    const wantHistory = Date.now() - state.historyAt >= HISTORY_EVERY;
    // The history is a nicety: when it fails, the rest of the page still
    // shows (and the history is asked for again at the next poll).
    const [tenants, pools, rejections, history] = await Promise.all([getJSON("admin/tenants"), getJSON("admin/pools"),
      getJSON("admin/rejections?limit=50"), wantHistory ? getJSON("admin/history").catch(() => null) : null]);
    if (history) {
      state.history = history;
      state.historyAt = Date.now();
      state.tenantHistory = new Map((history.tenants || []).map(h => [h.id, h]));
      state.poolHistory = new Map((history.pools || []).map(h => [h.name, h]));
    }
    state.tenants = tenants.tenants || [];
    state.unauthenticated = tenants.unauthenticated_rejections_last_minute || {};
    state.pools = pools;
    state.rejections = rejections.rejections || [];
    drawTenants();
    drawUnauthenticated();
    drawPools();
    drawRejections();
    status.dataset.state = "ok";
    status.textContent = "live · " + new Date().toLocaleTimeString();
  } catch (e) {
    status.dataset.state = "error";
    status.textContent = "cannot reach the admin API: " + e.message;
  }
  setTimeout(poll, 1000);
}

document.getElementById("search").addEventListener("input", drawTenants);
document.getElementById("sort").addEventListener("change", drawTenants);
document.getElementById("trace-form").addEventListener("submit", ev => {
  ev.preventDefault();
  const id = document.getElementById("trace-id").value.trim();
  if (id) showTrace(id);
});
getJSON("admin/console").then(info => { state.info = info; }).catch(() => {}).finally(poll);
