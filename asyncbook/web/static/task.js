"use strict";
// One task: its fields, a live bar and its history, all from the task's SSE stream; its
// info (name, arguments, worker, times, traceback, relatives) from /api/tasks/ID, read again
// when the stream says the task started, ended or was resent.
const taskId = new URLSearchParams(location.search).get("id") || "";
const LIVE_STATES = new Set(["queued", "running"]);
const RESEND_STATES = new Set(["failed", "expired", "cancelled"]);
let shownVersion = 0;
let infoState = null; // the task's state when its info was last read
let taskState = null; // the task's state as the stream last said
let taskInfo = null; // the info last read
let auditState = null; // the task's state when its audit trail was last asked for
let auditRetriedAs = null; // the resend its info named then (a resend leaves the state as it is)
let resultShown = null; // the resultRef whose result is shown
let cancelling = false; // a cancel is on its way: its answer, not the stream, closes the dialog

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
  taskState = task.state;
  showActions(task.state);
  if (task.state !== infoState) refreshInfo();
  if (task.state === "succeeded" && task.resultRef !== resultShown) showResult(task.resultRef);
  if (task.state !== auditState) {
    auditState = task.state; // a change by hand changes the state: read the trail again
    refreshAudit();
  }
}

function addHistory(entry) {
  if (entry.version <= shownVersion) return;
  shownVersion = entry.version;
  const { type, atMs, ...details } = entry.event;
  document.getElementById("history").append(el("tr", { "data-version": String(entry.version) },
    el("td", {}, String(entry.version)), el("td", {}, type),
    el("td", { class: "time", title: String(atMs) + " ms" }, formatTime(atMs)),
    el("td", {}, el("pre", {}, JSON.stringify(details)))));
  if (type !== "progress") refreshInfo();
}

// -- result: a result stored by reference, inline when small JSON or text, else a link ------

const INLINE_LIMIT = 65536;

async function showResult(ref) {
  resultShown = ref;
  const url = taskUrl(taskId, "result");
  let head;
  try {
    head = await fetch(url, { method: "HEAD", credentials: "same-origin" });
  } catch (error) {
    return;
  }
  // No artifact store, or a result Celery keeps in Redis: its resultRef above says where.
  if (head.status === 404 || head.status === 409) return;
  const note = document.getElementById("result-note");
  const link = document.getElementById("result-download");
  const inline = document.getElementById("result-inline");
  document.getElementById("result-section").hidden = false;
  link.hidden = !head.ok;
  inline.hidden = true;
  if (!head.ok) {
    note.textContent = "The result could not be read (HTTP " + head.status + ")";
    return;
  }
  link.href = url;
  const type = (head.headers.get("Content-Type") || "").split(";")[0];
  const size = Number(head.headers.get("Content-Length") || "0");
  note.textContent = size + " bytes, " + type;
  if (size > INLINE_LIMIT || !(type === "application/json" || type.startsWith("text/"))) return;
  const response = await fetch(url, { credentials: "same-origin" });
  if (!response.ok) return;
  const text = await response.text();
  inline.textContent = type === "application/json" ? JSON.stringify(JSON.parse(text), null, 2) : text;
  inline.hidden = false;
}

// -- info: what Celery published and what the runs reported ------------------------------

function link(href, text) {
  return el("a", { href }, text);
}

function fullTime(ms) {
  if (ms === null || ms === undefined) return null;
  const node = timeCell(ms);
  node.textContent = formatTime(ms);
  return node;
}

function fields(list, pairs) {
  list.replaceChildren();
  for (const [name, value] of pairs) {
    if (value === null || value === undefined || value === "") continue;
    list.append(el("dt", {}, name), el("dd", {}, value));
  }
  return list.children.length > 0;
}

