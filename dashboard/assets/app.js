// agentrl dashboard: curves, comparison and trajectories of run directories, drawn with uPlot.
"use strict";
const $ = (sel, el) => (el || document).querySelector(sel);
const h = (tag, attrs, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "class") e.className = v; else if (k.startsWith("on")) e.addEventListener(k.slice(2), v); else e.setAttribute(k, v);
  }
  for (const k of kids.flat()) if (k != null) e.append(k);
  return e;
};
const api = async (path) => { const r = await fetch(path); if (!r.ok) throw new Error(path + ": " + r.status + " " + (await r.text())); return r.json(); };
const COLORS = ["#2563eb", "#dc2626", "#16a34a", "#9333ea", "#ea580c", "#0891b2", "#ca8a04", "#db2777", "#4b5563", "#65a30d"];
const WIDTH = () => Math.max(360, Math.min(560, (window.innerWidth - 60) / 2));

// The panels of the run view: one chart per entry; thr names the metric a monitor threshold bounds
// (its warnings and actions are marked), act the invariant whose actions are marked.
const PANELS = [
  ["Outcome", [
    { id: "reward", title: "reward and success", keys: ["reward/mean", "reward/success"], warn: true },
    { id: "levels", title: "training success per difficulty level", keys: ["reward/success/"] },
  ]],
  ["Loss", [
    { id: "loss", title: "loss terms", keys: ["loss/total", "loss/pg", "sft/loss"] },
    { id: "loss-aux", title: "entropy term and approx KL", keys: ["loss/entropy", "loss/approx_kl", "loss/kl"] },
  ]],
  ["Exploration", [
    { id: "entropy", title: "token entropy", keys: ["explore/entropy"], thr: "explore/entropy", warn: true },
    { id: "distinct", title: "distinct actions per group, tool-call rate", keys: ["explore/distinct_per_group", "explore/tool_call_rate"] },
    { id: "toolmix", title: "tool mix", keys: ["explore/tool_mix/"] },
    { id: "entctl", title: "entropy controller: bonus and upper clip", keys: ["monitor/entropy_coef", "monitor/clip_high"], act: "exploration" },
  ]],
  ["Learning signal", [
    { id: "zerovar", title: "zero-variance share", keys: ["signal/zero_var_share"], thr: "signal/zero_var_share", warn: true },
    { id: "effbatch", title: "effective batch", keys: ["signal/effective_batch"] },
    { id: "advspread", title: "advantage spread", keys: ["signal/adv_spread", "signal/adv_mean_abs"] },
    { id: "gradnorm", title: "grad norm", keys: ["signal/grad_norm", "signal/grad_norm_max"] },
    { id: "tasks", title: "task sampling: draws, learnable tasks, oversampling", keys: ["signal/tasks_fresh", "signal/tasks_replayed", "signal/tasks_learnable", "signal/oversample"], act: "learning signal" },
  ]],
  ["Distribution shift", [
    { id: "kl", title: "behaviour KL", keys: ["shift/behaviour_kl"], thr: "shift/behaviour_kl", warn: true },
    { id: "isq", title: "IS weight quantiles", keys: ["is/weight_p50", "is/weight_p90", "is/weight_p99", "is/weight_max", "shift/is_ess"] },
    { id: "clip", title: "clip fractions", keys: ["loss/pg_clipfrac", "loss/pg_clipfrac_low", "loss/pg_clipfrac_high", "loss/pg_clipfrac_dual"] },
    { id: "lag", title: "version lag", keys: ["shift/version_lag_mean", "shift/version_lag_max"] },
    { id: "shiftctl", title: "shift controller: IS cap and mask", keys: ["monitor/is_cap", "monitor/is_mask_high"], act: "distribution shift" },
  ]],
  ["Asynchronous", [
    { id: "queue", title: "queue depth (groups in flight and ready; overlap mode: batches sampled ahead)", keys: ["async/groups_in_flight", "async/groups_ready", "async/batches_ahead", "async/cancelled_stale"] },
    { id: "stale", title: "episodes dropped as stale, groups kept without them", keys: ["async/dropped_stale", "dist/dropped_stale", "async/partial_stale"] },
    { id: "latbias", title: "latency bias: mean duration of the episodes sampled over those trained (1: none; above: slow tasks under-trained)", keys: ["async/latency_bias"], thr: "async/latency_bias", warn: true },
    { id: "dist", title: "workers, by cause: trajectories redelivered and duplicates dropped, tasks retried and swept, groups held, partial and timed out", keys: ["dist/redelivered", "dist/dropped_duplicate", "dist/tasks_retried", "dist/tasks_swept", "dist/held", "dist/partial_groups", "dist/groups_timed_out"] },
    { id: "waits", title: "waits (s)", keys: ["time/learner_wait_s", "time/generator_wait_s"] },
  ]],
];
const STAGES = ["generate", "env", "train", "learner wait", "other"];

