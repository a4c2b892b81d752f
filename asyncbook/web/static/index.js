"use strict";
// The task list: a search of the book (/api/search) whose filters and sort live in the
// page's URL (a link to share; back and forward work), kept live by the book's change
// feed (/api/changes): a change moves its row at once, and the page is read again at most
// once a second for the rest (new rows, workers, runtimes, the totals).
const PAGE_SIZE = 50;
const MAX_ROWS = 500; // the API's largest page: a live re-read never asks for more
const FILTERS = ["q", "name", "state", "worker", "since", "until"];
// Columns the API sorts over every match (sort=-runtime); the others sort the rows shown.
const SERVER_SORTED = ["created", "name", "started", "runtime", "attempts"];
const COLUMNS = {
  name: { label: "Name", value: (r) => r.info.name, text: true },
  id: { label: "Task", value: (r) => r.task.id, text: true },
  state: { label: "State", value: (r) => STATES.indexOf(r.task.state) },
  progress: { label: "Progress", value: (r) => r.task.progress },
  worker: { label: "Worker", value: (r) => r.info.worker, text: true },
  created: { label: "Created", value: (r) => r.info.createdAtMs },
  started: { label: "Started", value: (r) => r.info.startedAtMs },
  runtime: { label: "Runtime", value: (r) => r.info.runtimeMs },
  attempts: { label: "Attempts", value: (r) => r.task.attempts },
};

let data = []; // the rows as the API ordered them: {task, info}
const rowsById = new Map(); // task id -> its <tr>
let nextAfter = null;
let wanted = PAGE_SIZE; // rows a re-read asks for: the pages loaded so far
let loads = 0; // the newest read; an older answer arriving late is dropped
let typing = null; // the text field whose search already made a history entry
let plain = false; // the server has no search (its book keeps no task info): /api/tasks
let scanNote = ""; // said when the search's scan stopped at its budget

// -- the URL is the page's state ---------------------------------------------------------------

function readView() {
  const params = new URLSearchParams(location.search);
  const filters = {};
  for (const key of FILTERS) filters[key] = params.get(key) || "";
  return { filters, sort: params.get("sort") || "newest" };
}

function viewUrl(view) {
  const params = new URLSearchParams();
  for (const key of FILTERS) if (view.filters[key]) params.set(key, view.filters[key]);
  if (view.sort !== "newest") params.set("sort", view.sort);
  const query = params.toString();
  return "/" + (query ? "?" + query : "");
}

function csvUrl(view) {
  // The search as shown, downloaded as CSV (the API's sort; at most 10,000 rows).
  const params = new URLSearchParams();
  for (const key of FILTERS) if (view.filters[key]) params.set(key, view.filters[key]);
  params.set("sort", sortSpec(view.sort).server);
  return "/api/search.csv?" + params;
}

function sortSpec(sort) {
  // "newest" and "oldest" are the API's own (by creation); "key" / "-key" (or "key:desc")
  // sort every match on the server for SERVER_SORTED keys, and the rows shown for the rest.
  if (sort === "oldest") return { key: "created", ascending: true, server: "oldest", local: false };
  const [field, direction] = sort.split(":");
  const key = field.replace(/^-/, "");
  const ascending = direction ? direction === "asc" : !field.startsWith("-");
  if (sort === "newest" || !(key in COLUMNS) || (key === "created" && !ascending)) {
    return { key: "created", ascending: false, server: "newest", local: false };
  }
  if (key === "created") return { key, ascending: true, server: "oldest", local: false };
  if (SERVER_SORTED.includes(key)) {
    return { key, ascending, server: (ascending ? "" : "-") + key, local: false };
  }
  return { key, ascending, server: "newest", local: true };
}

function showView(view) {
  for (const key of ["q", "worker"]) document.getElementById(key).value = view.filters[key];
  showName(view);
  document.getElementById("state").value = STATES.includes(view.filters.state) ? view.filters.state : "";
  const since = document.getElementById("since");
  if (view.filters.since && ![...since.options].some((o) => o.value === view.filters.since)) {
    since.append(el("option", { value: view.filters.since }, "since " + view.filters.since));
  }
  since.value = view.filters.since;
  showSortHeaders(sortSpec(view.sort));
}

// The name chosen in the view, among the names known (an unknown one added as an option).
function showName(view) {
  const names = document.getElementById("name");
  if (view.filters.name && ![...names.options].some((o) => o.value === view.filters.name)) {
    names.append(el("option", { value: view.filters.name }, view.filters.name));
  }
  names.value = view.filters.name;
}

