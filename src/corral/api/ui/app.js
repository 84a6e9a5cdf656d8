// corral dashboard: plain JavaScript over the service's JSON API, polled once
// a second. The token lives in sessionStorage (this tab only), never in a URL.
"use strict";

const POLL_MS = 1000;
const UTIL_EVERY = 10;  // polls between two reads of the last hour's utilisation
const state = { me: null, jobs: [], selected: null, polls: 0, timer: null };

const $ = (id) => document.getElementById(id);
const token = () => sessionStorage.getItem("corral-token");

async function api(path, options = {}) {
  const headers = { Authorization: `Bearer ${token()}`, ...(options.headers || {}) };
  const answer = await fetch(path, { ...options, headers });
  if (answer.status === 401) {
    logout("your token was refused; log in again");
    throw new Error("unauthorised");
  }
  return answer;
}

async function json(path, options) {
  const answer = await api(path, options);
  if (!answer.ok) {
    const body = await answer.json().catch(() => ({}));
    throw new Error(typeof body.detail === "string" ? body.detail : `HTTP ${answer.status}`);
  }
  return answer.json();
}

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else node.setAttribute(key, value);
  }
  for (const child of children) {
    node.append(child instanceof Node ? child : document.createTextNode(String(child ?? "")));
  }
  return node;
}

function hours(seconds) {
  if (seconds == null) return "-";
  const s = Math.max(0, Math.round(seconds));
  const h = Math.floor(s / 3600), m = Math.floor((s % 3600) / 60), r = s % 60;
  return h ? `${h}h${String(m).padStart(2, "0")}m` : m ? `${m}m${String(r).padStart(2, "0")}s` : `${r}s`;
}

function clock(t) {
  return t ? new Date(t * 1000).toLocaleTimeString() : "-";
}

// A colour per job id, light enough for dark text on it.
function jobColour(id) {
  return `hsl(${(id * 137.508) % 360}, 70%, 82%)`;
}

function mayAct(job) {
  return state.me && (state.me.admin || state.me.user === job.user);
}

// ---------------------------------------------------------------- login
async function login(event) {
  event.preventDefault();
  sessionStorage.setItem("corral-token", $("token").value.trim());
  $("token").value = "";
  await start();
}

function logout(message = "") {
  sessionStorage.removeItem("corral-token");
  clearInterval(state.timer);
  state.me = null;
  $("app").hidden = true;
  $("logout").hidden = true;
  $("login").hidden = false;
  $("who").textContent = "";
  $("login-error").textContent = message;
}

async function start() {
  if (!token()) return logout();
  try {
    state.me = await json("/v1/whoami");
  } catch (error) {
    if (error.message !== "unauthorised") logout(`cannot reach the service: ${error.message}`);
    return;
  }
  $("login").hidden = true;
  $("app").hidden = false;
  $("logout").hidden = false;
  $("who").textContent = `${state.me.user}${state.me.admin ? " (admin)" : ""}`;
  await refresh();
  clearInterval(state.timer);
  state.timer = setInterval(refresh, POLL_MS);
}

// ---------------------------------------------------------------- refresh
async function refresh() {
  try {
    const filter = $("f-state").value;
    const [nodes, jobs] = await Promise.all([
      json("/v1/nodes"),
      // the live queue oldest first (its head); "all" the newest first
      json(`/v1/jobs${filter ? `?state=${encodeURIComponent(filter)}${filter === "all" ? "&newest=true" : ""}` : ""}`),
    ]);
    state.jobs = jobs;
    drawNodes(nodes);
    drawJobs(jobs);
    if (state.polls++ % UTIL_EVERY === 0) {
      const use = await json("/v1/utilisation?window=3600&buckets=60");
      sparkline($("util-chart"), use.times.map((t, i) => [t, use.busy_gpus[i]]), 0, use.total_gpus);
    }
    if (state.selected != null) await drawJob(state.selected);
  } catch (error) {
    if (error.message !== "unauthorised") $("utilisation").textContent = `(${error.message})`;
  }
}

function drawNodes(nodes) {
  const total = nodes.reduce((n, node) => n + node.gpus, 0);
  const busy = nodes.reduce((n, node) => n + node.gpu_jobs.filter((j) => j.length).length, 0);
  $("utilisation").textContent = `${busy} of ${total} GPUs in use now; over the last hour:`;
  const box = $("nodes");
  box.replaceChildren(
    ...nodes.map((node) => {
      const cells = node.gpu_ids.map((gpu, k) => {
        const jobs = node.gpu_jobs[k];
        const title = jobs.length ? `GPU ${gpu}: job ${jobs.join(" and ")}` : `GPU ${gpu}: free`;
        const cell = el(
          "span",
          { class: jobs.length ? "gpu busy" : "gpu", title },
          jobs.length ? jobs.map((j) => `#${j}`).join("+") : gpu,
        );
        if (jobs.length === 1) cell.style.background = jobColour(jobs[0]);
        if (jobs.length > 1) {  // shared: both jobs' colours, half and half
          cell.style.background = `linear-gradient(90deg, ${jobColour(jobs[0])} 50%, ${jobColour(jobs[1])} 50%)`;
        }
        return cell;
      });
      const label = node.state === "up" ? "" : ` (${node.state})`;
      return el(
        "div",
        { class: `node ${node.state}` },
        el("h3", {}, `${node.name} · ${node.gpus} ${node.gpu_type}${label}`),
        el("div", { class: "gpus" }, ...cells),
      );
    }),
  );
}