let runs = [];
let current = null; // the view being shown: {route, lines}
let charts = [];

function clearCharts() { for (const c of charts) c.destroy(); charts = []; }

// at places an event (a warning, an action, an evaluation) on the view's x axis: its line over the
// whole run, or its step in the phase shown (an evaluation just before the phase's first line at
// step 0); null when the view does not show it.
function at(view, e, ev) {
  if (!view.phase) return e.x;
  if (e.phase === view.phase) return e.step;
  const first = (ev.phases || []).find((p) => p.name === view.phase);
  return e.when !== undefined && first && e.x === first.start - 1 ? 0 : null;
}

// overlay draws phase boundaries (over the whole run), threshold lines and warning marks over a
// chart. Its text is set left-aligned on its own (uPlot leaves the axes' alignment on the
// context) and kept inside the plot, clear of the axis labels and of each other.
function overlay(ev, spec, view) {
  view = view || {};
  return (u) => {
    const ctx = u.ctx, top = u.bbox.top, bottom = u.bbox.top + u.bbox.height;
    const left = u.bbox.left, right = u.bbox.left + u.bbox.width, px = u.pxRatio || window.devicePixelRatio || 1;
    const inX = (x) => x >= left - 0.5 && x <= right + 0.5;
    ctx.save();
    ctx.lineWidth = 1;
    ctx.font = Math.round(11 * px) + "px system-ui";
    ctx.textAlign = "left"; ctx.textBaseline = "alphabetic";
    const line = Math.round(12 * px);
    if (!view.phase) {
      let lastEnd = -Infinity, row = 0;
      for (const p of ev.phases || []) {
        const x = u.valToPos(p.start - 0.5, "x", true);
        if (x > right) continue;
        ctx.strokeStyle = "#9ca3af"; ctx.setLineDash([4, 4]);
        if (x > left + 1) { ctx.beginPath(); ctx.moveTo(x, top); ctx.lineTo(x, bottom); ctx.stroke(); }
        const lx = Math.max(x, left) + 3 * px, w = ctx.measureText(p.name).width;
        if (lx + w > right) continue;
        row = lx < lastEnd + 4 * px ? row + 1 : 0; // a short phase: its neighbour's name goes below
        ctx.fillStyle = "#6b7280"; ctx.fillText(p.name, lx, top + line * (row + 1) - 1);
        lastEnd = lx + w;
      }
    }
    if (spec.thr) for (const t of ev.thresholds || []) if (t.metric === spec.thr) {
      const sc = u.scales.y;
      if (sc.min == null || t.value < sc.min || t.value > sc.max) continue; // off the chart
      const y = u.valToPos(t.value, "y", true);
      ctx.strokeStyle = "#dc2626"; ctx.setLineDash([6, 3]);
      ctx.beginPath(); ctx.moveTo(left, y); ctx.lineTo(right, y); ctx.stroke();
      const label = t.name + " " + t.value;
      // Above the line, or below it where the top of the plot leaves no room.
      const ly = y - 3 * px - line < top ? y + line : y - 3 * px;
      ctx.fillStyle = "#dc2626"; ctx.fillText(label, right - ctx.measureText(label).width - 4 * px, ly);
    }
    if (spec.warn) {
      ctx.fillStyle = "rgba(220,38,38,0.8)"; ctx.setLineDash([]);
      for (const w of ev.warnings || []) {
        if (spec.thr && !warnMatches(w.text, spec.thr)) continue;
        const wx = at(view, w, ev);
        if (wx == null) continue;
        const x = u.valToPos(wx, "x", true);
        if (!inX(x)) continue;
        ctx.beginPath(); ctx.moveTo(x - 4, bottom); ctx.lineTo(x + 4, bottom); ctx.lineTo(x, bottom - 7); ctx.fill();
      }
    }
    // The monitor's actions: blue marks hanging from the top, on the panels of their invariant.
    if (spec.warn || spec.act) {
      ctx.fillStyle = "rgba(37,99,235,0.85)"; ctx.setLineDash([]);
      for (const a of ev.actions || []) {
        if (spec.act ? !a.text.startsWith(spec.act) : spec.thr && !warnMatches(a.text, spec.thr)) continue;
        const ax = at(view, a, ev);
        if (ax == null) continue;
        const x = u.valToPos(ax, "x", true);
        if (!inX(x)) continue;
        ctx.beginPath(); ctx.moveTo(x - 4, top); ctx.lineTo(x + 4, top); ctx.lineTo(x, top + 7); ctx.fill();
      }
    }
    ctx.restore();
  };
}
function warnMatches(text, metric) {
  if (metric.startsWith("explore")) return text.startsWith("exploration");
  if (metric.startsWith("signal")) return text.startsWith("learning signal");
  if (metric.startsWith("shift")) return text.startsWith("distribution shift");
  if (metric === "async/latency_bias") return text.startsWith("latency bias");
  return true;
}

