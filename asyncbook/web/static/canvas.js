"use strict";
// One canvas (a chain, group, chord or spawned tasks) drawn by the server as SVG
// (/api/canvas/ID/svg, its counts on the drawing's root); read again every 2 s while any
// member is open. Operators cancel its open members or resend its failed ones at once.
const REFRESH_MS = 2000;
const canvasId = readCanvasId();
let timer = null;

function readCanvasId() {
  // "/canvas/a%2Fb" is "a/b"; "." and ".." come as "/canvas/?id=..", as for groups.
  const segments = location.pathname.split("/").slice(2);
  let id = "";
  try { id = segments.map(decodeURIComponent).join("/"); } catch (error) { id = ""; }
  return id || new URLSearchParams(location.search).get("id") || "";
}
function canvasUrl(suffix) { return itemUrl("/api/canvas/", canvasId, suffix); }

async function load() {
  // One request: the drawing, whose root element carries the counts (data-*).
  let response;
  try {
    response = await fetch(canvasUrl("svg"), { credentials: "same-origin" });
  } catch (failure) {
    document.getElementById("message").textContent = "The server did not answer: " + failure.message;
    return;
  }
  if (!response.ok) {
    const answer = await response.json().catch(() => ({}));
    document.getElementById("message").textContent = response.status === 404
      ? "No task " + JSON.stringify(canvasId) + "." : (answer.message || "The server answered " + response.status);
    return;
  }
  const graph = document.getElementById("canvas-graph");
  graph.innerHTML = await response.text();
  const svg = graph.querySelector("svg");
  const counts = JSON.parse(svg.dataset.counts);
  const open = Number(svg.dataset.open);
  const members = graph.querySelectorAll("g.node.task").length;
  document.getElementById("title").textContent = svg.dataset.rootId;
  document.getElementById("canvas-summary").textContent = members + " tasks, " + open + " open"
    + (svg.dataset.truncated === "true" ? " (the first " + svg.dataset.limit + " shown)" : "");
  document.getElementById("canvas-counts").replaceChildren(...STATES
    .filter((state) => counts[state])
    .map((state) => el("li", { "data-chip": state }, stateBadge(state), " " + counts[state])));
  document.getElementById("actions").hidden = !mayChange;
  document.getElementById("cancelall-open").disabled = open === 0;
  document.getElementById("resendall-open").disabled = !counts.failed;
  clearTimeout(timer);
  if (open > 0) timer = setTimeout(load, REFRESH_MS);
}

function changeAll(prefix, suffix, verb, said) {
  document.getElementById(prefix + "-open").addEventListener("click", () => openChangeDialog(prefix));
  document.getElementById(prefix + "-keep").addEventListener("click", () => {
    document.getElementById(prefix + "-dialog").close();
  });
  document.getElementById(prefix + "-form").addEventListener("submit", async (event) => {
    event.preventDefault();
    const sent = await postChange(prefix, canvasUrl(suffix), changeReason(prefix), verb);
    if (sent === null) return;
    const { response, answer } = sent;
    if (!response.ok) {
      document.getElementById(prefix + "-error").textContent = answer.message || "The server answered " + response.status;
      return;
    }
    document.getElementById(prefix + "-dialog").close();
    const status = document.getElementById("action-status");
    status.textContent = said(answer);
    status.focus();
    load();
  });
}
changeAll("cancelall", "cancel", "Cancelling", (a) => "Cancelled " + a.cancelled.length + " (" + a.refused.length + " had ended).");
changeAll("resendall", "resend", "Resending", (a) => "Resent " + a.retried + " (" + a.refused + " refused).");
load();
