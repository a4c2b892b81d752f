"use strict";
// The task list: one page from /api/tasks, kept live by /api/changes (one stream for all rows).
const rows = new Map();
let nextAfter = null;
let reloadTimer = null;

function filterState() { return document.getElementById("state").value; }

function row(task) {
  const link = el("a", { href: "/task?id=" + encodeURIComponent(task.id) }, task.id);
  const tr = el("tr", { "data-task-id": task.id },
    el("td", { class: "id" }, link),
    el("td", { class: "state-cell" }, stateBadge(task.state)),
    el("td", { class: "progress-cell" }, bar(task.progress)),
    el("td", { class: "version" }, String(task.version)),
    el("td", { class: "attempts" }, task.attempts + " / " + task.maxAttempts));
  tr.dataset.version = String(task.version);
  return tr;
}

function update(change) {
  const tr = rows.get(change.taskId);
  if (!tr) {
    if (!filterState() || filterState() === change.state) scheduleReload();
    return;
  }
  if (Number(tr.dataset.version) >= change.version) return;
  tr.dataset.version = String(change.version);
  tr.querySelector(".state-cell").replaceChildren(stateBadge(change.state));
  setBar(tr.querySelector(".bar"), change.progress);
  tr.querySelector(".version").textContent = String(change.version);
}

async function load(append) {
  const params = new URLSearchParams({ limit: "50" });
  if (filterState()) params.set("state", filterState());
  if (append && nextAfter) params.set("after", nextAfter);
  const response = await fetch("/api/tasks?" + params, { credentials: "same-origin" });
  if (!response.ok) { setStatus("listing failed: " + response.status); return; }
  const page = await response.json();
  const body = document.getElementById("tasks");
  if (!append) { body.replaceChildren(); rows.clear(); }
  for (const task of page.tasks) {
    const tr = row(task);
    rows.set(task.id, tr);
    body.append(tr);
  }
  nextAfter = page.nextAfter || null;
  document.getElementById("more").hidden = !nextAfter;
}

function scheduleReload() {
  if (reloadTimer) return;
  reloadTimer = setTimeout(() => { reloadTimer = null; load(false); }, 300);
}

function follow() {
  const source = new EventSource("/api/changes");
  source.addEventListener("open", () => { setStatus("live"); scheduleReload(); });
  source.addEventListener("change", (e) => update(JSON.parse(e.data)));
  source.addEventListener("resync", () => scheduleReload());
  source.addEventListener("error", () => setStatus("reconnecting…"));
}

document.getElementById("state").addEventListener("change", () => load(false));
document.getElementById("more").addEventListener("click", () => load(true));
load(false).then(follow);
