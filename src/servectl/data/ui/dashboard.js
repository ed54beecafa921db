// servectl gateway dashboard: reads /ui/api/... with the key as a Bearer header; changes nothing.
// The key lives in this tab's sessionStorage only (typed into the form, or given once as /ui#key=...,
// a fragment browsers never send); it never goes into a URL the gateway sees.
"use strict";

const KEY = "servectl-gateway-key";
const POLL_MS = 3000;
const LOG_POLL_MS = 2000;
const $ = (id) => document.getElementById(id);
let running = false;

function storedKey() { return sessionStorage.getItem(KEY); }

async function api(path) {
  const headers = { Accept: "application/json" };
  const key = storedKey();
  if (key) headers.Authorization = "Bearer " + key;
  const response = await fetch(path, { headers, cache: "no-store", credentials: "omit" });
  let body = {};
  try { body = await response.json(); } catch (_) { /* not JSON: use the status */ }
  if (!response.ok) {
    const error = new Error((body.error && body.error.message) || "HTTP " + response.status);
    error.status = response.status;
    throw error;
  }
  return body;
}

function cell(text, cls) {
  const td = document.createElement("td");
  td.textContent = text === null || text === undefined || text === "" ? "-" : String(text);
  if (cls) td.className = cls;
  return td;
}

function fill(tableId, rows, columns, empty) {
  const tbody = $(tableId).tBodies[0];
  const out = rows.map((row) => {
    const tr = document.createElement("tr");
    columns.forEach((col) => tr.appendChild(col(row)));
    return tr;
  });
  if (!out.length) {
    const tr = document.createElement("tr");
    const td = cell(empty, "empty");
    td.colSpan = $(tableId).tHead.rows[0].cells.length;
    tr.appendChild(td);
    out.push(tr);
  }
  tbody.replaceChildren(...out);
}

function gib(bytes) { return bytes === null || bytes === undefined ? "unknown" : (bytes / 2 ** 30).toFixed(1) + " GiB"; }
function clock(t) { return new Date(t * 1000).toLocaleTimeString([], { hour12: false }); }
function ms(v) { return v === null || v === undefined ? "-" : v.toFixed(0) + " ms"; }

function showOverview(o) {
  $("listen").textContent = o.gateway.listen;
  $("who").textContent = o.key ? "key: " + o.key : "no key needed (auth: none)";
  const problem = o.gateway.services_error ? "cannot list the services: " + o.gateway.services_error : "";
  $("problem").textContent = problem;
  $("problem").hidden = !problem;
  fill("aliases", o.aliases, [
    (a) => cell(a.alias), (a) => cell(a.profiles.join(" | ")), (a) => cell(a.profile),
    (a) => cell(a.state, a.state), (a) => cell(a.in_flight, "num"), (a) => cell(a.held, "num"),
  ], "no aliases");
  fill("services", o.services, [
    (s) => cell(s.profile), (s) => cell(s.served_name), (s) => cell(s.url), (s) => cell(s.state, s.state),
  ], "no servectl service runs");
  const g = o.gpus;
  if (!g.available) {
    fill("gpus", [g], [() => cell("unknown", "unknown"),
      (x) => { const td = cell(x.problem, "unknown wrap"); td.colSpan = 4; return td; }], "");
  } else {
    fill("gpus", g.devices, [
      (d) => cell(d.index), (d) => { const td = cell(d.name || d.problem || "unknown", "name"); td.title = td.textContent; return td; },
      (d) => cell(gib(d.memory_used_bytes), "num"), (d) => cell(gib(d.memory_free_bytes), "num"),
      (d) => cell(gib(d.memory_total_bytes), "num"),
    ], "no GPU");
  }
  const select = $("logservice");
  const names = o.services.map((s) => s.profile);
  const current = select.value;
  if (names.join("\n") !== Array.from(select.options, (x) => x.value).join("\n")) {
    select.replaceChildren(...names.map((n) => { const opt = document.createElement("option"); opt.value = n; opt.textContent = n; return opt; }));
    if (names.includes(current)) select.value = current;
  }
}

function showRequests(r) {
  fill("requests", r.requests, [
    (q) => cell(clock(q.at)), (q) => cell(q.alias), (q) => cell(q.key), (q) => cell(q.path),
    (q) => cell(q.status, "s" + String(q.status)[0]), (q) => cell(ms(q.latency_ms), "num"),
    (q) => cell(ms(q.ttfb_ms), "num"), (q) => cell(q.tokens_out, "num"),
  ], "no requests yet");
}

function showHistory(h) {
  fill("history", h.events, [
    (e) => cell(clock(e.t)), (e) => cell(e.event, e.event === "failed" ? "down" : ""), (e) => cell(e.profile),
    (e) => cell(e.replaced), (e) => cell(e.startup_s === undefined ? "" : e.startup_s.toFixed(1) + " s", "num"),
    (e) => cell(e.reason || e.signal || ""),
  ], h.warning || "no events yet");
}

async function refresh() {
  const [o, r, h] = await Promise.all([api("/ui/api/overview"), api("/ui/api/requests"), api("/ui/api/history")]);
  showOverview(o);
  showRequests(r);
  showHistory(h);
  $("updated").textContent = "updated " + new Date().toLocaleTimeString([], { hour12: false });
}

async function refreshLog() {
  const profile = $("logservice").value;
  const log = $("log");
  if (!profile) { log.textContent = "(no service)"; return; }
  const l = await api("/ui/api/logs?tail=200&profile=" + encodeURIComponent(profile));
  const atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
  log.textContent = l.problem ? "(" + l.problem + ")" : l.lines.join("\n");
  if (atEnd) log.scrollTop = log.scrollHeight;
}

function loop(step, every) {
  const tick = async () => {
    if (!running) return;
    try { await step(); } catch (err) {
      if (err.status === 401) { signOut(err.message); return; }
      $("problem").textContent = err.message;
      $("problem").hidden = false;
    }
    setTimeout(tick, every);
  };
  tick();
}

function signOut(message) {
  running = false;
  sessionStorage.removeItem(KEY);
  $("dashboard").hidden = true;
  $("signout").hidden = true;
  $("who").textContent = "";
  $("signin").hidden = false;
  $("signin-error").textContent = message || "";
  $("key").focus();
}

async function openDashboard() {
  try {
    await refresh();
  } catch (err) {
    if (err.status === 401) { signOut(storedKey() ? err.message : ""); return; }
    throw err;
  }
  $("signin").hidden = true;
  $("dashboard").hidden = false;
  $("signout").hidden = !storedKey();
  running = true;
  setTimeout(() => loop(refresh, POLL_MS), POLL_MS);
  loop(refreshLog, LOG_POLL_MS);
}

document.addEventListener("DOMContentLoaded", () => {
  const fragment = new URLSearchParams(location.hash.slice(1));
  if (fragment.get("key")) {
    sessionStorage.setItem(KEY, fragment.get("key"));
    history.replaceState(null, "", location.pathname);
  }
  $("keyform").addEventListener("submit", (event) => {
    event.preventDefault();
    const value = $("key").value.trim();
    $("key").value = "";
    if (!value) return;
    sessionStorage.setItem(KEY, value);
    openDashboard();
  });
  $("signout").addEventListener("click", () => signOut(""));
  $("logservice").addEventListener("change", () => refreshLog().catch(() => {}));
  openDashboard().catch((err) => { $("signin").hidden = false; $("signin-error").textContent = err.message; });
});
