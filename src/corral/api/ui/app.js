// corral dashboard: plain JavaScript over the service's JSON API, polled once
// a second. The token lives in sessionStorage (this tab only), never in a URL.
"use strict";

const POLL_MS = 1000;
const UTIL_EVERY = 10;  // polls between two reads of the last hour's utilisation
const USAGE_EVERY = 5;  // polls between two reads of the usage counts (they change slowly)
// jobs a page of the queue shows (?page_size=N in the address changes it)
const PAGE_SIZE = Number(new URLSearchParams(location.search).get("page_size")) || 100;
const state = {
  me: null, jobs: [], history: new Map(), selected: null, polls: 0, timer: null,
  pages: [0],  // the cursor (``after``, or ``before`` for "all") of each page seen so far
  total: 0, next: null,
};

const $ = (id) => document.getElementById(id);
const token = () => sessionStorage.getItem("corral-token");

async function api(path, options = {}) {
  const key = token();
  // logged out while a refresh was under way: nothing more is sent (it would be a 401)
  if (!key) throw new Error("unauthorised");
  const headers = { Authorization: `Bearer ${key}`, ...(options.headers || {}) };
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
  cards.clear();  // an admin's controls are not left for the next user
  state.pages = [0];
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
  if (!token()) return;  // logged out during the first refresh: no polling starts
  clearInterval(state.timer);
  state.timer = setInterval(refresh, POLL_MS);
  const named = jobInAddress();
  if (named != null) await select(named, false);
}

// A job's own address, /jobs/ID: a link to share, and a reload keeps the view.
function jobInAddress() {
  const match = location.pathname.match(/^\/jobs\/(\d+)$/);
  return match ? Number(match[1]) : null;
}

// ---------------------------------------------------------------- refresh
async function refresh() {
  try {
    const filter = $("f-state").value;
    const counting = state.polls % USAGE_EVERY === 0;
    const [nodes, page, usage] = await Promise.all([
      json("/v1/nodes"),
      jobsPage(filter),
      counting ? json("/v1/usage") : null,
    ]);
    if (!token()) return;  // logged out meanwhile: nothing is drawn for the next user
    const jobs = page.jobs;
    state.jobs = jobs;
    if (usage) drawUsage(usage);
    drawPages(page);
    if (filter === "all") {
      const rows = await json("/v1/history?all_users=true&limit=1000");
      state.history = new Map(rows.map((r) => [r.id, r]));
    }
    drawNodes(nodes);
    drawJobs(jobs);
    if (state.polls++ % UTIL_EVERY === 0) {
      const use = await json("/v1/utilisation?window=3600&buckets=60");
      sparkline($("util-chart"), use.times.map((t, i) => [t, use.busy_gpus[i]]), 0, use.total_gpus,
        { x: clock, y: (v) => `${Math.round(v)} GPUs` });
    }
    if (state.selected != null) await drawJob(state.selected);
  } catch (error) {
    if (error.message !== "unauthorised") $("utilisation").textContent = `(${error.message})`;
  }
}

// One page of the queue: the live queue oldest first (its head), "all" the newest
// first; the service says how many jobs match in all and where the next page starts.
async function jobsPage(filter) {
  const all = filter === "all";
  const cursor = state.pages[state.pages.length - 1];
  const query = new URLSearchParams({ limit: String(PAGE_SIZE) });
  if (filter) query.set("state", filter);
  if (all) query.set("newest", "true");
  if (cursor) query.set(all ? "before" : "after", String(cursor));
  const answer = await api(`/v1/jobs?${query}`);
  if (!answer.ok) throw new Error(`HTTP ${answer.status}`);
  const next = answer.headers.get(all ? "X-Next-Before" : "X-Next-After");
  return { jobs: await answer.json(), total: Number(answer.headers.get("X-Total-Count") || 0), next };
}

