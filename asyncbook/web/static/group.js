"use strict";
// One group: its counts by state, its overall progress and a bar per member, kept live by
// the group's stream (/api/groups/ID/stream); the member list comes from /api/groups/ID.
const MEMBER_LIMIT = 100;
const groupId = readGroupId();
let rows = new Map(); // member id -> its <li>, in creation order
let memberCount = 0;
let summarySeen = false; // the stream's summaries win over the one the member list brings
let loads = 0;

function readGroupId() {
  // "/groups/a%2Fb c" is "a/b c"; the ids "." and ".." come as "/groups/?id=.." (a browser
  // drops them from a path), as they do for tasks.
  const segments = location.pathname.split("/").slice(2);
  let id = "";
  try { id = segments.map(decodeURIComponent).join("/"); } catch (error) { id = ""; }
  return id || new URLSearchParams(location.search).get("id") || "";
}

function percent(progress) {
  return String(Math.round(progress * 10) / 10) + "%";
}

function withQuery(url, query) {
  return url + (url.includes("?") ? "&" : "?") + query;
}

function showSummary(group) {
  document.getElementById("overview").hidden = false;
  setBar(document.getElementById("overall"), group.progress);
  document.getElementById("overall-percent").textContent = percent(group.progress);
  memberCount = group.members;
  document.getElementById("members-count").textContent = String(group.members);
  document.getElementById("total").textContent =
    group.total === undefined || group.total === null ? "not declared" : String(group.total);
  document.getElementById("ended").textContent = group.ended ? "yes" : "no";
  const counts = document.getElementById("counts");
  counts.replaceChildren(...STATES.map((state) => {
    const count = group.counts[state] || 0;
    return el("li", { class: count ? "chip" : "chip zero", "data-chip": state,
      "data-count": String(count) }, stateBadge(state), " ", el("span", { class: "count" }, String(count)));
  }));
  showShown();
}

function memberRow(task) {
  const meter = bar(task.progress);
  meter.setAttribute("aria-label", "Progress of " + task.id);
  const li = el("li", { class: "member", "data-task-id": task.id },
    el("a", { class: "member-id", href: taskPageUrl(task.id) }, task.id),
    el("span", { class: "member-state" }, stateBadge(task.state)),
    meter,
    el("span", { class: "percent" }, percent(task.progress)));
  li.dataset.version = String(task.version);
  return li;
}

function updateRow(li, task) {
  if (Number(li.dataset.version) >= task.version) return;
  li.dataset.version = String(task.version);
  li.querySelector(".member-state").replaceChildren(stateBadge(task.state));
  setBar(li.querySelector(".bar"), task.progress);
  li.querySelector(".percent").textContent = percent(task.progress);
}

function showMember(task) {
  const li = rows.get(task.id);
  if (li) { updateRow(li, task); return; }
  if (rows.size >= MEMBER_LIMIT) return; // past the list shown: the counts still move
  const row = memberRow(task);
  rows.set(task.id, row);
  document.getElementById("members").append(row);
  document.getElementById("members-section").hidden = false;
  showShown();
}

function showShown() {
  const shown = document.getElementById("shown");
  shown.textContent = memberCount > rows.size
    ? "Showing the first " + rows.size + " of " + memberCount + " members, in the order they were created."
    : "";
}

async function loadMembers() {
  const ticket = ++loads;
  let response;
  try {
    const url = withQuery(groupUrl(groupId), "limit=" + MEMBER_LIMIT);
    response = await fetch(url, { credentials: "same-origin" });
  } catch (failure) {
    return; // the stream says when the server is back
  }
  if (!response.ok || ticket !== loads) return;
  const group = await response.json();
  if (ticket !== loads) return;
  // Rows keep their place (and a focused link its focus) when the order holds.
  const list = document.getElementById("members");
  const next = new Map();
  group.tasks.forEach((task, index) => {
    let li = rows.get(task.id);
    if (li) updateRow(li, task); else li = memberRow(task);
    next.set(task.id, li);
    if (list.children[index] !== li) list.insertBefore(li, list.children[index] || null);
  });
  while (list.children.length > next.size) list.lastElementChild.remove();
  rows = next;
  document.getElementById("members-section").hidden = false;
  if (!summarySeen) showSummary(group); else showShown();
}

function showEnded(ending) {
  const parts = STATES.filter((s) => ending.counts[s]).map((s) => ending.counts[s] + " " + s);
  document.getElementById("ended-note").textContent =
    "Every member has ended: " + (parts.join(", ") || "none") + ".";
}

async function explain() {
  // The stream was refused (an unknown group, a bad id, no sign-in): ask why.
  let message = "The group's stream closed.";
  try {
    const response = await fetch(withQuery(groupUrl(groupId), "limit=1"), { credentials: "same-origin" });
    const answer = await response.json().catch(() => ({}));
    if (response.status === 404) message = "No group " + JSON.stringify(groupId) + ".";
    else if (answer.message) message = answer.message;
  } catch (failure) {
    message = "The server did not answer: " + failure.message;
  }
  document.getElementById("message").textContent = message;
  setStatus("not found");
}

function follow() {
  const source = new EventSource(groupUrl(groupId, "stream"));
  source.addEventListener("open", () => { setStatus("live"); loadMembers(); });
  source.addEventListener("group", (e) => { summarySeen = true; showSummary(JSON.parse(e.data)); });
  source.addEventListener("member", (e) => showMember(JSON.parse(e.data)));
  source.addEventListener("resync", () => loadMembers());
  source.addEventListener("end", (e) => {
    source.close();
    setStatus("finished");
    showEnded(JSON.parse(e.data));
  });
  source.addEventListener("stream-error", (e) => {
    source.close();
    document.getElementById("message").textContent = JSON.parse(e.data).message;
    setStatus("stopped");
  });
  source.addEventListener("error", () => {
    if (source.readyState === EventSource.CLOSED) explain(); else setStatus("reconnecting…");
  });
}

const overall = bar(0);
overall.id = "overall";
overall.classList.add("wide");
overall.setAttribute("aria-labelledby", "overall-label");
document.getElementById("overall-slot").replaceWith(overall);
document.getElementById("title").textContent = groupId || "No group";
if (groupId) {
  document.title = "asyncbook — group " + groupId;
  follow();
} else {
  document.getElementById("message").textContent = "The address names no group: /groups/<id>.";
}
