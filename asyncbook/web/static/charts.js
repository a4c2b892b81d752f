"use strict";
// Inline SVG charts, drawn from numbers in the page: no library, nothing fetched. Colours
// come from app.css (a "series-KEY" class per series), so the markup carries no styles.
const SVG_NS = "http://www.w3.org/2000/svg"; // the SVG namespace's name, never fetched
let chartCount = 0;

function svgEl(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
  for (const child of children) node.append(child);
  return node;
}

function niceTicks(max, count, integer, steps) {
  // Round steps (1, 2, 2.5, 5 × 10^k, or the first of `steps` big enough) from 0 to at
  // least max: an axis a reader can read.
  const top = max > 0 ? max : 1;
  const raw = top / count;
  const magnitude = Math.pow(10, Math.floor(Math.log10(raw)));
  const norm = raw / magnitude;
  let step = (norm <= 1 ? 1 : norm <= 2 ? 2 : norm <= 2.5 ? 2.5 : norm <= 5 ? 5 : 10) * magnitude;
  if (steps) step = steps.find((s) => s >= raw) || step;
  if (integer) step = Math.max(1, Math.ceil(step));
  const ticks = [];
  for (let value = 0; value < top + step / 2; value += step) ticks.push(value);
  if (ticks[ticks.length - 1] < top) ticks.push(ticks[ticks.length - 1] + step);
  return { max: ticks[ticks.length - 1], ticks };
}

function evenly(bands, room) {
  // Which bands get a time label: at most `room`, evenly spaced.
  const every = Math.max(1, Math.ceil(bands / room));
  const ticks = [];
  for (let i = 0; i < bands; i += every) ticks.push(i);
  return ticks;
}

function linePath(values, xOf, yOf) {
  // One path per series; a missing value (null) breaks the line instead of faking a zero.
  let d = "";
  let open = false;
  values.forEach((value, i) => {
    if (value === null || value === undefined) { open = false; return; }
    d += (open ? "L" : "M") + xOf(i).toFixed(1) + " " + yOf(value).toFixed(1);
    open = true;
  });
  return d;
}

/**
 * Draw a chart into `container` (replacing what was there) and return its <svg>.
 * spec: title and description (the chart's accessible name and text), bands (the number
 * of time slots), bandLabel(i) and tickLabel(i), ticks(room) (the bands to label, at most
 * room; evenly spaced without it), yMax, yFormat(v), integer (whole-number ticks), steps
 * (the tick steps allowed, ascending; round decimals without it), stacks
 * [{key, label, values}] drawn as stacked bars bottom-up, lines [{key, label, values,
 * zeroPoints}] drawn over them (zeroPoints false: no dot where the value is 0), format(v)
 * for the tooltips, empty (a note when there is nothing to draw).
 */
function drawChart(container, spec) {
  const width = Math.max(280, Math.floor(container.clientWidth || 600));
  const height = width < 500 ? 180 : 220;
  const margin = { left: 56, right: 12, top: 10, bottom: 26 };
  const plotWidth = width - margin.left - margin.right;
  const plotHeight = height - margin.top - margin.bottom;
  const id = "chart-" + (++chartCount);
  const root = svgEl("svg", {
    class: "chart-svg", width, height, viewBox: `0 0 ${width} ${height}`,
    role: "img", "aria-labelledby": id + "-title", "aria-describedby": id + "-desc",
  }, svgEl("title", { id: id + "-title" }, spec.title), svgEl("desc", { id: id + "-desc" }, spec.description));
  const { max, ticks } = niceTicks(spec.yMax, 4, spec.integer, spec.steps);
  const band = plotWidth / Math.max(1, spec.bands);
  const xOf = (i) => margin.left + i * band;
  const midOf = (i) => xOf(i) + band / 2;
  const yOf = (value) => margin.top + plotHeight - (Math.min(value, max) / max) * plotHeight;
  const format = spec.format || spec.yFormat;

  const axes = svgEl("g", { class: "axes", "aria-hidden": "true" });
  for (const tick of ticks) {
    axes.append(svgEl("line", { class: "grid", x1: margin.left, x2: width - margin.right, y1: yOf(tick), y2: yOf(tick) }),
      svgEl("text", { class: "tick y", x: margin.left - 6, y: yOf(tick) + 4, "text-anchor": "end" }, spec.yFormat(tick)));
  }
  const room = Math.max(2, Math.floor(plotWidth / 64));
  for (const i of spec.ticks ? spec.ticks(room) : evenly(spec.bands, room)) {
    axes.append(svgEl("line", { class: "tick-mark", x1: xOf(i), x2: xOf(i), y1: margin.top + plotHeight, y2: margin.top + plotHeight + 4 }),
      svgEl("text", { class: "tick x", x: xOf(i), y: height - 8, "text-anchor": i === 0 ? "start" : "middle" }, spec.tickLabel(i)));
  }
  axes.append(svgEl("line", { class: "axis", x1: margin.left, x2: width - margin.right, y1: margin.top + plotHeight, y2: margin.top + plotHeight }));
  root.append(axes);

  const bars = svgEl("g", { class: "bars" });
  const gap = band > 5 ? Math.min(2, band * 0.2) : 0;
  for (let i = 0; i < spec.bands; i += 1) {
    let base = 0;
    for (const stack of spec.stacks || []) {
      const value = stack.values[i] || 0;
      if (value <= 0) continue;
      const top = yOf(base + value);
      bars.append(svgEl("rect", {
        class: "segment series-" + stack.key, "data-series": stack.key, "data-value": value,
        x: (xOf(i) + gap / 2).toFixed(1), y: top.toFixed(1), width: Math.max(0.5, band - gap).toFixed(1),
        height: Math.max(0.5, yOf(base) - top).toFixed(1),
      }, svgEl("title", {}, spec.bandLabel(i) + ": " + format(value) + " " + stack.label)));
      base += value;
    }
  }
  root.append(bars);

  const radius = Math.max(1, Math.min(2.5, band / 3));
  for (const line of spec.lines || []) {
    const group = svgEl("g", { class: "series series-" + line.key, "data-series": line.key });
    const d = linePath(line.values, midOf, yOf);
    if (d) group.append(svgEl("path", { class: "line series-" + line.key, d }));
    line.values.forEach((value, i) => {
      if (value === null || value === undefined || (line.zeroPoints === false && value === 0)) return;
      group.append(svgEl("circle", { class: "point series-" + line.key, cx: midOf(i).toFixed(1), cy: yOf(value).toFixed(1), r: radius },
        svgEl("title", {}, spec.bandLabel(i) + ": " + line.label + " " + format(value))));
    });
    root.append(group);
  }
  if (spec.empty) {
    root.append(svgEl("text", { class: "empty", x: margin.left + plotWidth / 2, y: margin.top + plotHeight / 2, "text-anchor": "middle" }, spec.empty));
  }
  container.replaceChildren(root);
  return root;
}