const STEP_INCRS = [1, 2, 5, 10, 20, 25, 50, 100, 200, 250, 500, 1e3, 2e3, 2.5e3, 5e3, 1e4, 2e4, 2.5e4, 5e4, 1e5, 2e5, 5e5, 1e6];

// tickText labels an axis's ticks with the fewest decimals that write each tick exactly, and so
// keep them apart (0.0002 and 0.0003 must not both read "0", nor 1.0001 and 1.0002 "1", nor 0.25
// read "0.3"), in exponent form when every tick is below 0.001 or one reaches a million.
function tickText(splits) {
  const vals = splits.filter((v) => v != null);
  if (!vals.length) return splits.map(() => "");
  const big = Math.max(...vals.map(Math.abs));
  const step = vals.length > 1 ? Math.abs(vals[1] - vals[0]) : big;
  const tol = (step || big || 1) * 1e-6;
  const exp = big >= 1e6 || (big > 0 && big < 1e-3);
  const fmt = (v, p) => (Math.abs(v) <= tol ? "0" : exp ? v.toExponential(p) : v.toFixed(p));
  for (let p = 0; p <= 15; p++) {
    if (vals.every((v) => Math.abs(+fmt(v, p) - v) <= tol)) return splits.map((v) => (v == null ? "" : fmt(v, p)));
  }
  return splits.map((v) => (v == null ? "" : String(v)));
}

// axisSize is the y axis's width in CSS pixels for its longest label.
function axisSize(u, values) {
  const n = values ? Math.max(0, ...values.map((v) => String(v == null ? "" : v).length)) : 4;
  return Math.max(40, Math.ceil(n * 7.5) + 20);
}

// chart draws data ([x, ...ys]) with series labels into a new box; it records the number of
// points and series on the box for tests.
function chart(parent, id, title, labels, data, opts) {
  const box = h("div", { class: "chart", "data-chart": id }, h("div", { class: "title" }, title));
  parent.append(box);
  const series = [{ label: opts.xLabel || "step" }];
  // Steps are whole numbers: the x axis ticks them as such; both axes label their ticks apart.
  const axes = [{ incrs: STEP_INCRS, values: (u, splits) => tickText(splits), label: opts.xLabel, labelSize: 16 },
    { values: (u, splits) => tickText(splits), size: axisSize }];
  (opts.axes || []).forEach((a, i) => Object.assign(axes[i], a));
  labels.forEach((l, i) => series.push(Object.assign({ label: l, stroke: COLORS[i % COLORS.length], width: 1.2, spanGaps: true,
    points: { show: opts.points || false } }, (opts.seriesOpts || [])[i] || {})));
  const u = new uPlot({ width: WIDTH(), height: 220, series, scales: Object.assign({ x: { time: false } }, opts.scales || {}),
    axes, hooks: { draw: opts.draw ? [opts.draw] : [] }, legend: { live: true } }, data, box);
  charts.push(u);
  box.uplot = u;
  box.dataset.points = String(data[0].length);
  box.dataset.series = String(labels.length);
  return box;
}

// phaseNames lists a run's phases (from the run list) in the order they began.
function phaseNames(name) {
  const r = runs.find((r) => r.name === name);
  return r ? [...new Set((r.phases || []).map((p) => p.name))] : [];
}

// phasePicker offers each phase on its own axis, or every line of the runs ("all"); hrefOf makes
// the link of a choice. The choice shown is marked "on".
function phasePicker(phases, chosen, hrefOf) {
  return h("div", { class: "filters", id: "phase-select" }, "phase:",
    [...phases, "all"].map((p) => h("a", { href: hrefOf(p), "data-phase": p, class: (chosen || "all") === p ? "on" : "" }, p)));
}