function drawPages(page) {
  state.total = page.total;
  state.next = page.next;
  const first = (state.pages.length - 1) * PAGE_SIZE;
  const shown = page.jobs.length;
  $("page-info").textContent = shown
    ? `jobs ${(first + 1).toLocaleString()}–${(first + shown).toLocaleString()} of ${page.total.toLocaleString()}`
    : `no jobs of ${page.total.toLocaleString()} on this page`;
  $("page-prev").hidden = state.pages.length === 1;
  $("page-next").hidden = page.next == null;
}

function turnPage(forward) {
  if (forward && state.next != null) state.pages.push(Number(state.next));
  else if (!forward && state.pages.length > 1) state.pages.pop();
  refresh();
}

// Who uses the cluster now, over every live job (the service counts them all).
function drawUsage(usage) {
  const states = Object.entries(usage.by_state).filter(([, n]) => n)
    .map(([s, n]) => `${n.toLocaleString()} ${s.toLowerCase()}`);
  const reasons = Object.entries(usage.by_reason).filter(([r]) => r)
    .map(([r, n]) => `${n.toLocaleString()} ${r}`);
  $("counts").textContent = (states.length ? states.join(", ") : "no live jobs")
    + (reasons.length ? `; waiting for: ${reasons.join(", ")}` : "");
  const rows = (list, key) => list.map((r) => el("tr", {},
    el("td", {}, r[key]), el("td", {}, r.running), el("td", {}, r.waiting), el("td", {}, r.gpus)));
  $("by-user").tBodies[0].replaceChildren(...rows(usage.by_user, "user"));
  $("by-vc").tBodies[0].replaceChildren(...rows(usage.by_vc, "vc"));
}

// Node cards are made once and updated in place at each poll, so a reason being
// typed or an opened history survives the refresh.
const cards = new Map();

function drawNodes(nodes) {
  const total = nodes.reduce((n, node) => n + node.gpus, 0);
  const busy = nodes.reduce((n, node) => n + node.gpu_jobs.filter((j) => j.length).length, 0);
  $("utilisation").textContent = `${busy} of ${total} GPUs in use now; over the last hour:`;
  const box = $("nodes");
  const shown = nodes.map((node) => {
    const card = cards.get(node.name) ?? nodeCard(node);
    cards.set(node.name, card);
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
    const label = node.state === "up" ? "" : ` (${node.state}${node.reason ? `: ${node.reason}` : ""})`;
    card.className = `node ${node.state}`;
    card.querySelector("h3").textContent = `${node.name} · ${node.gpus} ${node.gpu_type}${label}`;
    card.querySelector(".gpus").replaceChildren(...cells);
    const details = card.querySelector("details");
    if (details.open && state.polls % UTIL_EVERY === 0) nodeHistory(node.name, details);
    return card;
  });
  if (shown.some((card, k) => box.children[k] !== card) || box.children.length !== shown.length) {
    box.replaceChildren(...shown);
  }
}

function nodeCard(node) {
  const details = el("details", {}, el("summary", {}, "history"), el("ol", { class: "events" }));
  details.addEventListener("toggle", () => details.open && nodeHistory(node.name, details));
  const parts = [el("h3", {}), el("div", { class: "gpus" }), details];
  if (state.me?.admin) {
    const id = `reason-${node.name}`;
    const reason = el("input", { id, type: "text", placeholder: "why (kept in its history)" });
    const act = (verb) => async () => {
      try {
        await json(`/v1/nodes/${encodeURIComponent(node.name)}/${verb}`, {
          method: "POST",
          headers: { "Content-Type": "application/json" },
          body: JSON.stringify({ reason: reason.value.trim() || null }),
        });
        reason.value = "";
      } catch (error) {
        alert(`${verb} node ${node.name}: ${error.message}`);
      }
      await refresh();
      if (details.open) await nodeHistory(node.name, details);
    };
    parts.push(
      el("div", { class: "actions" },
        el("label", { for: id }, `reason for ${node.name}`),
        reason,
        el("button", { type: "button", "aria-label": `drain node ${node.name}`, onclick: act("drain") }, "drain"),
        el("button", { type: "button", "aria-label": `resume node ${node.name}`, onclick: act("resume") }, "resume"),
      ),
    );
  }
  return el("div", { class: "node", "data-node": node.name }, ...parts);
}