function controlsView() {
  const filters = { ...readView().filters };
  for (const key of ["q", "name", "state", "worker", "since"]) {
    filters[key] = document.getElementById(key).value.trim();
  }
  return { filters, sort: readView().sort };
}

function go(view, replace) {
  const url = viewUrl(view);
  if (url !== location.pathname + location.search) {
    if (replace) history.replaceState(null, "", url); else history.pushState(null, "", url);
  }
  wanted = PAGE_SIZE;
  load(false, true);
}

// -- rows --------------------------------------------------------------------------------------

function cell(key, className) {
  return el("td", { class: className, "data-label": COLUMNS[key].label });
}

function makeRow(taskId) {
  const meter = bar(0);
  meter.setAttribute("aria-label", "Progress of " + taskId);
  const tr = el("tr", { "data-task-id": taskId },
    cell("name", "name"),
    el("td", { class: "id", "data-label": "Task" }, el("a", { href: taskPageUrl(taskId) }, taskId)),
    cell("state", "state-cell"),
    el("td", { class: "progress-cell", "data-label": "Progress" }, meter, el("span", { class: "percent" })),
    cell("worker", "worker"),
    cell("created", "time created"),
    cell("started", "time started"),
    cell("runtime", "runtime"),
    cell("attempts", "attempts"));
  tr.dataset.version = "-1";
  return tr;
}

function showTask(tr, task, info) {
  // The task's moving parts: state, progress, attempts (also what a change brings).
  tr.dataset.version = String(task.version);
  const badge = stateBadge(task.state);
  if (info && info.exception) badge.title = info.exception;
  tr.querySelector(".state-cell").replaceChildren(badge);
  setBar(tr.querySelector(".bar"), task.progress);
  tr.querySelector(".percent").textContent = percentText(task.progress);
  if (task.attempts !== undefined) {
    tr.querySelector(".attempts").textContent = task.attempts + " / " + task.maxAttempts;
  }
}

function fillRow(tr, row) {
  const { task, info } = row;
  if (Number(tr.dataset.version) <= task.version) showTask(tr, task, info);
  const name = tr.querySelector(".name");
  name.textContent = info.name || "";
  name.title = info.queue ? "queue " + info.queue : "";
  tr.querySelector(".worker").textContent = info.worker || "";
  tr.querySelector(".created").replaceChildren(timeCell(info.createdAtMs));
  tr.querySelector(".started").replaceChildren(timeCell(info.startedAtMs));
  tr.querySelector(".runtime").textContent = formatDuration(info.runtimeMs);
}

function compare(spec) {
  const value = COLUMNS[spec.key].value;
  const text = COLUMNS[spec.key].text;
  return (a, b) => {
    const x = value(a);
    const y = value(b);
    const xMissing = x === null || x === undefined || x === "";
    const yMissing = y === null || y === undefined || y === "";
    if (xMissing || yMissing) return xMissing === yMissing ? 0 : xMissing ? 1 : -1; // last
    const order = text ? String(x).localeCompare(String(y)) : Number(x) - Number(y);
    return spec.ascending ? order : -order;
  };
}

function showRows() {
  // Rows keep their element (and a focused link its focus) across re-reads.
  const spec = sortSpec(readView().sort);
  const ordered = spec.local ? [...data].sort(compare(spec)) : data;
  const body = document.getElementById("tasks");
  const seen = new Set();
  ordered.forEach((row, index) => {
    let tr = rowsById.get(row.task.id);
    if (!tr) { tr = makeRow(row.task.id); rowsById.set(row.task.id, tr); }
    fillRow(tr, row);
    seen.add(row.task.id);
    if (body.children[index] !== tr) body.insertBefore(tr, body.children[index] || null);
  });
  for (const [id, tr] of rowsById) if (!seen.has(id)) { tr.remove(); rowsById.delete(id); }
}

function showSortHeaders(spec) {
  for (const th of document.querySelectorAll("th[data-sort]")) {
    if (th.dataset.sort === spec.key) {
      th.setAttribute("aria-sort", spec.ascending ? "ascending" : "descending");
    } else {
      th.removeAttribute("aria-sort");
    }
  }
}

