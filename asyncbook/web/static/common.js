"use strict";
// Shared helpers for the status pages: no framework, no network beyond this server.
function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs || {})) {
    if (key === "class") node.className = value; else node.setAttribute(key, value);
  }
  for (const child of children) node.append(child);
  return node;
}
function bar(progress) {
  const inner = el("div");
  inner.style.width = Math.max(0, Math.min(100, progress)) + "%";
  const outer = el("span", { class: "bar", role: "progressbar", "aria-valuemin": "0",
    "aria-valuemax": "100" }, inner);
  setBar(outer, progress);
  return outer;
}
function setBar(outer, progress) {
  outer.setAttribute("aria-valuenow", String(progress));
  outer.dataset.progress = String(progress);
  outer.firstChild.style.width = Math.max(0, Math.min(100, progress)) + "%";
  outer.classList.toggle("done", progress >= 100);
}
function stateBadge(state) {
  return el("span", { class: "state " + state, "data-state": state }, state);
}
function itemUrl(prefix, id, suffix) {
  const tail = suffix ? "/" + suffix : "";
  // A browser drops "." and ".." path segments, even as %2E: those ids go in the query.
  if (id === "." || id === "..") return prefix + tail + "?id=" + id;
  return prefix + encodeURIComponent(id) + tail;
}
function taskUrl(id, suffix) { return itemUrl("/api/tasks/", id, suffix); }
function groupUrl(id, suffix) { return itemUrl("/api/groups/", id, suffix); }
function taskPageUrl(id) { return "/task?id=" + encodeURIComponent(id); }
function groupPageUrl(id) { return itemUrl("/groups/", id); }
function formatTime(ms) {
  // A Date holds ±8.64e15 ms; past that (a far deadline) show the number itself.
  const date = new Date(ms);
  return Number.isNaN(date.getTime()) ? String(ms) + " ms" : date.toISOString();
}
function setStatus(text) {
  document.getElementById("status").textContent = text;
}

// -- the console's shared pieces: states, formats, JSON reads, the URL as the page's state ----

const STATES = ["queued", "running", "succeeded", "failed", "expired", "cancelled"];

function formatDuration(ms) {
  if (ms === null || ms === undefined || !Number.isFinite(Number(ms))) return "";
  const value = Number(ms);
  if (value < 1000) return Math.round(value) + " ms";
  if (value < 60_000) return (Math.round(value / 100) / 10) + " s";
  const seconds = Math.round(value / 1000);
  if (seconds < 3600) return Math.floor(seconds / 60) + " min " + (seconds % 60) + " s";
  return Math.floor(seconds / 3600) + " h " + Math.floor((seconds % 3600) / 60) + " min";
}
function formatShortTime(ms) {
  // "12:03:04" today, "2024-06-01 12:03" before (UTC): the cells stay narrow; a title
  // carries the exact instant.
  if (ms === null || ms === undefined) return "";
  const date = new Date(ms);
  if (Number.isNaN(date.getTime())) return String(ms) + " ms";
  const iso = date.toISOString();
  return iso.slice(0, 10) === new Date().toISOString().slice(0, 10)
    ? iso.slice(11, 19) : iso.slice(0, 16).replace("T", " ");
}
function formatAgo(ms, nowMs) {
  const seconds = Math.max(0, Math.round((nowMs - ms) / 1000));
  if (seconds < 60) return seconds + " s ago";
  if (seconds < 3600) return Math.floor(seconds / 60) + " min ago";
  return Math.floor(seconds / 3600) + " h " + Math.floor((seconds % 3600) / 60) + " min ago";
}
function timeCell(ms) {
  // A <time> element: the short form shown, the full instant as its datetime and title.
  if (ms === null || ms === undefined) return "";
  const text = formatShortTime(ms);
  const node = el("time", { title: formatTime(ms) + " (UTC)" }, text);
  const date = new Date(ms);
  if (!Number.isNaN(date.getTime())) node.setAttribute("datetime", date.toISOString());
  return node;
}
function percentText(progress) {
  return String(Math.round(Number(progress) * 10) / 10) + "%";
}
function listUrl(filters) {
  // The task list filtered by {name, state, worker, ...}: a link to share.
  const params = new URLSearchParams();
  for (const [key, value] of Object.entries(filters)) if (value) params.set(key, value);
  const query = params.toString();
  return "/" + (query ? "?" + query : "");
}