async function showRun(name, params) {
  const main = $("#main");
  // Each phase has its own axis (its steps); the default is the run's latest phase.
  const phases = phaseNames(name);
  let phase = params.get("phase") || phases[phases.length - 1] || "all";
  if (phase !== "all" && !phases.includes(phase)) phase = "all";
  const view = { phase: phase === "all" ? "" : phase };
  const pq = view.phase ? "&phase=" + enc(view.phase) : "";
  const [ev, ...series] = await Promise.all([api(`/api/run/${enc(name)}/events`),
    ...PANELS.flatMap(([, specs]) => specs.map((s) => api(`/api/run/${enc(name)}/series?keys=${enc(s.keys.join(","))}${pq}`))),
    api(`/api/run/${enc(name)}/series?keys=${enc("time/generate_s,time/env_s,time/generate_env_s,time/train_s,time/learner_wait_s,time/step_s")}&max=1500${pq}`),
    api(`/api/run/${enc(name)}/series?keys=${enc("async/staleness/")}&max=${MAX_STALE_POINTS}${pq}`)]);
  const staleData = series.pop(), timeData = series.pop();
  const xLabel = view.phase ? view.phase + " step" : "line (all phases)";
  clearCharts();
  main.replaceChildren(phasePicker(phases, phase, (p) => `#/run/${enc(name)}?phase=${enc(p)}`));
  main.append(h("div", { class: "legend-note" }, `${name}: ${series[0] ? series[0].total : 0} ${view.phase ? view.phase + " steps" : "training lines"}; ` +
    `${ev.warnings.length} monitor warnings; ${(ev.actions || []).length} monitor actions; phases ${ev.phases.map((p) => p.name + " " + p.start + "–" + p.end).join(", ")}` +
    (ev.config_error ? "; config: " + ev.config_error : "")));
  let k = 0;
  for (const [title, specs] of PANELS) {
    main.append(h("h2", {}, title));
    const panel = h("div", { class: "panel" });
    main.append(panel);
    for (const spec of specs) {
      const s = series[k++];
      const labels = Object.keys(s.series);
      // A panel with no value in the phase shown (the SFT loss on the RL axis) is left out.
      if (labels.length === 0 || !labels.some((l) => s.series[l].some((v) => v != null))) continue;
      chart(panel, spec.id, spec.title + (s.x.length < s.total ? ` (${s.x.length} of ${s.total} points)` : ""), labels,
        [s.x, ...labels.map((l) => s.series[l])], { draw: overlay(ev, spec, view), xLabel });
    }
    if (title === "Outcome") evalChart(panel, ev, view, xLabel);
    if (title === "Asynchronous") stalenessChart(panel, staleData, ev);
    if (!panel.children.length) { panel.previousSibling.remove(); panel.remove(); } // e.g. no asynchronous phase
  }
  main.append(h("h2", {}, "Time per step"));
  const tp = h("div", { class: "panel" });
  main.append(tp);
  timeChart(tp, timeData, ev, view, xLabel);
  if (ev.warnings.length) {
    main.append(h("h2", {}, "Monitor warnings"));
    main.append(h("div", { class: "warnings" }, ev.warnings.slice(-200).map((w) => h("div", {}, `${w.phase} step ${w.step}: ${w.text}`))));
  }
  if ((ev.actions || []).length) {
    main.append(h("h2", {}, "Monitor actions"));
    main.append(h("div", { class: "actions", id: "actions" }, ev.actions.slice(-200).map((a) => h("div", {}, `${a.phase} step ${a.step}: ${a.text}`))));
  }
}

// The staleness histogram reads every step's async/staleness/LAG counts; above this many steps it
// reads a downsampled subset (and says so), which keeps the page light on long runs.
const MAX_STALE_POINTS = 4000;

// stalenessChart draws the asynchronous phases' trained episodes by version lag (summed over the
// steps read) as bars.
function stalenessChart(parent, s, ev) {
  const lags = Object.keys(s.series).map((k) => +k.slice("async/staleness/".length)).filter((x) => x >= 0).sort((a, b) => a - b);
  if (!lags.length) return;
  const counts = lags.map((l) => s.series["async/staleness/" + l].reduce((acc, v) => acc + (v || 0), 0));
  const bars = uPlot.paths.bars({ size: [0.6, 60] });
  const box = chart(parent, "staleness", "trained episodes by version lag" + (s.x.length < s.total ? ` (${s.x.length} of ${s.total} steps)` : ""),
    ["episodes"], [lags, counts], { xLabel: "version lag", seriesOpts: [{ paths: bars, fill: COLORS[0] + "cc", width: 0 }],
      scales: { x: { time: false, range: [lags[0] - 0.5, lags[lags.length - 1] + 0.5] }, y: { range: [0, Math.max(1, ...counts) * 1.05] } },
      axes: [{ splits: () => lags }, {}] });
  box.dataset.lags = String(lags.length);
}

