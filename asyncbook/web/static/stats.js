"use strict";
// Per-minute stats of one task name, or of every name (/api/stats), as inline SVG charts:
// throughput by state, runtime percentiles, failure rate; then the window's totals. The
// name and the window live in the URL; the book's change feed says when to read again.
const WINDOWS = { "1h": "the last hour", "6h": "the last 6 hours", "24h": "the last 24 hours" };
const STEPS = [1, 2, 5, 10, 15, 30, 60]; // minutes per bar: the first giving few enough bars
const MAX_BANDS = 96;
const ENDS = ["succeeded", "failed", "expired", "cancelled"];
const MINUTE = 60_000;
const DURATION_STEPS = [1, 2, 5, 10, 20, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10_000, 15_000,
  30_000, 60_000, 120_000, 300_000, 600_000, 900_000, 1_800_000, 3_600_000]; // runtime axis ticks
let answer = null; // the last stats read, drawn again when the page is resized
let loads = 0;

// -- the URL is the page's state ---------------------------------------------------------------

function readView() {
  const params = new URLSearchParams(location.search);
  return { name: params.get("name") || "", window: params.get("window") || "1h" };
}

function viewUrl(view) {
  const params = new URLSearchParams();
  if (view.name) params.set("name", view.name);
  if (view.window !== "1h") params.set("window", view.window);
  const query = params.toString();
  return "/stats" + (query ? "?" + query : "");
}

function showView(view) {
  const names = document.getElementById("name");
  if (view.name && ![...names.options].some((o) => o.value === view.name)) {
    names.append(el("option", { value: view.name }, view.name));
  }
  names.value = view.name;
  const windows = document.getElementById("window");
  if (![...windows.options].some((o) => o.value === view.window)) {
    windows.append(el("option", { value: view.window }, "last " + view.window));
  }
  windows.value = view.window;
  document.getElementById("tasks-link").href = listUrl({ name: view.name, since: view.window });
  document.title = "asyncbook — stats" + (view.name ? " of " + view.name : "");
}

function go() {
  const view = {
    name: document.getElementById("name").value,
    window: document.getElementById("window").value,
  };
  history.pushState(null, "", viewUrl(view));
  showView(view);
  load(true);
}

// -- the numbers -------------------------------------------------------------------------------

function percentileOf(buckets, bounds, fraction) {
  // As the server's percentile_ms: linear inside the bucket the rank falls in.
  const total = buckets.reduce((sum, count) => sum + count, 0);
  if (total === 0) return null;
  const rank = fraction * total;
  let seen = 0;
  let lower = 0;
  for (let i = 0; i < buckets.length; i += 1) {
    if (i >= bounds.length) return bounds[bounds.length - 1];
    const count = buckets[i];
    if (count && seen + count >= rank) return lower + (bounds[i] - lower) * (rank - seen) / count;
    seen += count;
    lower = bounds[i];
  }
  return bounds[bounds.length - 1];
}

function failureRate(counts) {
  // Of the runs that ended, the share that failed (null when none ended).
  const ended = ENDS.reduce((sum, state) => sum + (counts[state] || 0), 0);
  return ended === 0 ? null : (counts.failed || 0) / ended;
}

function bars(stats) {
  // Minutes merged into bars of `step` minutes, aligned on the clock (12:00, 12:15 ...).
  const minutes = stats.minutes || [];
  const step = STEPS.find((s) => minutes.length / s <= MAX_BANDS) || STEPS[STEPS.length - 1];
  const bounds = stats.runtimeBucketsMs || [];
  const groups = [];
  for (const minute of minutes) {
    const start = Math.floor(minute.minuteMs / (step * MINUTE)) * step * MINUTE;
    let group = groups[groups.length - 1];
    if (!group || group.startMs !== start) {
      group = { startMs: start, endMs: start + step * MINUTE, started: 0, runtimeBuckets: [], minutes: [] };
      for (const state of ENDS) group[state] = 0;
      groups.push(group);
    }
    group.minutes.push(minute);
    group.started += minute.started || 0;
    for (const state of ENDS) group[state] += minute[state] || 0;
    (minute.runtimeBuckets || []).forEach((count, i) => {
      group.runtimeBuckets[i] = (group.runtimeBuckets[i] || 0) + count;
    });
  }
  for (const group of groups) {
    const one = group.minutes.length === 1 ? group.minutes[0] : null;
    for (const [key, fraction] of [["p50Ms", 0.5], ["p95Ms", 0.95], ["p99Ms", 0.99]]) {
      group[key] = one && one[key] !== undefined ? one[key] : percentileOf(group.runtimeBuckets, bounds, fraction);
    }
    group.failureRate = failureRate(group);
    group.ended = ENDS.reduce((sum, state) => sum + group[state], 0);
  }
  return { step, groups };
}