function showInfo(info) {
  const nameLine = document.getElementById("task-name");
  nameLine.replaceChildren();
  if (info.name) {
    nameLine.append(link(listUrl({ name: info.name }), info.name), " · ",
      link("/stats?name=" + encodeURIComponent(info.name), "stats"));
    document.title = "asyncbook — " + info.name + " " + taskId;
  }
  const retries = info.retries === null || info.retries === undefined ? null : String(info.retries);
  document.getElementById("info-section").hidden = !fields(document.getElementById("info"), [
    ["Name", info.name ? link(listUrl({ name: info.name }), info.name) : null],
    ["Queue", info.queue],
    ["Worker", info.worker ? link(listUrl({ worker: info.worker }), info.worker) : null],
    ["Created (UTC)", fullTime(info.createdAtMs)],
    ["Started (UTC)", fullTime(info.startedAtMs)],
    ["Ended (UTC)", fullTime(info.endedAtMs)],
    ["Runtime", formatDuration(info.runtimeMs)],
    ["Retries", retries],
    ["Resent by", info.retriedBy],
    ["Resend reason", info.retryReason],
  ]);
  const recorded = (value) => (value === null || value === undefined ? "(not recorded)" : value);
  document.getElementById("args-section").hidden = !info.args && !info.kwargs;
  document.getElementById("args").textContent = recorded(info.args);
  document.getElementById("kwargs").textContent = recorded(info.kwargs);
  document.getElementById("failure").hidden = !info.exception && !info.traceback;
  document.getElementById("exception").textContent = info.exception || "";
  document.getElementById("traceback").textContent = info.traceback || "";
  document.getElementById("traceback").hidden = !info.traceback;
  const children = info.children || [];
  const childList = children.length === 0 ? null : el("ul", { class: "links", id: "children" },
    ...children.map((id) => el("li", {}, link(taskPageUrl(id), id))));
  const root = info.rootId && info.rootId !== taskId && info.rootId !== info.parentId
    ? link(taskPageUrl(info.rootId), info.rootId) : null;
  document.getElementById("family").hidden = !fields(document.getElementById("relations"), [
    ["Group", info.groupId ? link(groupPageUrl(info.groupId), info.groupId) : null],
    ["Parent", info.parentId ? link(taskPageUrl(info.parentId), info.parentId) : null],
    ["Root", root],
    ["Children", childList],
    ["Resent from", info.retryOf ? link(taskPageUrl(info.retryOf), info.retryOf) : null],
    ["Resent as", info.retriedAs ? link(taskPageUrl(info.retriedAs), info.retriedAs) : null],
  ]);
  taskInfo = info;
  if (taskState) showActions(taskState);
  if ((info.rootId && info.rootId !== taskId) || info.groupId || children.length) showCanvas();
}

async function showCanvas() {
  // The canvas this task is part of, drawn by the server (its page stays live).
  const response = await fetch(itemUrl("/api/canvas/", taskId, "svg"), { credentials: "same-origin" });
  if (!response.ok) return;
  document.getElementById("task-canvas").innerHTML = await response.text();
  const mine = document.querySelector('#task-canvas g.node[data-id="' + CSS.escape(taskId) + '"] rect');
  if (mine) mine.setAttribute("stroke-width", "3"); // this task, among the canvas's
  document.getElementById("canvas-link").href = itemUrl("/canvas/", taskId);
  document.getElementById("canvas-section").hidden = false;
}

async function readInfo() {
  let answer;
  try {
    answer = await getJson(taskUrl(taskId));
  } catch (error) {
    if (error instanceof ApiError && error.status === 404) return; // the stream says so
    document.getElementById("message").textContent = "Its info could not be read: " + error.message;
    return;
  }
  document.getElementById("message").textContent = "";
  infoState = answer.state;
  if (answer.info) showInfo(answer.info);
  const retriedAs = (answer.info && answer.info.retriedAs) || null;
  if (retriedAs !== auditRetriedAs) {
    auditRetriedAs = retriedAs; // resent elsewhere: the trail has its entry
    refreshAudit();
  }
  document.getElementById("main").dataset.infoVersion = String(answer.version);
}

const refreshInfo = throttled(readInfo, 500);

// -- audit: who changed the task by hand (cancel, resend), newest first ----------------------

// What the book answered; a resend's entry also links to the new task it made (or named).
function auditOutcome(entry) {
  if (!entry.retriedAs) return [entry.outcome];
  return [entry.outcome + " as ", link(taskPageUrl(entry.retriedAs), entry.retriedAs)];
}

async function readAudit() {
  let answer;
  try {
    answer = await getJson(taskUrl(taskId, "audit"));
  } catch (error) {
    return; // a book without an audit trail (404), or a passing failure: nothing to show
  }
  const rows = answer.entries.map((entry) => el("tr", { "data-actor": entry.actor },
    el("td", { class: "time", title: String(entry.atMs) + " ms" }, formatTime(entry.atMs)),
    el("td", {}, entry.actor), el("td", {}, entry.action), el("td", {}, ...auditOutcome(entry)),
    el("td", {}, entry.reason || "")));
  document.getElementById("audit").replaceChildren(...rows);
  document.getElementById("audit-section").hidden = rows.length === 0;
}

const refreshAudit = throttled(readAudit, 500);

// -- cancel: a button while the task is live, a dialog to confirm, one POST ----------------

const cancelDialog = document.getElementById("cancel-dialog");

function announce(text) {
  const status = document.getElementById("action-status");
  status.textContent = text;
  return status;
}

function showActions(state) {
  const live = mayChange && LIVE_STATES.has(state);
  // Resend: an ended task whose message is kept, not resent yet (the server decides anyway).
  const resendable = mayChange && RESEND_STATES.has(state) && taskInfo !== null
    && taskInfo.messageKept && !taskInfo.retriedAs;
  document.getElementById("cancel-open").hidden = !live;
  document.getElementById("resend-open").hidden = !resendable;
  document.getElementById("actions").hidden = !live && !resendable;
  if (!live && cancelDialog.open && !cancelling) {
    cancelDialog.close();
    announce("The task ended meanwhile: " + state + ".").focus();
  }
}