// evalChart plots held-out pass@1 (sampled and greedy) per environment at the lines they followed.
function evalChart(parent, ev, view, xLabel) {
  const evals = ev.evals.map((e) => Object.assign({}, e, { x: at(view, e, ev) })).filter((e) => e.x != null);
  if (!evals.length) return;
  const xs = [...new Set(evals.map((e) => e.x))].sort((a, b) => a - b);
  const envs = [...new Set(evals.map((e) => e.env))];
  const labels = [], cols = [];
  for (const env of envs) for (const [key, tag] of [["eval/pass1", "sampled"], ["eval/pass1_greedy", "greedy"]]) {
    labels.push(`${env} pass@1 ${tag}`);
    cols.push(xs.map((x) => { const e = evals.find((e) => e.x === x && e.env === env); return e && key in e.metrics ? e.metrics[key] : null; }));
  }
  chart(parent, "evals", "held-out pass@1", labels, [xs, ...cols], { points: true, draw: overlay(ev, {}, view), xLabel });
}

// timeChart stacks each step's stages as bars: sampling wall time split into generation and
// environment by their per-episode sums, then training, learner wait and the rest of the step.
function timeChart(parent, s, ev, view, xLabel) {
  const n = s.x.length, g = s.series;
  const get = (k, i) => (g[k] && g[k][i] != null ? g[k][i] : 0);
  const parts = STAGES.map(() => new Array(n).fill(0));
  for (let i = 0; i < n; i++) {
    const wall = get("time/generate_env_s", i), gs = get("time/generate_s", i), es = get("time/env_s", i);
    const share = gs + es > 0 ? gs / (gs + es) : 1;
    parts[0][i] = wall * share; parts[1][i] = wall * (1 - share);
    parts[2][i] = get("time/train_s", i); parts[3][i] = get("time/learner_wait_s", i);
    parts[4][i] = Math.max(0, get("time/step_s", i) - wall - parts[2][i] - parts[3][i]);
  }
  // Cumulative sums, drawn largest first so each stage shows as its band of the bar.
  const cum = []; let acc = new Array(n).fill(0);
  for (const p of parts) { acc = acc.map((v, i) => v + p[i]); cum.push(acc); }
  const bars = uPlot.paths.bars({ size: [0.9, 40] });
  const labels = STAGES.slice().reverse(), data = [s.x, ...cum.slice().reverse()];
  const seriesOpts = labels.map((_, i) => ({ paths: bars, fill: COLORS[(STAGES.length - 1 - i) % COLORS.length] + "cc", width: 0 }));
  chart(parent, "time", "seconds per step by stage (stacked)", labels, data, { seriesOpts, draw: overlay(ev, {}, view), xLabel });
}

async function showCompare(params) {
  const main = $("#main");
  const chosen = (params.get("runs") || latestRuns().slice(0, 2).map((r) => r.name).join(",")).split(",").filter(Boolean);
  // Runs line up by phase and step: the default is the latest phase that every chosen run has.
  const lists = chosen.map(phaseNames), union = [...new Set(lists.flat())];
  const common = union.filter((p) => lists.every((l) => l.includes(p)));
  let phase = params.get("phase") || common[common.length - 1] || "all";
  if (phase !== "all" && !union.includes(phase)) phase = "all";
  const pq = phase === "all" ? "" : "&phase=" + enc(phase);
  const hrefOf = (sel, p) => "#/compare?runs=" + sel.map(enc).join(",") + (p ? "&phase=" + enc(p) : "");
  const keys = ["reward/mean", "reward/success", "explore/entropy", "signal/zero_var_share", "shift/behaviour_kl", "signal/grad_norm", "loss/total", "time/step_s"];
  const picks = h("div", { class: "filters" }, "runs:", runs.map((r) => h("label", {},
    h("input", Object.assign({ type: "checkbox", value: r.name, onchange: () => {
      const sel = [...main.querySelectorAll(".filters input:checked")].map((i) => i.value);
      location.hash = hrefOf(sel, params.get("phase"));
    } }, chosen.includes(r.name) ? { checked: "" } : {})), r.name)));
  const rep = chosen.length ? await api(`/api/compare?runs=${chosen.map(enc).join(",")}&keys=${enc(keys.join(","))}&max=2000${pq}`) : { runs: [], series: [], diff: [] };
  clearCharts();
  main.replaceChildren(picks, phasePicker(union, phase, (p) => hrefOf(chosen, p)));
  const panel = h("div", { class: "panel" });
  main.append(h("h2", {}, "Curves"), panel);
  for (const key of keys) {
    const tables = [], labels = [];
    rep.series.forEach((s, i) => { if (s.series[key]) { tables.push([s.x, s.series[key]]); labels.push(rep.runs[i]); } });
    if (!tables.length) continue;
    const data = tables.length === 1 ? tables[0] : uPlot.join(tables);
    const box = chart(panel, "cmp-" + key, key, labels, data, { xLabel: phase === "all" ? "line (all phases)" : phase + " step" });
    box.dataset.runs = String(labels.length);
  }
  main.append(h("h2", {}, "Config differences"));
  main.append(rep.diff.length ? h("table", { class: "diff", id: "config-diff" }, h("tr", {}, h("th", {}, "key"), rep.runs.map((r) => h("th", {}, r))),
    rep.diff.map((d) => h("tr", {}, h("td", {}, d.key), d.values.map((v) => h("td", {}, v || "—")))))
    : h("div", { id: "config-diff" }, "the configs are the same"));
  if (rep.errors) main.append(h("div", { class: "warnings" }, rep.errors.join("; ")));
}

