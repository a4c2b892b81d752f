"use strict";
// The broker's queues (/api/queues): ready per priority, unacked, the oldest message's age;
// asyncbook's own queue with the sweep's health. Read every few seconds, one read at a time.
const REFRESH_MS = 5000;
let loads = 0;
let busy = false;
let lastSummary = null;

function priorityText(priorities) {
  const parts = Object.entries(priorities || {}).filter(([, count]) => count > 0)
    .map(([step, count]) => step + ": " + count);
  return parts.length ? parts.join(", ") : "";
}

function oldestCell(queue) {
  if (queue.oldestAgeMs !== null && queue.oldestAgeMs !== undefined) {
    const text = formatDuration(queue.oldestAgeMs);
    const node = el("span", { class: "age", "data-ms": String(queue.oldestAgeMs) }, text);
    if (queue.oldestTaskId) {
      return el("a", { href: taskPageUrl(queue.oldestTaskId), title: "Task " + queue.oldestTaskId }, node);
    }
    return node;
  }
  return el("span", { class: "none" }, queue.ready > 0 ? "unknown (" + queue.oldestNote + ")" : "none");
}

function numberText(value) {
  return value === null || value === undefined ? "–" : String(value);
}

function showQueues(answer) {
  const rows = answer.queues.map((queue) => el("tr", { "data-queue": queue.name },
    el("th", { scope: "row", class: "name", "data-label": "Queue" }, queue.name,
      queue.asyncbook ? el("span", { class: "tag" }, " asyncbook") : "",
      queue.unconsumed ? el("span", { class: "tag unconsumed", title: "Messages wait and no online worker consumes this queue" }, " no online worker") : ""),
    el("td", { class: "num ready", "data-label": "Ready" }, String(queue.ready)),
    el("td", { class: "priorities", "data-label": "Per priority" }, priorityText(queue.priorities)),
    el("td", { class: "num unacked", "data-label": "Unacked" }, numberText(queue.unacked)),
    el("td", { class: "num consumers", "data-label": "Consumers" }, numberText(queue.consumers)),
    el("td", { class: "oldest", "data-label": "Oldest waiting" }, oldestCell(queue))));
  document.getElementById("queues").replaceChildren(...rows);
  const ready = answer.queues.reduce((sum, queue) => sum + queue.ready, 0);
  const unacked = answer.unacked.total;
  let text = answer.queues.length + (answer.queues.length === 1 ? " queue, " : " queues, ") +
    ready + " waiting" + (unacked === null ? "." : ", " + unacked + " unacked.");
  if (answer.truncated) text += " More queues were found than are shown.";
  const unconsumed = answer.unconsumed || [];
  if (unconsumed.length) text += " No online worker consumes " + unconsumed.join(", ") + ".";
  const stranded = Object.entries(answer.strandedTasks || {});
  if (stranded.length) {
    text += " Tracked tasks queued over 5 minutes for nobody: " +
      stranded.map(([queue, count]) => count + " in " + queue).join(", ") + ".";
  }
  if (!answer.broker.configured || answer.broker.problem) text = "The broker's queues are not shown.";
  // The live region speaks when the picture changes, not at every re-read.
  if (text !== lastSummary) document.getElementById("found").textContent = text;
  lastSummary = text;
}

function discoveryText(answer) {
  // Where the list may be partial: name the other queues in the URL (?queue=NAME).
  if (answer.broker.problem || answer.discoveryComplete) return "";
  if (answer.broker.kind === "amqp") return " AMQP lists no queues: add others with ?queue=NAME in the address.";
  return " The scan for queues stopped at its cap: add others with ?queue=NAME in the address.";
}

function showBroker(broker, answer) {
  const node = document.getElementById("broker");
  if (!broker.configured) node.textContent = "No broker configured: start the server with --broker URL (or ASYNCBOOK_BROKER_URL) to see its queues.";
  else node.textContent = "Broker " + broker.url + " (" + broker.kind + ")" + (broker.problem ? ": " + broker.problem : "") + discoveryText(answer);
  node.classList.toggle("problem", Boolean(broker.configured && broker.problem));
}

function showUnacked(unacked) {
  const node = document.getElementById("unacked");
  if (unacked.total === null) { node.textContent = ""; return; }
  let text = unacked.total + " unacked in all.";
  if (!unacked.exact) text += " The per-queue unacked counts were taken over a sample of them.";
  if (unacked.unattributed) text += " " + unacked.unattributed + " could not be told to a queue.";
  node.textContent = text;
}

function showOwn(own) {
  const health = own.health;
  const last = health.lastSweepAgeMs === null ? "never" : formatDuration(health.lastSweepAgeMs) + " ago";
  const items = [
    ["Queue", own.queue],
    ["Waiting", numberText(own.ready)],
    ["Sweep", !health.sweepStopped ? "running" : health.lastSweepMs === null ? "never ran" : "stopped"],
    ["Last sweep", last],
    ["Overdue tasks", String(health.overdueTasks)],
  ];
  if (health.problem) items.push(["Problem", health.problem]);
  document.getElementById("own").replaceChildren(...items.flatMap(([term, value]) =>
    [el("dt", {}, term), el("dd", { "data-term": term }, value)]));
}

async function load() {
  if (busy || document.hidden) return;
  busy = true;
  const ticket = ++loads;
  try {
    const answer = await getJson("/api/queues" + location.search);
    document.getElementById("message").textContent = "";
    showBroker(answer.broker, answer);
    showQueues(answer);
    showUnacked(answer.unacked);
    showOwn(answer.asyncbook);
    setStatus("read " + formatShortTime(answer.nowMs));
    document.body.dataset.loaded = String(ticket);
  } catch (error) {
    document.getElementById("message").textContent = "The queues could not be read: " + error.message;
  } finally {
    busy = false;
  }
}

load();
setInterval(load, REFRESH_MS);
document.addEventListener("visibilitychange", () => { if (!document.hidden) load(); });
