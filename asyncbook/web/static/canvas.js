"use strict";
// One canvas (a chain, group, chord or spawned tasks) drawn by the server as SVG
// (/api/canvas/ID/svg), with its counts (/api/canvas/ID); read again every 2 s while any
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
  let canvas;
  try {
    canvas = await getJson(canvasUrl());
  } catch (error) {
    document.getElementById("message").textContent = error.status === 404
      ? "No task " + JSON.stringify(canvasId) + "." : error.message;
    return;
  }
  const response = await fetch(canvasUrl("svg"), { credentials: "same-origin" });
  if (response.ok) document.getElementById("canvas-graph").innerHTML = await response.text();
  document.getElementById("title").textContent = canvas.rootId;
  const members = canvas.nodes.filter((node) => node.kind === "task").length;
  document.getElementById("canvas-summary").textContent = members + " tasks, " + canvas.open
    + " open" + (canvas.truncated ? " (the first " + canvas.limit + " shown)" : "");
  document.getElementById("canvas-counts").replaceChildren(...STATES
    .filter((state) => canvas.counts[state])
    .map((state) => el("li", { "data-chip": state }, stateBadge(state), " " + canvas.counts[state])));
  document.getElementById("actions").hidden = !mayChange;
  document.getElementById("cancelall-open").disabled = canvas.open === 0;
  document.getElementById("resendall-open").disabled = !canvas.counts.failed;
  clearTimeout(timer);
  if (canvas.open > 0) timer = setTimeout(load, REFRESH_MS);
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