async function showTrajs(name, params) {
  const main = $("#main");
  const q = new URLSearchParams(params);
  const off = +(q.get("offset") || 0);
  const page = await api(`/api/run/${enc(name)}/trajs?${q.toString()}`);
  clearCharts();
  const field = (k, attrs) => h("input", Object.assign({ name: k, value: q.get(k) || "", placeholder: k }, attrs || {}));
  const sel = (k, opts) => { const s = h("select", { name: k }, h("option", { value: "" }, "any " + k), opts.map((o) => h("option", { value: o }, o || "(none)"))); s.value = q.get(k) || ""; return s; };
  const form = h("form", { class: "filters", onsubmit: (e) => {
    e.preventDefault();
    const p = new URLSearchParams();
    for (const el of form.elements) if (el.name && el.value) p.set(el.name, el.value);
    location.hash = `#/trajs/${enc(name)}?${p.toString()}`;
  } }, sel("phase", page.phases || []), sel("env", page.envs || []), sel("status", ["ok", "truncated", "env_error", "timeout"]),
  field("step"), field("min_reward"), field("max_reward"), h("button", {}, "filter"),
  h("span", { class: "legend-note" }, `${page.matched} of ${page.total} trajectories`));
  const nav = (d) => { q.set("offset", String(Math.max(0, off + d))); location.hash = `#/trajs/${enc(name)}?${q.toString()}`; };
  const table = h("table", { id: "traj-table" }, h("tr", {}, ["#", "phase", "step", "env", "seed", "status", "reward", "turns", "tool calls", "tokens"].map((c) => h("th", {}, c))),
    page.items.map((t) => h("tr", { class: "row", onclick: () => { location.hash = `#/traj/${enc(name)}/${t.i}`; } },
      [t.i, t.phase, t.step, t.env, t.seed, t.status, t.reward.toFixed(3), t.turns, t.tool_calls, t.tokens].map((c) => h("td", {}, String(c))))));
  main.replaceChildren(...[form, table, h("div", { class: "filters" },
    off > 0 ? h("button", { onclick: () => nav(-50) }, "previous") : null,
    off + page.items.length < page.matched ? h("button", { onclick: () => nav(50) }, "next") : null),
  page.damage ? h("div", { class: "warnings" }, "damaged stretches skipped: " + page.damage.join("; ")) : null].filter((x) => x != null));
}

// heat colours a trained token by its behaviour logprob: green near 0, red at -5 and below.
function heat(lp) { const t = Math.max(0, Math.min(1, -lp / 5)); return `hsla(${120 * (1 - t)}, 80%, 70%, 0.8)`; }

// subEpisodes reads a trajectory's "sub_episode" meta entries (rollout.SubEpisode's form: "id=…
// parent=… depth=… turn=… start=… end=… samples=… status=… reward=… calls=… critical=…"); an
// entry it cannot read is skipped.
function subEpisodes(meta) {
  const out = [];
  for (const kv of meta || []) {
    if (kv.k !== "sub_episode") continue;
    const f = {};
    for (const p of String(kv.v).split(/\s+/)) { const i = p.indexOf("="); if (i > 0) f[p.slice(0, i)] = p.slice(i + 1); }
    const ints = ["depth", "turn", "start", "end", "samples", "calls", "critical"];
    if (!f.id || !f.parent || ints.some((k) => !/^-?\d+$/.test(f[k] || ""))) continue;
    const e = { id: f.id, parent: f.parent, status: f.status || "?", reward: Number(f.reward) || 0 };
    for (const k of ints) e[k] = Number(f[k]);
    out.push(e);
  }
  return out;
}

