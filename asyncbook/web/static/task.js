"use strict";
// One task: its fields, a live bar and its history, all from the task's SSE stream.
const taskId = new URLSearchParams(location.search).get("id") || "";
let shownVersion = 0;

function showSummary(task) {
  const fields = [
    ["State", stateBadge(task.state)], ["Progress", bar(task.progress)],
    ["Version", String(task.version)], ["Attempts", task.attempts + " / " + task.maxAttempts],
    ["Deadline", formatTime(task.expiresAtMs)],
  ];
  for (const key of ["resultRef", "resultHash", "error"]) {
    if (task[key] !== undefined) fields.push([key, task[key]]);
  }
  const list = document.getElementById("summary");
  list.replaceChildren();
  for (const [name, value] of fields) list.append(el("dt", {}, name), el("dd", {}, value));
  list.dataset.state = task.state;
  list.dataset.version = String(task.version);
}

function addHistory(entry) {
  if (entry.version <= shownVersion) return;
  shownVersion = entry.version;
  const { type, atMs, ...details } = entry.event;
  document.getElementById("history").append(el("tr", { "data-version": String(entry.version) },
    el("td", {}, String(entry.version)), el("td", {}, type),
    el("td", { class: "time", title: String(atMs) + " ms" }, formatTime(atMs)),
    el("td", {}, el("pre", {}, JSON.stringify(details)))));
}

function follow() {
  document.getElementById("title").textContent = taskId;
  const source = new EventSource(taskUrl(taskId, "stream"));
  source.addEventListener("open", () => setStatus("live"));
  source.addEventListener("snapshot", (e) => {
    const task = JSON.parse(e.data);
    document.getElementById("history").replaceChildren();
    shownVersion = 0;
    for (const entry of task.history || []) addHistory(entry);
    showSummary(task);
  });
  source.addEventListener("change", (e) => addHistory(JSON.parse(e.data)));
  source.addEventListener("task", (e) => showSummary(JSON.parse(e.data)));
  source.addEventListener("end", () => { source.close(); setStatus("finished"); });
  source.addEventListener("stream-error", (e) => {
    source.close();
    setStatus(JSON.parse(e.data).message);
  });
  source.addEventListener("error", () => {
    setStatus(source.readyState === EventSource.CLOSED ? "not found" : "reconnecting…");
  });
}

follow();