async function nodeHistory(name, details) {
  const events = await json(`/v1/nodes/${encodeURIComponent(name)}/history`);
  const said = (e) => {
    const d = e.detail ?? {};
    const who = d.by ? ` by ${d.by}` : "";
    const why = d.reason ? `: ${d.reason}` : d.failures ? `: ${d.failures} failures` : "";
    const gpu = d.gpu != null ? ` (GPU ${d.gpu})` : "";
    return `${new Date(e.time * 1000).toLocaleString()} ${e.kind.replace("node_", "")}${gpu}${who}${why}`;
  };
  details.querySelector("ol").replaceChildren(
    ...(events.length ? events.map((e) => el("li", {}, said(e))) : [el("li", {}, "no changes yet")]),
  );
}

function drawJobs(jobs) {
  const user = $("f-user").value.trim(), vc = $("f-vc").value.trim();
  const now = Date.now() / 1000;
  const shown = jobs.filter((j) => (!user || j.user === user) && (!vc || (j.vc || "") === vc));
  const history = $("f-state").value === "all";
  for (const th of document.querySelectorAll("#jobs th.hist")) th.hidden = !history;
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
        el("td", {}, progress(job)),
        el("td", {}, job.remaining ? hours(job.remaining.seconds) : "-"),
        el("td", {}, job.remaining && job.status === "RUNNING" ? clock(now + job.remaining.seconds) : "-"),
        ...(history ? past(state.history.get(job.id)) : []),
        el("td", {}, el("div", { class: "actions" }, ...actions(job))),
      );
    }),
  );
  if (label) {
    const again = [...body.querySelectorAll("button[aria-label]")].find((b) => b.getAttribute("aria-label") === label);
    again?.focus();
  }
}

// Steps done of the job's total (or the steps alone when it gave none).
function progress(job) {
  if (!job.steps) return "-";
  const done = Math.round(job.steps);
  if (!job.total_steps) return `${done} steps`;
  return `${done} of ${job.total_steps} (${Math.min(100, Math.floor((100 * job.steps) / job.total_steps))}%)`;
}

