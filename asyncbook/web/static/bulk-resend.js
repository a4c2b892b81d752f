"use strict";
// The list page's bulk resend: the search's failed tasks (or expired, or cancelled: the state
// filter's) sent again through POST /api/resend with exactly the page's filters, batch after
// batch (nextAfter), at most BULK_CALLS batches a click; then a summary of what the book did.
const BULK_BATCH = 1000; // the API's largest batch
const BULK_CALLS = 10; // batches a click: at most 10,000 tasks, then the form offers the rest
const BULK_LINKS = 10; // the new tasks are linked one by one when at most this many
const BULK_STATES = ["failed", "expired", "cancelled"];
const bulkDialog = document.getElementById("bulk-dialog");

let bulkListed = null; // the search the list shows: {filters, state, count, exact}
let bulkRun = null; // the bulk resend of the open dialog, and how far it got

function showBulkResend(filters, totals, exact) {
  // After each read of the list: the button, for an operator, when tasks of a resendable
  // state match (no state filter: failed, the API's default).
  const state = filters.state || "failed";
  const count = totals[state] || 0;
  bulkListed = { filters: { ...filters }, state, count, exact };
  document.getElementById("bulk-open").textContent = "Resend these " + state + " tasks…";
  document.getElementById("bulk").hidden = !(mayChange && BULK_STATES.includes(state) && count > 0);
}

function filtersText(filters) {
  const parts = [];
  if (filters.name) parts.push("name " + filters.name);
  if (filters.worker) parts.push("worker " + filters.worker);
  if (filters.q) parts.push("matching “" + filters.q + "”");
  if (filters.since) parts.push("created since " + filters.since);
  if (filters.until) parts.push("created until " + filters.until);
  return parts.length ? " (" + parts.join(", ") + ")" : "";
}

function openBulk() {
  bulkRun = { ...bulkListed, after: null, started: false, resent: 0, refused: new Map(), pairs: [] };
  const tasks = bulkRun.count === 1 ? " task" : " tasks";
  document.getElementById("bulk-heading").textContent =
    "Resend these " + bulkRun.count + " " + bulkRun.state + tasks + "?";
  document.getElementById("bulk-help").textContent = (bulkRun.exact ? "" : "At least ") + bulkRun.count +
    " " + bulkRun.state + tasks + " match this page's filters" + filtersText(bulkRun.filters) + ".";
  document.getElementById("bulk-summary").replaceChildren();
  document.getElementById("bulk-confirm").hidden = false;
  document.getElementById("bulk-confirm").textContent = "Resend them";
  document.getElementById("bulk-keep").textContent = "Not now";
  openChangeDialog("bulk");
}

function closeBulk() {
  bulkDialog.close();
  const opener = document.getElementById("bulk-open");
  (opener.closest("[hidden]") ? document.getElementById("main") : opener).focus();
}

function refusalText(status, answer) {
  if (status === 403 && answer.code === "forbidden") {
    return "Resending needs the operator role: " + (answer.message || "");
  }
  return answer.message || "The server answered " + status + ".";
}

function bulkTally(answer) {
  bulkRun.resent += answer.retried; // the answer's count of tasks sent
  for (const result of answer.results) {
    if (result.code === null) {
      bulkRun.pairs.push([result.taskId, result.retriedAs]);
    } else {
      const seen = bulkRun.refused.get(result.code) || { count: 0, message: result.message };
      seen.count += 1;
      bulkRun.refused.set(result.code, seen);
    }
  }
}

async function confirmBulk(event) {
  event.preventDefault();
  if (bulkRun.done) return; // Enter in a field once it is done sends nothing
  const error = document.getElementById("bulk-error");
  for (let call = 0; call < BULK_CALLS; call++) {
    const params = new URLSearchParams();
    for (const key of FILTERS) if (bulkRun.filters[key]) params.set(key, bulkRun.filters[key]);
    params.set("limit", String(BULK_BATCH));
    if (bulkRun.after) params.set("after", bulkRun.after);
    const sent = await postChange("bulk", "/api/resend?" + params, changeReason("bulk"), "Resending");
    if (sent === null) break; // no answer, or the token is needed: the dialog says which
    const { response, answer } = sent;
    if (!response.ok) {
      error.textContent = refusalText(response.status, answer);
      if (answer.field === "reason") document.getElementById("bulk-reason").focus();
      break;
    }
    bulkRun.started = true;
    bulkTally(answer);
    bulkRun.after = answer.nextAfter || null;
    if (!bulkRun.after) {
      bulkRun.done = true;
      break;
    }
  }
  if (bulkRun.started) showBulkSummary();
  load(false, false);
}

function plural(count, one, many) {
  return count + " " + (count === 1 ? one : many);
}

function showBulkSummary() {
  const refused = [...bulkRun.refused.values()].reduce((sum, seen) => sum + seen.count, 0);
  const summary = document.getElementById("bulk-summary");
  summary.dataset.retried = String(bulkRun.resent); // the API's name for the count
  summary.dataset.refused = String(refused);
  const parts = [el("p", {}, "Sent again: " + plural(bulkRun.resent, "task", "tasks") + ".")];
  if (bulkRun.pairs.length > 0 && bulkRun.pairs.length <= BULK_LINKS) {
    parts.push(el("ul", { class: "links", id: "bulk-new" }, ...bulkRun.pairs.map(([old, made]) =>
      el("li", {}, el("a", { href: taskPageUrl(old) }, old), " as ",
        el("a", { href: taskPageUrl(made), "data-new-task": made }, made)))));
  }
  if (refused > 0) {
    parts.push(el("p", {}, "Refused: " + plural(refused, "task", "tasks") + "."), el("ul", {},
      ...[...bulkRun.refused].map(([code, seen]) =>
        el("li", { "data-code": code }, code + ": " + seen.count + " (" + seen.message + ")"))));
  }
  const confirm = document.getElementById("bulk-confirm");
  if (bulkRun.done) {
    confirm.hidden = true;
    document.getElementById("bulk-keep").textContent = "Close";
  } else {
    const handled = bulkRun.resent + refused;
    const left = Math.max(0, bulkRun.count - handled);
    const rest = left > 0 ? "about " + left + " more " + (left === 1 ? "is" : "are") : "more may be";
    parts.push(el("p", { class: "note" }, "Stopped after " + plural(handled, "task", "tasks") +
      ": " + rest + " left."));
    confirm.textContent = "Resend the next " + (BULK_CALLS * BULK_BATCH).toLocaleString("en");
  }
  summary.replaceChildren(...parts);
  summary.focus();
}

document.getElementById("bulk-open").addEventListener("click", openBulk);
document.getElementById("bulk-keep").addEventListener("click", closeBulk);
document.getElementById("bulk-form").addEventListener("submit", confirmBulk);
bulkDialog.addEventListener("cancel", () => {
  setTimeout(() => document.getElementById("bulk-open").focus(), 0);
});