function sortBy(key) {
  const view = readView();
  const current = sortSpec(view.sort);
  // A second press flips the order; a first one starts with what is most useful on top.
  const ascending = current.key === key ? !current.ascending : COLUMNS[key].text === true;
  let sort = (ascending ? "" : "-") + key;
  if (key === "created") sort = ascending ? "oldest" : "newest";
  const next = { ...view, sort };
  history.pushState(null, "", viewUrl(next));
  const spec = sortSpec(sort);
  showSortHeaders(spec);
  document.getElementById("found").textContent = "";
  announce("Sorted by " + COLUMNS[key].label.toLowerCase() + ", " +
    (spec.ascending ? "ascending" : "descending") + ".");
  if (spec.server !== current.server || !spec.local) {
    wanted = PAGE_SIZE;
    load(false, false);
  } else {
    showRows();
    describe();
  }
}

// -- totals ------------------------------------------------------------------------------------

function showTotals(totals, exact, selected) {
  const all = STATES.reduce((sum, state) => sum + (totals[state] || 0), 0);
  const chip = (state, label, count) => {
    const button = el("button", { type: "button", class: count ? "chip" : "chip zero",
      "data-chip": state, "data-count": String(count),
      "aria-pressed": String(selected === state) },
      state ? stateBadge(state) : el("span", { class: "state all" }, label), " ",
      el("span", { class: "count" }, String(count)));
    button.setAttribute("aria-label", label + ": " + count + (selected === state ? ", shown" : ""));
    button.addEventListener("click", () => pickState(selected === state ? "" : state));
    return el("li", {}, button);
  };
  const list = document.getElementById("totals");
  const focused = document.activeElement && list.contains(document.activeElement)
    ? document.activeElement.dataset.chip : null;
  list.replaceChildren(chip("", "all", all),
    ...STATES.map((state) => chip(state, state, totals[state] || 0)));
  if (focused !== null) list.querySelector(`[data-chip="${focused}"]`)?.focus();
  document.getElementById("totals-note").textContent = exact
    ? "" : "Totals counted over the most recent matches only: there may be more.";
}

function pickState(state) {
  const view = controlsView();
  view.filters.state = state;
  document.getElementById("state").value = state;
  go(view, false);
}

// -- reading -----------------------------------------------------------------------------------

function announce(text) {
  // Spoken once, for what the reader just did; live re-reads only update the page.
  document.getElementById("announce").textContent = text;
}

function describe() {
  // What the list shows, in words, under the totals; returned for announcing.
  const spec = sortSpec(readView().sort);
  const found = data.length === 0 ? "No task matches." :
    "Showing " + data.length + (data.length === 1 ? " task" : " tasks") + (nextAfter ? " (more below)" : "") +
    ", sorted by " + COLUMNS[spec.key].label.toLowerCase() + (spec.ascending ? ", ascending" : ", descending") +
    (spec.local ? " (the rows shown)." : (spec.key === "created" ? "." : ", tasks without one last.")) +
    (scanNote ? " " + scanNote : "");
  const note = document.getElementById("found");
  note.textContent = note.dataset.plain ? found + " " + note.dataset.plain : found;
  return found;
}

function showError(error) {
  // A refusal names its field (a hand-edited URL: since=yesterday): that control is marked.
  let message = "";
  if (error) {
    message = error instanceof ApiError && error.status === 401
      ? "Signed out: reload the page to sign in again."
      : "The search failed: " + error.message;
  }
  document.getElementById("message").textContent = message;
  const field = error instanceof ApiError ? error.field : null;
  for (const key of FILTERS) {
    const control = document.getElementById(key);
    if (control) control.toggleAttribute("aria-invalid", key === field);
  }
}

async function load(append, speak) {
  const ticket = ++loads;
  const view = readView();
  document.getElementById("download-csv").href = csvUrl(view);
  const params = new URLSearchParams();
  for (const key of FILTERS) if (view.filters[key]) params.set(key, view.filters[key]);
  params.set("sort", sortSpec(view.sort).server);
  params.set("limit", String(append ? PAGE_SIZE : Math.min(MAX_ROWS, wanted)));
  if (append && nextAfter) params.set("after", nextAfter);
  if (append) wanted = data.length + PAGE_SIZE; // a live re-read meanwhile keeps the new page
  let page;
  try {
    page = plain ? await plainPage(params) : await getJson("/api/search?" + params);
  } catch (error) {
    if (ticket !== loads) return;
    if (!plain && error instanceof ApiError && error.status === 404) {
      usePlainList();
      load(append, speak);
    } else {
      showError(error);
    }
    return;
  }
  if (ticket !== loads) return;
  showError(null);
  data = append ? [...data, ...page.tasks] : page.tasks;
  if (append) wanted = data.length;
  scanNote = page.scanComplete === false
    ? "The search stopped after looking at " + page.scanned + " tasks: more below may match." : "";
  const lag = page.indexLag || {};
  if (lag.entries > 0) {
    // The index is built from the writes' changes; this read could not catch up in full.
    scanNote += (scanNote ? " " : "") + "The index is " + lag.entries + " changes behind" +
      (lag.oldestAgeMs != null ? " (the oldest " + Math.round(lag.oldestAgeMs / 1000) + " s ago)." : ".");
  }
  showRows();
  if (!plain) {
    showTotals(page.totals || {}, page.totalsExact !== false, view.filters.state);
    showBulkResend(view.filters, page.totals || {}, page.totalsExact !== false); // bulk-resend.js
  }
  nextAfter = page.nextAfter || null;
  document.getElementById("more").hidden = !nextAfter;
  document.body.dataset.loaded = String(ticket);
  const found = describe();
  if (speak) announce(found);
}

