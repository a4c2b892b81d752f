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