function clockTicks(groups, step, room) {
  // Label the bars that start on a round time (every 5, 10, 15, 30 ... minutes).
  const span = groups.length * step;
  const every = [5, 10, 15, 30, 60, 120, 180, 360, 720].find((m) => m >= step && span / m <= room) || 1440;
  const ticks = [];
  groups.forEach((group, i) => { if (group.startMs % (every * MINUTE) === 0) ticks.push(i); });
  return ticks;
}

function clock(ms) {
  return new Date(ms).toISOString().slice(11, 16);
}

function shortDuration(ms) {
  if (ms === 0) return "0";
  if (ms < 1000) return Math.round(ms) + " ms";
  if (ms < 60_000) return (Math.round(ms / 100) / 10) + " s";
  if (ms < 3_600_000) return (Math.round(ms / 6000) / 10) + " min";
  return (Math.round(ms / 360_000) / 10) + " h";
}

function percent(rate) {
  if (rate === null || rate === undefined) return "—";
  const value = rate * 100;
  return (value > 0 && value < 10 ? value.toFixed(1) : String(Math.round(value))) + "%";
}

function peak(groups, value) {
  // The bar where `value` is highest (the first of equals), or null when all are empty.
  let best = null;
  for (const group of groups) {
    const v = value(group);
    if (v !== null && v !== undefined && v > 0 && (best === null || v > value(best))) best = group;
  }
  return best;
}

// -- drawing -----------------------------------------------------------------------------------

function draw(stats) {
  const view = readView();
  const { step, groups } = bars(stats);
  const span = WINDOWS[view.window] || "the last " + view.window;
  const who = view.name ? view.name : "all names";
  const each = step === 1 ? "minute" : step + " minutes";
  const bandLabel = (i) => clock(groups[i].startMs) + "–" + clock(groups[i].endMs) + " UTC";
  const tickLabel = (i) => clock(groups[i].startMs);
  const ticks = (room) => clockTicks(groups, step, room);
  const common = { bands: groups.length, bandLabel, tickLabel, ticks };
  const totals = stats.totals || {};

  // Throughput: ends stacked by state, starts as a line over them.
  const ended = ENDS.reduce((sum, state) => sum + (totals[state] || 0), 0);
  const busiest = peak(groups, (g) => g.ended);
  const throughputText = "Tasks of " + who + " over " + span + ", a bar per " + each + ": " +
    (totals.started || 0) + " started, " + ENDS.map((s) => (totals[s] || 0) + " " + s).join(", ") + "." +
    (busiest ? " Busiest: " + bandLabel(groups.indexOf(busiest)) + ", " + busiest.ended + " ended." : "");
  const yMax = Math.max(1, ...groups.map((g) => Math.max(g.ended, g.started)));
  drawChart(document.getElementById("throughput"), {
    ...common, title: "Throughput per " + each + " by state", description: throughputText,
    yMax, integer: true, yFormat: String,
    stacks: ENDS.map((state) => ({ key: state, label: state, values: groups.map((g) => g[state]) })),
    lines: [{ key: "started", label: "started", values: groups.map((g) => g.started), zeroPoints: false }],
    empty: ended === 0 && !totals.started ? "No task started or ended in " + span + "." : null,
  });
  document.getElementById("throughput-summary").textContent = throughputText;

  // Runtime percentiles: a line each; a bar with no ended runs leaves a gap.
  const runs = (stats.runtimeBuckets || []).reduce((sum, count) => sum + count, 0);
  const slowest = peak(groups, (g) => g.p99Ms);
  const runtimeText = runs === 0 ? "No run ended in " + span + ": no runtimes to show." :
    "Runtimes of the " + runs + (runs === 1 ? " run" : " runs") + " that ended in " + span + ": p50 " +
    formatDuration(stats.p50Ms) + ", p95 " + formatDuration(stats.p95Ms) + ", p99 " + formatDuration(stats.p99Ms) + "." +
    (slowest ? " Slowest p99: " + formatDuration(slowest.p99Ms) + " at " + bandLabel(groups.indexOf(slowest)) + "." : "");
  const keys = [["p50", "p50Ms"], ["p95", "p95Ms"], ["p99", "p99Ms"]];
  drawChart(document.getElementById("runtime"), {
    ...common, title: "Runtime percentiles per " + each, description: runtimeText,
    yMax: Math.max(1, ...groups.map((g) => g.p99Ms || 0)), steps: DURATION_STEPS,
    yFormat: shortDuration, format: formatDuration,
    lines: keys.map(([key, field]) => ({ key, label: key, values: groups.map((g) => g[field]) })),
    empty: runs === 0 ? "No run ended in " + span + "." : null,
  });
  document.getElementById("runtime-summary").textContent = runtimeText;

  // Failure rate: failed ÷ ended, per bar; the axis tops out near the highest rate.
  const rate = stats.failureRate !== undefined && stats.failureRate !== null ? stats.failureRate : failureRate(totals);
  const worst = peak(groups, (g) => g.failureRate);
  const failureText = ended === 0 ? "No task ended in " + span + ": no failure rate." :
    "Failure rate over " + span + ": " + percent(rate) + " (" + (totals.failed || 0) + " failed of " + ended + " ended)." +
    (worst ? " Highest: " + percent(worst.failureRate) + " at " + bandLabel(groups.indexOf(worst)) + "." : "");
  const rates = groups.map((g) => (g.failureRate === null ? null : g.failureRate * 100));
  drawChart(document.getElementById("failure-rate"), {
    ...common, title: "Failure rate per " + each, description: failureText,
    yMax: Math.min(100, Math.max(5, ...rates.map((r) => r || 0))), yFormat: (v) => v + "%",
    format: (v) => (Math.round(v * 10) / 10) + "%",
    lines: [{ key: "failure", label: "failed", values: rates }],
    empty: ended === 0 ? "No task ended in " + span + "." : null,
  });
  document.getElementById("failure-summary").textContent = failureText;

  showTotals(stats, span, who, rate, runs);
}