// The history columns of the "all" view: when it ended, how long it ran, its GPU-hours.
function past(row) {
  if (!row) return [el("td", {}, "-"), el("td", {}, "-"), el("td", {}, "-")];
  return [
    el("td", {}, row.end_time ? new Date(row.end_time * 1000).toLocaleString() : "-"),
    el("td", {}, hours(row.elapsed)),
    el("td", {}, row.gpu_hours.toFixed(2)),
  ];
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
// A job's page is a view of its own: the cluster, usage and queue are hidden meanwhile.
function showJobView(shown) {
  $("job").hidden = !shown;
  for (const part of ["cluster", "usage", "queue"]) $(part).hidden = shown;
}

async function select(id, remember = true) {
  state.selected = id;
  showJobView(true);
  if (remember && location.pathname !== `/jobs/${id}`) history.pushState({ job: id }, "", `/jobs/${id}`);
  $("job-link").href = `/jobs/${id}`;
  await drawJob(id);
  $("job-title").focus?.();
}

function unselect(remember = true) {
  state.selected = null;
  showJobView(false);
  if (remember && location.pathname !== "/") history.pushState({}, "", "/");
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
  sparkline($("steps-chart"), steps, 0, null, { x: hours, y: (v) => `${Math.round(v)} steps` });
  const done = steps.length ? Math.round(steps[steps.length - 1][1]) : "-";
  $("steps-caption").textContent = `steps: ${done} after ${span(steps)}`;
  sparkline($("throughput-chart"), rate, 0, null, { x: hours, y: (v) => `${Number(v).toPrecision(3)} steps/s` });
  $("throughput-caption").textContent = `throughput: ${last(rate, 3)} steps/s now`;
  sparkline($("loss-chart"), loss, null, null, { x: (v) => `step ${Math.round(v)}`, y: (v) => Number(v).toPrecision(3) });
  $("loss-caption").textContent = `loss: ${last(loss, 4)} at step ${loss.length ? Math.round(loss[loss.length - 1][0]) : "-"}`;
}

// A line chart of [x, y] points in an SVG's viewBox, with its axes labelled:
// the y axis' lowest and highest values and the x axis' first and last, each
// with its unit (labels.x and labels.y format them).
function sparkline(svg, points, yMin = null, yMax = null, labels = null) {
  const [w, h] = svg.getAttribute("viewBox").split(" ").slice(2).map(Number);
  if (points.length < 2) {
    svg.replaceChildren();
    return;
  }
  const fx = labels?.x ?? String, fy = labels?.y ?? String;
  const left = 62, bottom = 12, top = 6;
  const xs = points.map((p) => p[0]), ys = points.map((p) => p[1]);
  const x0 = Math.min(...xs), x1 = Math.max(...xs);
  const y0 = yMin ?? Math.min(...ys), y1 = yMax ?? Math.max(...ys);
  const sx = (x) => left + ((x - x0) / (x1 - x0 || 1)) * (w - left - 4);
  const sy = (y) => h - bottom - ((y - y0) / (y1 - y0 || 1)) * (h - bottom - top);
  const ns = "http://www.w3.org/2000/svg";
  const make = (tag, attrs, text) => {
    const node = document.createElementNS(ns, tag);
    for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, v);
    if (text != null) node.textContent = text;
    return node;
  };
  const axes = make("path", {
    d: `M${left},${top} V${h - bottom} H${w - 2}`, fill: "none", stroke: "#888", "stroke-width": "0.6",
  });
  const line = make("polyline", {
    points: points.map(([x, y]) => `${sx(x).toFixed(1)},${sy(y).toFixed(1)}`).join(" "),
    fill: "none", stroke: "#1a5fb4", "stroke-width": "1.5",
  });
  const text = { "font-size": "8", fill: "#333" };
  svg.replaceChildren(
    axes,
    line,
    make("text", { ...text, class: "axis y-max", x: left - 3, y: top + 6, "text-anchor": "end" }, fy(y1)),
    make("text", { ...text, class: "axis y-min", x: left - 3, y: h - bottom, "text-anchor": "end" }, fy(y0)),
    make("text", { ...text, class: "axis x-min", x: left, y: h - 2, "text-anchor": "start" }, fx(x0)),
    make("text", { ...text, class: "axis x-max", x: w - 2, y: h - 2, "text-anchor": "end" }, fx(x1)),
  );
}

// ---------------------------------------------------------------- wiring
document.addEventListener("DOMContentLoaded", () => {
  $("login-form").addEventListener("submit", login);
  $("logout").addEventListener("click", () => logout());
  for (const id of ["f-user", "f-vc"]) $(id).addEventListener("input", () => drawJobs(state.jobs));
  $("f-state").addEventListener("change", () => { state.pages = [0]; refresh(); });
  $("page-next").addEventListener("click", () => turnPage(true));
  $("page-prev").addEventListener("click", () => turnPage(false));
  $("filters").addEventListener("submit", (e) => e.preventDefault());
  $("job-close").addEventListener("click", () => unselect());
  // a tab out of sight polls nothing (each open tab costs the service a share of a
  // core); shown again, it refreshes at once and polls again
  document.addEventListener("visibilitychange", () => {
    if (!token() || !state.me) return;
    clearInterval(state.timer);
    if (document.visibilityState === "visible") {
      state.timer = setInterval(refresh, POLL_MS);
      refresh();
    }
  });
  window.addEventListener("popstate", () => {
    const named = jobInAddress();
    if (named != null) select(named, false);
    else unselect(false);
  });
  start();
});
