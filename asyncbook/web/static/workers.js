"use strict";
// Every worker seen recently (/api/workers), online ones first: its state, pool and
// queues (from its record), last seen, its running tasks, its counts.
// The window lives in the URL; the book's change feed says when to read again.
const WITHIN_DEFAULT = "1h";
const RUNNING_SHOWN = 20; // a busy worker's running list links its first tasks, then counts
let loads = 0;
let lastAnswer = null;
let lastCount = null;

function within() {
  const value = new URLSearchParams(location.search).get("within") || WITHIN_DEFAULT;
  const select = document.getElementById("within");
  if (![...select.options].some((o) => o.value === value)) {
    select.append(el("option", { value }, "the last " + value));
  }
  return value;
}

function runningCell(worker) {
  const ids = worker.running || [];
  if (ids.length === 0) return el("span", { class: "none" }, "none");
  const list = el("ul", { class: "links" },
    ...ids.slice(0, RUNNING_SHOWN).map((id) => el("li", {}, el("a", { href: taskPageUrl(id) }, id))));
  if (ids.length > RUNNING_SHOWN) {
    list.append(el("li", {}, el("a", { href: listUrl({ worker: worker.name, state: "running" }) },
      "all " + ids.length + " running")));
  }
  return list;
}

function stateCell(worker) {
  if (worker.online === null || worker.online === undefined) return el("span", { class: "none", title: "It keeps no record (an older asyncbook)" }, "–");
  const record = worker.record || {};
  const title = worker.online
    ? "Renewed its record " + formatAgo(record.renewedMs, Date.now())
    : (record.stoppedMs ? "Shut down at " + formatTime(record.stoppedMs) + " (UTC)" : "Silent since " + formatTime(record.renewedMs) + " (UTC)");
  return el("span", { class: "worker-state " + (worker.online ? "online" : "offline"), title }, worker.online ? "online" : "offline");
}

function poolText(record) {
  if (!record || !record.pool) return "–";
  return record.pool + " ×" + record.concurrency + (record.prefetch ? ", prefetch " + record.prefetch : "");
}

function showWorkers(workers, nowMs) {
  const body = document.getElementById("workers");
  body.replaceChildren(...workers.map((worker) => el("tr", { "data-worker": worker.name },
    el("th", { scope: "row", class: "name", "data-label": "Worker" },
      el("a", { href: listUrl({ worker: worker.name }), title: "Tasks run by " + worker.name }, worker.name)),
    el("td", { class: "state", "data-label": "State" }, stateCell(worker)),
    el("td", { class: "pool", "data-label": "Pool" }, poolText(worker.record)),
    el("td", { class: "queues", "data-label": "Queues" }, worker.record ? worker.record.queues.join(", ") || "–" : "–"),
    el("td", { class: "seen", "data-label": "Last seen", "data-ms": String(worker.lastSeenMs) },
      el("time", { datetime: new Date(worker.lastSeenMs).toISOString(), title: formatTime(worker.lastSeenMs) + " (UTC)" },
        formatAgo(worker.lastSeenMs, nowMs))),
    el("td", { class: "running", "data-label": "Running", "data-count": String((worker.running || []).length) },
      runningCell(worker)),
    el("td", { class: "num started", "data-label": "Started" }, String(worker.started)),
    el("td", { class: "num succeeded", "data-label": "Succeeded" }, String(worker.succeeded)),
    el("td", { class: "num failed", "data-label": "Failed" }, String(worker.failed)))));
  const running = workers.reduce((sum, w) => sum + (w.running || []).length, 0);
  const online = workers.filter((w) => w.online).length;
  const text = workers.length === 0
    ? "No worker seen within the last " + within() + "."
    : workers.length + (workers.length === 1 ? " worker, " : " workers, ") +
      (workers.some((w) => w.online !== null && w.online !== undefined) ? online + " online, " : "") +
      running + " running.";
  // The live region speaks when the picture changes, not at every re-read.
  const count = workers.length + "/" + online + "/" + running;
  if (count !== lastCount) document.getElementById("found").textContent = text;
  lastCount = count;
}

function tickAges() {
  // "12 s ago" moves on with the clock, without asking the server.
  if (!lastAnswer) return;
  const nowMs = lastAnswer.nowMs + (Date.now() - lastAnswer.readAt);
  for (const cell of document.querySelectorAll("#workers .seen")) {
    cell.firstChild.textContent = formatAgo(Number(cell.dataset.ms), nowMs);
  }
}

async function load() {
  const ticket = ++loads;
  let answer;
  try {
    answer = await getJson("/api/workers?within=" + encodeURIComponent(within()));
  } catch (error) {
    if (ticket === loads) document.getElementById("message").textContent = "The workers could not be read: " + error.message;
    return;
  }
  if (ticket !== loads) return;
  document.getElementById("message").textContent = "";
  // The server's clock says how long ago: a browser's clock may be off.
  const nowMs = answer.nowMs || Date.now();
  lastAnswer = { nowMs, readAt: Date.now() };
  showWorkers(answer.workers || [], nowMs);
  document.body.dataset.loaded = String(ticket);
}

document.getElementById("within").addEventListener("change", (event) => {
  const value = event.target.value;
  history.pushState(null, "", value === WITHIN_DEFAULT ? "/workers" : "/workers?within=" + encodeURIComponent(value));
  lastCount = null;
  load();
});
window.addEventListener("popstate", () => {
  document.getElementById("within").value = within();
  lastCount = null;
  load();
});
document.getElementById("within").value = within();
const reloadSoon = throttled(load, 2000);
load().then(() => followChanges(reloadSoon, reloadSoon));
setInterval(tickAges, 5000);