function showTotals(stats, span, who, rate, runs) {
  const totals = stats.totals || {};
  const row = (label, value, key) => el("tr", { "data-total": key },
    el("th", { scope: "row" }, label), el("td", { class: "num" }, value));
  document.getElementById("totals-caption").textContent = "Totals of " + who + " over " + span;
  document.getElementById("totals-body").replaceChildren(
    row("Started", String(totals.started || 0), "started"),
    ...ENDS.map((state) => row(state[0].toUpperCase() + state.slice(1), String(totals[state] || 0), state)),
    row("Failure rate", percent(rate), "failureRate"),
    row("Runs timed", String(runs), "runs"),
    row("Runtime p50", formatDuration(stats.p50Ms) || "—", "p50"),
    row("Runtime p95", formatDuration(stats.p95Ms) || "—", "p95"),
    row("Runtime p99", formatDuration(stats.p99Ms) || "—", "p99"));
}

// -- reading -----------------------------------------------------------------------------------

async function load(speak) {
  const ticket = ++loads;
  const view = readView();
  const params = new URLSearchParams({ window: view.window });
  if (view.name) params.set("name", view.name);
  let stats;
  try {
    stats = await getJson("/api/stats?" + params);
  } catch (error) {
    if (ticket === loads) document.getElementById("message").textContent = "The stats could not be read: " + error.message;
    return;
  }
  if (ticket !== loads) return;
  document.getElementById("message").textContent = "";
  answer = stats;
  draw(stats);
  document.body.dataset.loaded = String(ticket);
  if (speak) {
    document.getElementById("heading-note").textContent =
      "Showing " + (view.name || "all names") + " over " + (WINDOWS[view.window] || "the last " + view.window) + ".";
  }
}

async function loadNames() {
  try {
    const names = await getJson("/api/names");
    fillNameSelect(document.getElementById("name"), names.names || [], readView().name);
  } catch (error) { /* "all names" and the URL's name stay */ }
}

let resizeTimer = null;
window.addEventListener("resize", () => {
  clearTimeout(resizeTimer);
  resizeTimer = setTimeout(() => { if (answer) draw(answer); }, 150);
});
document.getElementById("name").addEventListener("change", go);
document.getElementById("window").addEventListener("change", go);
window.addEventListener("popstate", () => { showView(readView()); load(true); });

showView(readView());
loadNames();
const reloadSoon = throttled(() => load(false), 3000);
load(true).then(() => followChanges(reloadSoon, reloadSoon));
