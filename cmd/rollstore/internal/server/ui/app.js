// rollstore status page: polls GET /v1/ui/state and redraws the tables in
// place. Plain DOM, no dependencies; text goes in with textContent only.
"use strict";

const POLL_MS = 2000;
let polls = 0;
let lastOK = null;

// el builds an element: attrs sets attributes (class, data-*, title…),
// children are nodes or strings.
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null && v !== false) e.setAttribute(k, v === true ? "" : String(v));
  }
  for (const c of children) {
    if (c !== undefined && c !== null) e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function bytes(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i === 0 ? String(n) : n.toFixed(1)) + " " + units[i];
}

function duration(ns) {
  const ms = ns / 1e6;
  if (ms < 1) return "<1 ms";
  if (ms < 1000) return Math.round(ms) + " ms";
  return (ms / 1000).toFixed(1) + " s";
}

function clock(iso) {
  const d = new Date(iso);
  return isNaN(d) ? iso : d.toISOString().slice(11, 19) + "Z";
}

// stat is one figure of a table's summary; field names it for tests and
// scripts (data-field).
function stat(label, field, value, title) {
  return el("div", { class: "stat" }, el("dt", {}, label), el("dd", { "data-field": field, title: title }, value));
}

function grid(headers, rows, attrs) {
  return el("table", attrs || {},
    el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, ...rows.map((r) => el("tr", {}, ...r.map((c) => el("td", {}, c))))));
}

// owners groups the partitions by owner: "writer → p0000, p0003, …".
function owners(st, shard) {
  const by = new Map();
  for (const o of st.owners || []) {
    const w = o.writer || "(no live writer)";
    if (!by.has(w)) by.set(w, { addr: o.addr, parts: [] });
    by.get(w).parts.push(o.partition);
  }
  const rows = [...by.entries()].map(([w, v]) => [
    w + (w === shard ? " (this process)" : ""), v.addr || "", String(v.parts.length), v.parts.join(", ")]);
  return grid(["owner", "address", "partitions", ""], rows, { class: "owners", "data-field": "owners" });
}

function merges(ms) {
  if (ms.length === 0) return el("p", { class: "muted", "data-field": "merges" }, "No merge by this process yet.");
  const rows = ms.map((m) => [clock(m.at), m.trigger, m.outcome, m.outcome === "merged" && m.version ? "v" + m.version : "",
    String(m.generations), String(m.rows), String(m.reclaimed), duration(m.duration_ns), m.error || (m.leftover ? "more to merge" : "")]);
  return grid(["at", "by", "outcome", "version", "generations", "rows", "reclaimed", "took", ""], rows,
    { class: "merges", "data-field": "merges" });
}

function tableSection(t, shard) {
  const parts = [el("h2", {}, t.name)];
  if (t.error) {
    parts.push(el("p", { class: "problem", "data-field": "error" }, t.error.code + ": " + t.error.message));
  }
  const st = t.status;
  if (st) {
    if (st.backpressure) parts.push(el("p", { class: "problem", "data-field": "backpressure" }, "Appends refused: " + st.backpressure));
    const pending = st.pending || [];
    parts.push(el("dl", { class: "stats" },
      stat("base version", "version", String(st.version)),
      stat("rows", "rows", String(st.rows), "base rows + pending rows"),
      stat("base rows", "base_rows", String(st.base_rows)),
      stat("pending rows", "pending_rows", String(st.pending_rows)),
      stat("pending generations", "pending_generations", String(pending.length),
        pending.filter((g) => g.sealed).length + " sealed"),
      stat("partitions", "partitions", st.partitions ? String(st.partitions) : "none (schema 2: one per writer)"),
      stat("payload bytes", "payload_bytes", bytes(st.payload_bytes), st.payload_bytes + " bytes in the base version"),
      stat("data files", "data_files", String(st.data_files)),
    ));
    if (pending.length > 0) {
      parts.push(el("h3", {}, "Pending generations"));
      parts.push(grid(["shard", "generation", "state", "segments", "rows"],
        pending.map((g) => [g.shard, String(g.generation), g.sealed ? "sealed" : "open", String(g.segments), String(g.rows)]),
        { class: "pending", "data-field": "pending" }));
    }
    if ((st.owners || []).length > 0) {
      parts.push(el("h3", {}, "Partitions and owners"));
      parts.push(owners(st, shard));
    }
    const consumers = t.consumers || [];
    if (consumers.length > 0) {
      parts.push(el("h3", {}, "Consumers"));
      parts.push(grid(["group", "members", "epoch", "lag (rows)", "lag (seconds)", "committed"],
        consumers.map((g) => [g.group,
          (g.members || []).map((m) => m.name + " (" + m.partitions.length + ")").join(", ") || "named",
          String(g.epoch), String(g.lag_rows), g.lag_seconds.toFixed(1),
          g.committed_at ? clock(g.committed_at) : "never"]),
        { class: "consumers", "data-field": "consumers" }));
    }
  }
  parts.push(el("h3", {}, "Recent merges"));
  parts.push(merges(t.merges || []));
  return parts;
}