async function plainPage(params) {
  // The seed's listing: by state only, no info, no totals.
  const query = new URLSearchParams({ limit: params.get("limit") });
  for (const key of ["state", "after"]) if (params.get(key)) query.set(key, params.get(key));
  const page = await getJson("/api/tasks?" + query);
  return { tasks: page.tasks.map((task) => ({ task, info: { id: task.id } })), nextAfter: page.nextAfter };
}

function usePlainList() {
  // Only the state filter and the loaded rows' sorting work without the console's API.
  SERVER_SORTED.splice(1); // the seed's listing sorts by creation only: the rest sort the rows shown
  plain = true;
  for (const key of ["q", "name", "worker", "since"]) document.getElementById(key).closest("p").hidden = true;
  document.getElementById("totals").closest("section").hidden = true;
  document.getElementById("download-csv").hidden = true;
  document.getElementById("bulk").hidden = true; // a bulk resend searches the tasks' info
  document.getElementById("totals-note").textContent = "";
  document.getElementById("message").textContent = "";
  const note = document.getElementById("found");
  note.dataset.plain = "This server's book keeps no task info: the list filters by state only.";
}

const reloadSoon = throttled(() => load(false, false), 1000);

function onChange(change) {
  const tr = rowsById.get(change.taskId);
  if (tr && Number(tr.dataset.version) < change.version) {
    showTask(tr, change, null);
    const row = data.find((r) => r.task.id === change.taskId);
    if (row) Object.assign(row.task, { state: change.state, progress: change.progress, version: change.version });
  }
  reloadSoon();
}

async function loadChoices() {
  // The names and workers the book knows, offered in the filters; the page works without.
  if (plain) return;
  try {
    const answer = await getJson("/api/names");
    fillNameSelect(document.getElementById("name"), answer.names || [], readView().filters.name);
  } catch (error) { /* the select keeps "all" and the URL's name */ }
  try {
    const answer = await getJson("/api/workers");
    document.getElementById("worker-names").replaceChildren(
      ...(answer.workers || []).map((w) => el("option", { value: w.name })));
  } catch (error) { /* a plain text field */ }
}

// -- wiring ------------------------------------------------------------------------------------

let typingTimer = null;
function typed(field) {
  clearTimeout(typingTimer);
  typingTimer = setTimeout(() => {
    // One history entry per search typed: later keystrokes in the same field replace it.
    go(controlsView(), typing === field);
    typing = field;
  }, 400);
}

document.getElementById("filters").addEventListener("submit", (event) => {
  event.preventDefault();
  clearTimeout(typingTimer);
  typing = null;
  go(controlsView(), false);
});
for (const key of ["q", "worker"]) {
  const input = document.getElementById(key);
  input.addEventListener("input", () => typed(key));
  input.addEventListener("blur", () => { typing = null; });
}
for (const key of ["name", "state", "since"]) {
  document.getElementById(key).addEventListener("change", () => { typing = null; go(controlsView(), false); });
}
for (const th of document.querySelectorAll("th[data-sort]")) {
  th.querySelector("button").addEventListener("click", () => sortBy(th.dataset.sort));
}
document.getElementById("more").addEventListener("click", () => load(true, true));
window.addEventListener("popstate", () => {
  typing = null;
  showView(readView());
  wanted = PAGE_SIZE;
  load(false, true);
});

showView(readView());
// Once the names are known, select the view's: only that, since the text fields may hold
// what someone has typed meanwhile (their search is sent when the typing pauses).
loadChoices().then(() => showName(readView()));
load(false, true).then(() => followChanges(onChange, reloadSoon));