function openCancel() {
  openChangeDialog("cancel");
}

function keepTask() {
  cancelDialog.close();
  document.getElementById("cancel-open").focus();
}

async function confirmCancel(event) {
  event.preventDefault();
  const error = document.getElementById("cancel-error");
  cancelling = true;
  let sent;
  try {
    sent = await postChange("cancel", taskUrl(taskId, "cancel"), changeReason("cancel"), "Cancelling");
  } finally {
    cancelling = false;
  }
  if (sent === null) return;
  const { response, answer } = sent;
  if (response.status === 403 && answer.code === "forbidden") {
    error.textContent = "Cancelling needs the operator role: " + (answer.message || "");
    return;
  }
  if (response.status === 400) {
    error.textContent = answer.message || "The server refused the request.";
    document.getElementById(answer.field === "reason" ? "cancel-reason" : "cancel-confirm").focus();
    return;
  }
  if (cancelDialog.open) cancelDialog.close();
  let text;
  if (response.ok) {
    text = answer.reason === "duplicate-cancel" ? "It was already cancelled." : "Cancelled.";
    readAudit();
  } else {
    text = "Not cancelled: " + (answer.message || "the server answered " + response.status);
  }
  announce(text).focus();
}

document.getElementById("cancel-open").addEventListener("click", openCancel);
document.getElementById("cancel-keep").addEventListener("click", keepTask);
document.getElementById("cancel-form").addEventListener("submit", confirmCancel);
cancelDialog.addEventListener("cancel", () => {
  // Escape closes the dialog; focus goes back to the button that opened it.
  setTimeout(() => document.getElementById("cancel-open").focus(), 0);
});

// -- resend: a button once the task failed, expired or was cancelled, a dialog, one POST ----

const resendDialog = document.getElementById("resend-dialog");

function openResend() {
  openChangeDialog("resend");
}

function closeResend() {
  resendDialog.close();
  document.getElementById("resend-open").focus();
}

function announceTask(text, id) {
  const status = announce("");
  status.append(text, link(taskPageUrl(id), id));
  return status;
}

async function confirmResend(event) {
  event.preventDefault();
  const error = document.getElementById("resend-error");
  const sent = await postChange("resend", taskUrl(taskId, "resend"), changeReason("resend"), "Resending");
  if (sent === null) return;
  const { response, answer } = sent;
  if (response.status === 400) {
    error.textContent = answer.message || "The server refused the request.";
    document.getElementById(answer.field === "reason" ? "resend-reason" : "resend-confirm").focus();
    return;
  }
  if (resendDialog.open) resendDialog.close();
  readInfo();
  readAudit(); // the resend, or its refusal, is on the trail
  if (response.ok) {
    announceTask("Resent as ", answer.retriedAs).focus();
  } else if (answer.code === "already-retried" && answer.retriedAs) {
    announceTask("It was already resent, as ", answer.retriedAs).focus();
  } else {
    announce("Not resent: " + (answer.message || "the server answered " + response.status)).focus();
  }
}

document.getElementById("resend-open").addEventListener("click", openResend);
document.getElementById("resend-keep").addEventListener("click", closeResend);
document.getElementById("resend-form").addEventListener("submit", confirmResend);
resendDialog.addEventListener("cancel", () => {
  setTimeout(() => document.getElementById("resend-open").focus(), 0);
});

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

// The task's output stream: one event per chunk (its id the chunk's number, so the
// browser's reconnect resumes after the last one shown), each attempt under a label.
function followOutput() {
  const box = document.getElementById("output");
  let attempt = 0;
  let count = 0;
  const source = new EventSource(taskUrl(taskId, "output-stream"));
  source.addEventListener("output", (e) => {
    const chunk = JSON.parse(e.data);
    const atEnd = box.scrollTop + box.clientHeight >= box.scrollHeight - 4;
    if (chunk.attempt !== attempt) {
      attempt = chunk.attempt;
      const label = document.createElement("span");
      label.className = "output-attempt";
      label.textContent = (box.childNodes.length ? "\n" : "") + `attempt ${attempt}\n`;
      box.append(label);
    }
    box.append(document.createTextNode(chunk.chunk));
    count = chunk.seq;
    document.getElementById("output-count").textContent = String(count);
    document.getElementById("output-section").hidden = false;
    if (atEnd) box.scrollTop = box.scrollHeight;
  });
  source.addEventListener("end", () => source.close());
  source.addEventListener("error", () => {
    if (source.readyState === EventSource.CLOSED) source.close();
  });
}

follow();
followOutput();