function drawJobs(jobs) {
  const user = $("f-user").value.trim(), vc = $("f-vc").value.trim();
  const now = Date.now() / 1000;
  const shown = jobs.filter((j) => (!user || j.user === user) && (!vc || (j.vc || "") === vc));
  // the rows are redrawn at every poll: a keyboard user's focus on a row's
  // button moves to the same button in the new rows instead of being lost
  const body = $("jobs").tBodies[0];
  const active = document.activeElement;
  const label = active && body.contains(active) ? active.getAttribute("aria-label") : null;
  body.replaceChildren(
    ...shown.map((job) => {
      const open = el("button", { type: "button", class: "link", "aria-label": `show job ${job.id}`, onclick: () => select(job.id) }, job.id);
      const waited = job.first_start ? job.first_start - job.submit_time : now - job.submit_time;
      return el(
        "tr",
        { "data-job": job.id },
        el("td", {}, open),
        el("td", {}, job.name),
        el("td", {}, job.user),
        el("td", {}, el("span", { class: `state state-${job.status}` }, job.status)),
        el("td", {}, job.position ?? "-"),
        el("td", {}, job.reason ?? ""),
        el("td", {}, job.assigned_gpus ? `${job.gpus} on ${job.assigned_gpus.join(",")}` : job.gpus),
        el("td", {}, job.gpu_type ?? "any"),
        el("td", {}, job.vc ?? ""),
        el("td", {}, hours(waited)),
        el("td", {}, el("div", { class: "actions" }, ...actions(job))),
      );
    }),
  );
  if (label) {
    const again = [...body.querySelectorAll("button[aria-label]")].find((b) => b.getAttribute("aria-label") === label);
    again?.focus();
  }
}

function actions(job) {
  if (!mayAct(job)) return [];
  const verbs = [];
  if (["PENDING", "RUNNING", "STARTING", "SUSPENDED"].includes(job.status)) verbs.push("cancel");
  if (["PENDING", "RUNNING", "STARTING"].includes(job.status)) verbs.push("suspend");
  if (job.status === "SUSPENDED") verbs.push("resume");
  return verbs.map((verb) =>
    el("button", { type: "button", "data-action": verb, "aria-label": `${verb} job ${job.id}`, onclick: () => act(job.id, verb) }, verb),
  );
}

async function act(id, verb) {
  try {
    await json(`/v1/jobs/${id}/${verb}`, { method: "POST" });
  } catch (error) {
    alert(`${verb} job ${id}: ${error.message}`);
  }
  await refresh();
}

async function setPriority(id) {
  const value = Number($("priority").value);
  try {
    await json(`/v1/jobs/${id}/priority`, {
      method: "PUT",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ priority: value }),
    });
  } catch (error) {
    alert(`priority of job ${id}: ${error.message}`);
  }
  await refresh();
}

// ---------------------------------------------------------------- one job
async function select(id) {
  state.selected = id;
  $("job").hidden = false;
  await drawJob(id);
  $("job-title").focus?.();
}