class ApiError extends Error {
  // A refusal from the API: its HTTP status, and the field it names (a 400's "field").
  constructor(status, answer) {
    super(answer.message || "the server answered " + status);
    this.status = status;
    this.field = answer.field || null;
  }
}
async function getJson(url) {
  const response = await fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } });
  if (!response.ok) {
    const answer = await response.json().catch(() => ({}));
    throw new ApiError(response.status, answer);
  }
  return response.json();
}

function throttled(fn, gapMs) {
  // Calls fn at most once per gapMs, the last request always honoured (a trailing call).
  let timer = null;
  let last = 0;
  return () => {
    if (timer) return;
    const wait = Math.max(0, last + gapMs - Date.now());
    timer = setTimeout(() => { timer = null; last = Date.now(); fn(); }, wait);
  };
}

function followChanges(onChange, onResync) {
  // The book's change feed: one SSE stream for every task. Reconnects on its own.
  const source = new EventSource("/api/changes");
  source.addEventListener("open", () => { setStatus("live"); onResync(); });
  source.addEventListener("change", (e) => onChange(JSON.parse(e.data)));
  source.addEventListener("resync", () => onResync());
  source.addEventListener("error", () => setStatus("reconnecting…"));
  return source;
}

function fillNameSelect(select, names, current) {
  // "all" then every name the book knows; a name from the URL it does not know stays.
  const known = new Set(names);
  if (current && !known.has(current)) names = [current, ...names];
  select.replaceChildren(el("option", { value: "" }, "all names"),
    ...names.map((name) => el("option", { value: name }, name)));
  select.value = current || "";
}

// -- a change's dialog (cancel, resend, a search's resend): a reason, the API token when the
// server asks for it, a POST. Its parts are ids `${prefix}-dialog`, -reason, -token-field,
// -token, -error and -confirm.

const mayChange = document.body.dataset.role !== "read"; // the server says who reads the page
let apiToken = ""; // typed into a change's dialog; kept by this page only, never stored

function openChangeDialog(prefix) {
  // The dialog, cleared, shown modal, its reason field focused.
  document.getElementById(prefix + "-reason").value = "";
  document.getElementById(prefix + "-error").textContent = "";
  document.getElementById(prefix + "-confirm").disabled = false;
  document.getElementById(prefix + "-dialog").showModal();
  document.getElementById(prefix + "-reason").focus();
}

function changeReason(prefix) {
  // The dialog's reason as a change's JSON body: {} when none was typed.
  const reason = document.getElementById(prefix + "-reason").value;
  return reason.trim() ? { reason } : {};
}

async function postChange(prefix, url, body, verb) {
  // POST body as JSON with the API token, the confirm button disabled meanwhile (a second
  // click sends nothing). Answers {response, answer}, or null when the dialog already said
  // why not: no answer, or the token is needed ("Resending needs the API token.").
  const confirm = document.getElementById(prefix + "-confirm");
  const error = document.getElementById(prefix + "-error");
  const tokenField = document.getElementById(prefix + "-token-field");
  const tokenInput = document.getElementById(prefix + "-token");
  if (!tokenField.hidden && tokenInput.value) apiToken = tokenInput.value;
  const headers = { "Content-Type": "application/json" };
  if (apiToken) headers.Authorization = "Bearer " + apiToken;
  confirm.disabled = true;
  error.textContent = "";
  let response;
  let answer = {};
  try {
    response = await fetch(url, {
      method: "POST", headers, credentials: "same-origin", body: JSON.stringify(body),
    });
    answer = await response.json().catch(() => ({}));
  } catch (failure) {
    error.textContent = "The server did not answer: " + failure.message;
    return null;
  } finally {
    confirm.disabled = false;
  }
  if (response.status === 401) {
    // The sign-in cookie opens pages only: a change needs the API token itself.
    apiToken = "";
    tokenField.hidden = false;
    error.textContent = tokenInput.value ? "That token is not valid." : verb + " needs the API token.";
    tokenInput.focus();
    return null;
  }
  return { response, answer };
}