function render(s) {
  document.getElementById("process").textContent =
    "version " + s.version + (s.shard ? " · shard " + s.shard : " · no writer shard");
  document.getElementById("logout").hidden = !s.auth;

  const m = s.merger;
  const merger = document.getElementById("merger");
  let text = m.interval_ns > 0 ? "Merger: every " + duration(m.interval_ns) : "Merger: none in this process";
  if (m.last_pass) {
    const p = m.last_pass;
    text += " · pass " + p.n + " at " + clock(p.start) + ", took " + duration(p.duration_ns) + ": " +
      p.tables + " tables, " + p.merged + " merged, " + p.busy + " busy (another merger), " + p.failed + " failed" +
      (p.error ? " · " + p.error : "");
  } else if (m.interval_ns > 0) {
    text += " · no pass yet";
  }
  merger.replaceChildren(el("p", { "data-field": "merger", "data-passes": String(m.passes) }, text));

  // Each table keeps its section (found by name); its contents are
  // replaced, so the page does not jump while it refreshes.
  const main = document.getElementById("tables");
  const keep = new Map([...main.children].map((e) => [e.dataset.table, e]));
  const sections = s.tables.map((t) => {
    const sec = keep.get(t.name) || el("section", { class: "table", "data-table": t.name });
    sec.replaceChildren(...tableSection(t, s.shard));
    return sec;
  });
  if (sections.length === 0) sections.push(el("p", { class: "muted" }, "No tables yet."));
  if (s.more_tables > 0) sections.push(el("p", { class: "muted" }, s.more_tables + " more tables not shown."));
  main.replaceChildren(...sections);
}

function problem(msg) {
  const p = document.getElementById("problem");
  p.textContent = msg || "";
  p.hidden = !msg;
}

async function poll() {
  try {
    const resp = await fetch("/v1/ui/state", { credentials: "same-origin", cache: "no-store" });
    if (resp.status === 401) {
      problem("The session ended (it expired, or the token was removed): reload the page to log in again.");
    } else if (!resp.ok) {
      let msg = "HTTP " + resp.status;
      try { const b = await resp.json(); msg = b.error.code + ": " + b.error.message; } catch (e) { /* not JSON */ }
      problem("Could not refresh (" + msg + ")" + (lastOK ? "; showing the state of " + clock(lastOK) : ""));
    } else {
      const s = await resp.json();
      render(s);
      lastOK = s.time;
      polls++;
      const r = document.getElementById("refresh");
      r.textContent = "updated " + clock(s.time);
      r.dataset.polls = String(polls);
      problem("");
    }
  } catch (e) {
    problem("Could not refresh (" + e.message + ")" + (lastOK ? "; showing the state of " + clock(lastOK) : ""));
  }
  setTimeout(poll, POLL_MS);
}

poll();