// sampleTree draws an episode as the tree of its training samples: the root episode with its own
// samples (the first, then each folded context or template split), and under it each
// sub-episode (nested by the episode that delegated it) with its samples, or "not trained" when it
// failed. why(k) names sample k; go(k) shows it in the body.
function sampleTree(v, bounds, subs, why, go) {
  const meta = (k) => ((v.meta || []).find((kv) => kv.k === k) || {}).v;
  const owner = (a) => { let o = null; for (const se of subs) if (se.start <= a && a < se.end && (!o || se.depth > o.depth)) o = se; return o; };
  const samplesOf = new Map([[v.summary.id, []]]);
  for (const se of subs) samplesOf.set(se.id, []);
  for (let k = 0; k + 1 < bounds.length; k++) { const o = owner(bounds[k]); samplesOf.get(o ? o.id : v.summary.id).push(k); }
  const sampleItems = (id) => samplesOf.get(id).map((k) => h("li", { class: "tree-sample" },
    h("a", { tabindex: "0", "data-sample": String(k + 1), onclick: () => go(k) }, `sample ${k + 1}`),
    ` ${why(k)} · ${bounds[k + 1] - bounds[k]} tokens`));
  const known = new Set([v.summary.id, ...subs.map((se) => se.id)]);
  const children = (id) => subs.filter((se) => se.parent === id || (id === v.summary.id && !known.has(se.parent)));
  const node = (se) => h("li", { class: "tree-node sub", "data-id": se.id, "data-depth": String(se.depth) },
    h("span", { class: "tree-label" }, `${se.id} · depth ${se.depth} · from turn ${se.turn + 1} of ${se.parent} · ${se.status} · reward ${se.reward} · model calls ${se.calls} · critical ${se.critical}` +
      (se.end > se.start ? "" : " · not trained")),
    h("ul", {}, sampleItems(se.id), children(se.id).map(node)));
  const calls = meta("model_calls"), critical = meta("critical_calls"), folds = meta("folds");
  const root = h("li", { class: "tree-node root", "data-id": v.summary.id, "data-depth": "0" },
    h("span", { class: "tree-label" }, `${v.summary.id} · ${bounds.length - 1} training samples` + (subs.length ? ` · ${subs.length} sub-episodes` : "") +
      (calls ? ` · model calls ${calls}` : "") + (critical ? ` · critical path ${critical}` : "") + (folds ? ` · folds ${folds}` : "")),
    h("ul", {}, sampleItems(v.summary.id), children(v.summary.id).map(node)));
  return h("div", { id: "traj-tree" }, h("ul", {}, root));
}

async function showTraj(name, i) {
  const main = $("#main");
  const v = await api(`/api/run/${enc(name)}/traj/${i}`);
  clearCharts();
  const heatBox = h("input", { type: "checkbox", id: "heat-toggle", onchange: () => body.classList.toggle("heat", heatBox.checked) });
  const body = h("div", { id: "traj-body" });
  const toks = v.tokens;
  // The training samples: sample k spans tokens bounds[k] .. bounds[k + 1].
  const bounds = [0, ...(v.samples || []).filter((b) => b > 0 && b < toks.length), toks.length];
  const subs = subEpisodes(v.meta);
  const why = (k) => {
    const a = bounds[k];
    if (k === 0) return `the episode ${v.summary.id}`;
    const se = subs.find((x) => x.end > x.start && x.start === a);
    if (se) return `sub-episode ${se.id} (depth ${se.depth}, delegated by ${se.parent} at its turn ${se.turn + 1})`;
    for (const tu of v.turns) {
      const c = tu.end === a && tu.obs_end === tu.end && (tu.tool_calls || []).find((c) => !c.error && String(c.result || "").startsWith("folded "));
      if (c) return `the context folded to the policy's summary (${c.result})`;
    }
    return "the context rendered afresh (the chat template is not prefix-stable)";
  };
  const heads = new Map(bounds.slice(0, -1).map((b, k) => [b, k]));
  const several = bounds.length > 2 || subs.length > 0;
  const sampleHead = (k) => h("div", { class: "sample-head", id: `sample-${k + 1}` }, `sample ${k + 1} of ${bounds.length - 1}: ${why(k)}`);
  const go = (k) => { const e = document.getElementById(`sample-${k + 1}`); if (e) e.scrollIntoView(); };
  const span = (j) => {
    const t = toks[j];
    const e = h("span", { class: "tok " + (t.m ? "trained" : "untrained"), title: t.m ? `logprob ${t.lp.toFixed(3)} (version ${t.v})` : "not trained" }, t.t);
    if (t.m) e.style.setProperty("--heat", heat(t.lp));
    return e;
  };
  // messages groups the tokens [a, b) into runs of one role.
  const messages = (a, b) => {
    const out = [];
    for (let j = a; j < b;) {
      if (several && heads.has(j)) out.push(sampleHead(heads.get(j)));
      let k = j + 1; while (k < b && toks[k].r === toks[j].r && !heads.has(k)) k++;
      const m = h("div", { class: "msg " + toks[j].r }, h("span", { class: "role" }, toks[j].r));
      for (let x = j; x < k; x++) m.append(span(x));
      out.push(m); j = k;
    }
    return out;
  };
  let pos = 0;
  v.turns.forEach((tu, n) => {
    body.append(...messages(pos, tu.start));
    const a = messages(tu.start, tu.end);
    const first = a.find((e) => e.classList.contains("msg"));
    if (first) first.querySelector(".role").textContent = `assistant · turn ${n + 1}` + (tu.reward ? ` · reward ${tu.reward}` : "");
    body.append(...a);
    for (const c of tu.tool_calls || []) body.append(h("div", { class: "tool-call" }, `tool call ${c.name}(${c.arguments})` +
      (c.error ? `\nerror: ${c.error}` : "") + (c.result != null && c.result !== "" ? `\n→ ${c.result}` : "")));
    body.append(...messages(tu.end, tu.obs_end));
    pos = tu.obs_end;
  });
  body.append(...messages(pos, toks.length));
  const s = v.summary;
  main.replaceChildren(...[
    h("div", {}, h("a", { href: `#/trajs/${enc(name)}` }, "← trajectories")),
    h("h2", {}, `${s.id}: ${s.env} seed ${s.seed}, ${s.phase} step ${s.step}, ${s.status}, reward ${s.reward}`),
    h("div", { class: "filters" }, h("label", {}, heatBox, " logprob heat map"),
      h("span", { class: "legend-note" }, "underlined: trained (loss mask); grey: not trained" + (v.decoded ? "" : "; no tokenizer in the run directory: token ids shown"))),
    v.error ? h("div", { class: "warnings" }, v.error) : null,
    v.meta && v.meta.length ? h("div", { class: "legend-note" }, v.meta.map((kv) => kv.k + "=" + kv.v).join("  ")) : null,
    several ? sampleTree(v, bounds, subs, why, go) : null,
    body].filter((x) => x != null));
}
// The heat map is a style, so toggling it redraws nothing.
document.head.append(h("style", {}, ".heat .tok.trained { background: var(--heat); }"));

