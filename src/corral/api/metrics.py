"""``GET /metrics``: the service in Prometheus' text format, for graphs and alerts.

Series (every name starts ``corral_``):

- ``jobs{state}``: jobs in each live state (pending, starting, running,
  suspended), now;
- ``jobs_finished_total{state}``: jobs that ended, by how (succeeded, failed,
  cancelled, timeout): counters, as they only grow;
- ``gpus_in_use{vc,user}``: GPUs held by running jobs, per virtual cluster and user;
- ``queue_jobs{vc,user}`` and ``queue_oldest_wait_seconds{vc,user}``: waiting
  jobs, and how long the oldest has waited, per virtual cluster and user;
- ``gpus{type,state}``: GPUs allocated, idle, drained, lost (on a node the
  executor lost) or failed, per type;
- ``node_state{node,state}``: 1 for each node's state (up, drained, down), 0 for
  the others;
- ``gpu_utilization_percent{node,gpu,type}`` and ``gpu_memory_used_bytes{...}``:
  each GPU's use as the driver last read it, and ``job_gpu_utilization_percent
  {job,user}`` and ``job_gpu_memory_bytes{job,user}``: each running job's (only
  where a GPU driver answers: NVIDIA's management library);
- ``pass_seconds{policy}``: a histogram of scheduling pass times;
- ``loop_last_step_timestamp_seconds``: when the loop last went round (it does
  every tick: alert on ``time() - corral_loop_last_step_timestamp_seconds``);
- ``preemptions_total``: preemptions of the jobs in the store;
- ``attempts_total{cause}``: attempts ended, by how (succeeded, failed,
  preempted, node_failure, ...);
- ``api_requests_total{route,method,status}``: API requests by route template
  (never by a job id: the series stay few), method and status code;
- ``job_wait_seconds``: a histogram of the time from a job's submission to its
  first start (the jobs started since the service did);
- ``jobs_set_aside``: jobs the loop set aside (an unusable record, a fault);
- ``disk_free_bytes{path}`` and ``launches_paused``: the state and jobs disks;
- ``build_info{version}``: 1, labelled with the running version; and Prometheus'
  own ``process_*`` series (CPU seconds, resident memory, open descriptors and
  their limit, start time).

The store's figures are read at each scrape (cheap grouped counts), so they
are right after a restart; the loop's and the API's are kept in memory. Every
state of ``jobs``, ``jobs_finished_total``, ``gpus`` (per type) and every cause
of ``attempts_total`` is there from the first scrape, at 0 while none (and
``queue_jobs``, ``queue_oldest_wait_seconds`` and ``gpus_in_use`` for every
configured user, with the VC ``default``): a series that first appears at 1
hides its first event from ``increase()``, and one with no sample while the
queue is empty cannot be graphed or alerted on.
Scraping needs a token, as every other read does: Prometheus sends it with
``authorization: {credentials_file: ...}`` in its scrape config.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from fastapi import APIRouter, Request, Response
from prometheus_client import CollectorRegistry, Counter, Gauge, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from corral.api.common import AUTH, Context, Ctx, User, gpus_held, service_version
from corral.model.status import JobStatus
from corral.runtime.execution.exits import Cause
from corral.runtime.loop.loop_metrics import gpu_states
from corral.runtime.storage.archive import archived_totals
from corral.runtime.storage.store import AttemptRow, JobRow, NodeRow

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

router = APIRouter()


class StoreCollector(Collector):
    """The store's and the loop's state, read at each scrape."""

    def __init__(self, context: Context) -> None:
        self.context = context

    def collect(self) -> Iterator[Metric]:
        store = self.context.store
        with store.session() as s:
            by_state = dict(
                s.execute(select(JobRow.status, func.count()).group_by(JobRow.status)).all()
            )
            vc = JobRow.spec["vc"].as_string()
            waiting = s.execute(
                select(vc, JobRow.user, func.count(), func.min(JobRow.submit_time))
                .where(JobRow.status == JobStatus.PENDING.value)
                .group_by(vc, JobRow.user)
            ).all()
            preemptions = s.scalar(select(func.coalesce(func.sum(JobRow.preemptions), 0)))
            ended = dict(
                s.execute(
                    select(AttemptRow.cause, func.count())
                    .where(AttemptRow.end_time.is_not(None))
                    .group_by(AttemptRow.cause)
                ).all()
            )
            running = s.execute(
                select(vc, JobRow.user, JobRow.gpus, JobRow.id).where(
                    JobRow.status.in_([JobStatus.STARTING.value, JobStatus.RUNNING.value])
                )
            ).all()
            nodes = s.execute(select(NodeRow.name, NodeRow.state)).all()
            gone = archived_totals(s)  # (archived jobs still count: counters never go down)
        for state, count in gone["jobs"].items():
            by_state[state] = by_state.get(state, 0) + count
        preemptions = (preemptions or 0) + gone["preemptions"].get("all", 0)
        for cause, count in gone["attempts"].items():
            key = None if cause == "None" else cause
            ended[key] = ended.get(key, 0) + count
        jobs = GaugeMetricFamily("corral_jobs", "Jobs in each live state", labels=["state"])
        finished = CounterMetricFamily(
            "corral_jobs_finished", "Jobs that ended, by how", labels=["state"]
        )
        for state in JobStatus:
            number = float(by_state.get(state.value, 0))
            (finished if state.terminal else jobs).add_metric([state.value], number)
        yield jobs
        yield finished
        in_use = GaugeMetricFamily(
            "corral_gpus_in_use",
            "GPUs held by running jobs, per virtual cluster and user",
            labels=["vc", "user"],
        )
        held = gpus_held((vc_name, user, gpus) for vc_name, user, gpus, _ in running)
        users = [u.name for u in self.context.config.users]
        for user in users:  # (every user's series from the first scrape, at 0 while none)
            held.setdefault(("default", user), 0)
        for (vc_name, user), count in sorted(held.items()):
            in_use.add_metric([vc_name, user], float(count))
        yield in_use
        queue = GaugeMetricFamily(
            "corral_queue_jobs", "Waiting jobs per virtual cluster and user", labels=["vc", "user"]
        )
        oldest = GaugeMetricFamily(
            "corral_queue_oldest_wait_seconds",
            "How long the oldest waiting job has waited, per virtual cluster and user",
            labels=["vc", "user"],
        )
        now = time.time()
        seen = set()
        for vc_name, user, count, first in waiting:
            labels = [vc_name or "default", user]
            seen.add(tuple(labels))
            queue.add_metric(labels, float(count))
            oldest.add_metric(labels, max(0.0, now - float(first)))
        for user in users:
            if ("default", user) not in seen:
                queue.add_metric(["default", user], 0.0)
                oldest.add_metric(["default", user], 0.0)
        yield queue
        yield oldest
        total = CounterMetricFamily("corral_preemptions", "Preemptions of every job")
        total.add_metric([], float(preemptions or 0))
        yield total
        causes = CounterMetricFamily(
            "corral_attempts", "Attempts ended, by how they ended", labels=["cause"]
        )
        for cause in Cause:  # every cause from the start: increase() sees the first one
            causes.add_metric([cause.value], float(ended.pop(cause.value, 0)))
        for other, count in ended.items():  # (a cause from a record older than this list)
            causes.add_metric([other or "unknown"], float(count))
        yield causes
        node_state = GaugeMetricFamily(
            "corral_node_state",
            "1 for each node's state (up; drained by an admin or a GPU fault; down: lost "
            "by the executor), 0 for the others",
            labels=["node", "state"],
        )
        for name, node_is in sorted(nodes):  # every state of every node, from the start
            for candidate in NODE_STATES:
                node_state.add_metric([name, candidate], float(node_is == candidate))
        yield node_state
        scheduler = self.context.scheduler
        if scheduler is not None:
            gpus = GaugeMetricFamily(
                "corral_gpus", "GPUs by type and state", labels=["type", "state"]
            )
            for (gpu_type, gpu_state), count in sorted(gpu_states(scheduler).items()):
                gpus.add_metric([gpu_type, gpu_state], float(count))
            yield gpus
            yield from _driver_readings(scheduler, {job: user for _, user, _, job in running})


NODE_STATES = ("up", "drained", "down")


def _driver_readings(scheduler: Any, owners: dict[int, str]) -> Iterator[Metric]:
    """What the GPU driver last measured (none where there is no driver): each GPU's
    utilisation and memory, and each running job's. Jobs are labelled by id, so the
    series are as many as running jobs, never more."""
    readings = scheduler.gpu_readings  # (swapped whole by the loop: one consistent copy)
    if not readings:
        return
    labels = ["node", "gpu", "type"]
    busy = GaugeMetricFamily(
        "corral_gpu_utilization_percent", "Share of time a kernel ran (the driver's)", labels=labels
    )
    memory = GaugeMetricFamily(
        "corral_gpu_memory_used_bytes", "GPU memory in use (the driver's)", labels=labels
    )
    for gpu, usage in sorted(readings.items()):
        slot = scheduler.slots[gpu]
        where = [slot.node, str(slot.device if slot.device is not None else gpu), slot.gpu_type]
        busy.add_metric(where, float(usage.utilization))
        memory.add_metric(where, float(usage.memory_used_gb) * 1e9)
    yield busy
    yield memory
    per_job = GaugeMetricFamily(
        "corral_job_gpu_utilization_percent",
        "A running job's GPUs' mean utilisation (the driver's)",
        labels=["job", "user"],
    )
    job_memory = GaugeMetricFamily(
        "corral_job_gpu_memory_bytes",
        "GPU memory a running job's processes hold (the driver's)",
        labels=["job", "user"],
    )
    for job, (utilization, held) in sorted(scheduler.job_usage.items()):
        user = owners.get(job)
        if user is None:
            continue  # (ended since the reading)
        per_job.add_metric([str(job), user], float(utilization))
        if held is not None:
            job_memory.add_metric([str(job), user], float(held) * 1e9)
    yield per_job
    yield job_memory


class ApiMetrics:
    """The API's own registry: the store collector and the request counter."""

    def __init__(self, context: Context) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(StoreCollector(context))
        ProcessCollector(registry=self.registry)  # process_cpu_seconds_total, ..._fds, ...
        info = Gauge(
            "corral_build_info", "1, labelled with the running version", ["version"],
            registry=self.registry,
        )  # fmt: skip
        info.labels(service_version()).set(1)
        self.requests = Counter(
            "corral_api_requests",
            "API requests by route template, method and status code",
            ["route", "method", "status"],
            registry=self.registry,
        )


class CountRequests:
    """ASGI middleware: count each request under its route's template, method and
    status. Plain ASGI: a function middleware's extra task and streams cost about a
    millisecond a request, a third of what an open dashboard's polls cost."""

    def __init__(self, app: ASGIApp, metrics: ApiMetrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500  # (what the client gets when the route raises)

        async def sending(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            template = getattr(scope.get("route"), "path", None) or "unmatched"
            self.metrics.requests.labels(template, scope["method"], str(status)).inc()


@router.get("/metrics", tags=["service"], responses=AUTH, response_class=Response)
def metrics(request: Request, ctx: Ctx, user: User) -> Response:
    """The service's series in Prometheus' text format (see the module's docstring)."""
    own: ApiMetrics = request.app.state.metrics
    body = generate_latest(own.registry)
    if ctx.scheduler is not None:
        body += generate_latest(ctx.scheduler.metrics.registry)
    return Response(body, media_type=CONTENT_TYPE)