async function drawJob(id) {
  const job = await json(`/v1/jobs/${id}`);
  $("job-title").textContent = `Job ${job.id}: ${job.name}`;
  const facts = [
    ["state", el("span", { class: `state state-${job.status}` }, job.status)],
    ["user", job.user],
    ["reason", job.reason ?? ""],
    ["GPUs", `${job.gpus} ${job.gpu_type ?? "any type"}${job.assigned_gpus ? ` on ${job.assigned_gpus.join(",")}` : ""}`],
    ["steps", `${Math.round(job.steps)}${job.total_steps ? ` of ${job.total_steps}` : ""}`],
    ["throughput", job.throughput ? `${job.throughput.toFixed(2)} steps/s` : "-"],
    ["loss", job.loss == null ? "-" : Number(job.loss).toPrecision(4)],
    ["GPU use", job.gpu_utilization == null ? "-" : `${Math.round(job.gpu_utilization)}% busy${job.gpu_memory_gb == null ? "" : `, ${job.gpu_memory_gb.toFixed(1)} GB`}`],
    ["work left", job.remaining ? `${hours(job.remaining.seconds)} (${job.remaining.source})` : "-"],
    ...Object.entries(job.policy_view ?? {}).map(([k, v]) => [`${k} (policy)`, v]),
    ["submitted", clock(job.submit_time)],
    ["retries", `${job.failures} of ${job.max_retries}; ${job.preemptions} preemptions`],
  ];
  $("job-facts").replaceChildren(...facts.flatMap(([k, v]) => [el("dt", {}, k), el("dd", {}, v)]));
  const buttons = actions(job);
  if (mayAct(job) && ["PENDING", "RUNNING", "STARTING", "SUSPENDED"].includes(job.status)) {
    buttons.push(
      el("label", { for: "priority" }, "priority"),
      el("input", { id: "priority", type: "number", value: job.priority, style: "width:5rem" }),
      el("button", { type: "button", onclick: () => setPriority(job.id) }, "set"),
    );
  }
  const focused = document.activeElement && document.activeElement.id === "priority";
  if (!focused) $("job-actions").replaceChildren(...buttons);
  drawProgress(job);
  $("attempts").tBodies[0].replaceChildren(
    ...job.attempts.map((a) =>
      el("tr", {}, el("td", {}, a.number), el("td", {}, a.gpus.join(",")), el("td", {}, clock(a.start_time)),
        el("td", {}, clock(a.end_time)), el("td", {}, a.cause ?? "running"), el("td", {}, a.detail ?? "")),
    ),
  );
  $("events").replaceChildren(
    ...job.events.slice(-50).map((e) => el("li", {}, `${clock(e.time)} ${e.kind} ${JSON.stringify(e.detail)}`)),
  );
  $("spec").textContent = JSON.stringify(job.spec, null, 2);
  if (mayAct(job)) {
    const answer = await api(`/v1/jobs/${id}/logs`);
    const text = answer.ok ? await answer.text() : "";
    $("log-attempt").textContent = `(attempt ${answer.headers.get("X-Attempt") ?? "-"})`;
    const log = $("log");
    const atEnd = log.scrollTop + log.clientHeight >= log.scrollHeight - 4;
    log.textContent = text.slice(-16384);
    if (atEnd) log.scrollTop = log.scrollHeight;
  } else {
    $("log").textContent = "(only the job's owner and admins read its log)";
  }
}

// Steps and throughput over time, loss over steps: the heartbeats' history.
function drawProgress(job) {
  const p = job.progress ?? { times: [], steps: [], throughput: [], loss: [] };
  const pairs = (xs, ys) => xs.map((x, i) => [x, ys[i]]).filter(([, y]) => y != null);
  const t0 = p.times[0] ?? 0;
  const steps = pairs(p.times.map((t) => t - t0), p.steps);
  const rate = pairs(p.times.map((t) => t - t0), p.throughput);
  const curve = job.loss_curve;
  const loss = curve ? curve.steps.map((s, i) => [s, curve.losses[i]]) : pairs(p.steps, p.loss);
  const span = (pts) => (pts.length ? hours(pts[pts.length - 1][0]) : "-");
  const last = (pts, digits) => (pts.length ? Number(pts[pts.length - 1][1]).toPrecision(digits) : "-");
  sparkline($("steps-chart"), steps, 0);
  const done = steps.length ? Math.round(steps[steps.length - 1][1]) : "-";
  $("steps-caption").textContent = `steps: ${done} after ${span(steps)}`;
  sparkline($("throughput-chart"), rate, 0);
  $("throughput-caption").textContent = `throughput: ${last(rate, 3)} steps/s now`;
  sparkline($("loss-chart"), loss);
  $("loss-caption").textContent = `loss: ${last(loss, 4)} at step ${loss.length ? Math.round(loss[loss.length - 1][0]) : "-"}`;
}

// A line chart of [x, y] points in an SVG's viewBox.
function sparkline(svg, points, yMin = null, yMax = null) {
  const [w, h] = svg.getAttribute("viewBox").split(" ").slice(2).map(Number);
  if (points.length < 2) {
    svg.replaceChildren();
    return;
  }
  const xs = points.map((p) => p[0]), ys = points.map((p) => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs);
  const y0 = yMin ?? Math.min(...ys), y1 = yMax ?? Math.max(...ys);
  const sx = (x) => ((x - x0) / (x1 - x0 || 1)) * (w - 4) + 2;
  const sy = (y) => h - 2 - ((y - y0) / (y1 - y0 || 1)) * (h - 4);
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", points.map(([x, y]) => `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join(" "));
  line.setAttribute("fill", "none");
  line.setAttribute("stroke", "#1a5fb4");
  line.setAttribute("stroke-width", "1.5");
  svg.replaceChildren(line);
}

// ---------------------------------------------------------------- wiring
document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", login);
  $("logout").addEventListener("click", () => logout());
  for (const id of ["f-user", "f-vc"]) $(id).addEventListener("input", () => drawJobs(state.jobs));
  $("f-state").addEventListener("change", refresh);
  $("filters").addEventListener("submit", (e) => e.preventDefault());
  start();
});