const enc = encodeURIComponent;

async function route() {
  const hash = location.hash.replace(/^#/, "") || "/run/";
  const [path, query] = hash.split("?");
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  const params = new URLSearchParams(query || "");
  const name = parts[1] || (latestRuns()[0] || {}).name;
  for (const a of document.querySelectorAll("header nav a")) a.classList.toggle("on", a.id === "nav-" + (parts[0] === "traj" ? "trajs" : parts[0] || "run"));
  $("#run-select").value = name || "";
  const t0 = performance.now();
  document.body.dataset.ready = "0";
  try {
    if (parts[0] === "compare") await showCompare(params);
    else if (parts[0] === "trajs") await showTrajs(name, params);
    else if (parts[0] === "traj") await showTraj(name, +parts[2]);
    else if (name) await showRun(name, params);
    else $("#main").textContent = "no runs";
  } catch (e) {
    $("#main").replaceChildren(h("pre", { class: "warnings" }, String(e)));
  }
  const r = runs.find((r) => r.name === name);
  current = { hash: location.hash, name, lines: r ? r.lines : 0, live: parts[0] !== "traj" && parts[0] !== "trajs" };
  document.body.dataset.renderMs = String(Math.round(performance.now() - t0));
  if (!document.body.dataset.loadMs) document.body.dataset.loadMs = String(Math.round(performance.now()));
  document.body.dataset.ready = "1";
}

async function loadRuns() {
  runs = await api("/api/runs");
  const sel = $("#run-select");
  const keep = sel.value;
  sel.replaceChildren(...runs.map((r) => h("option", { value: r.name }, r.name)));
  sel.value = keep || (latestRuns()[0] || {}).name || "";
}

// latestRuns orders the runs by when they last wrote, latest first (the page opens the first).
function latestRuns() { return runs.slice().sort((a, b) => (b.updated || 0) - (a.updated || 0)); }

// poll re-reads the runs every few seconds and redraws the view when its run logged new lines.
async function poll() {
  try {
    await loadRuns();
    const r = current && runs.find((r) => r.name === current.name);
    $("#live").textContent = r ? `${r.name}: ${r.lines} lines, step ${r.step}` : "";
    if (current && current.live && r && r.lines !== current.lines && document.body.dataset.ready === "1") await route();
  } catch (e) { $("#live").textContent = "offline"; }
  setTimeout(poll, 3000);
}

$("#run-select").addEventListener("change", (e) => {
  const seg = (location.hash.replace(/^#\//, "").split("/")[0]) || "run";
  location.hash = `#/${seg === "traj" ? "trajs" : seg === "compare" ? "run" : seg}/${enc(e.target.value)}`;
});
window.addEventListener("hashchange", route);
loadRuns().then(route).then(() => setTimeout(poll, 3000));
