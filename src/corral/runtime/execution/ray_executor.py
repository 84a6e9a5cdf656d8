"""The Ray executor: jobs' processes on the nodes of a Ray cluster.

``executor: ray`` in the service's config. The policy still decides which
GPUs a job gets; this executor carries the decision out on Ray:

- **Inventory.** With ``ray.address`` the nodes are the Ray cluster's nodes
  that have GPUs, each with its ``GPU`` count and its ``accelerator_type:*``
  resource as the type (``GPU`` when it names none). Without an address the
  service starts a Ray instance on 127.0.0.1 (``ray start --head``, so it
  outlives a crash of the service) whose resources are the configured
  ``gpus``, and the nodes are the configured ones. The order of nodes is kept
  in the state directory, so GPU ids stay put across restarts and a node
  that joins is added at the end.
- **Launch.** A gang is split by node; each node's share is a *rank*: a
  detached, named actor pinned to that node (node affinity, hard) runs the
  rank's processes through the same launcher as the local executor, with the
  same environment plus the rank's place in the gang (``CORRAL_RANK``,
  ``CORRAL_WORLD_SIZE`` = nodes, ``CORRAL_MASTER_ADDR``/``PORT`` on rank 0's
  node, ``CUDA_VISIBLE_DEVICES`` of its node), so a ``torchrun``-style
  multi-node job starts with ``--nnodes $CORRAL_WORLD_SIZE --node-rank
  $CORRAL_RANK``.
- **Ends.** An attempt ends when every rank ended cleanly, or when one failed
  (the others are killed; that rank's exit is the attempt's). Each rank's
  output is copied into the attempt's log as it comes (ranks after the first
  prefixed ``[rank k]``).
- **Nodes.** A node that leaves Ray makes its ranks' attempts end as lost
  (``node_failure``: retried elsewhere) and its GPUs unavailable until it
  comes back; a node that joins adds its GPUs.
- **Crashes.** Ranks are detached actors named after the attempt, so after a
  ``kill -9`` of the service a restart finds them by name and adopts them.

Jobs' folders (``jobs_dir``) must be a path every node can reach, as their
checkpoints are.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from corral.errors import CorralError
from corral.ray_support import import_ray
from corral.runtime.execution.executor import (
    EXIT_FILE,
    Executor,
    ExitRecord,
    GpuSlot,
    LaunchRequest,
    ProcessRef,
    confinement,
    discover_nvidia,
    free_port,
    job_environment,
    read_exit_record,
    virtual_slots,
)
from corral.runtime.execution.launcher import write_atomic
from corral.runtime.execution.ray_rank import RankProcess
from corral.runtime.jobspec.config import ServiceConfig

REF_PREFIX = "ray:"
REF_FILE = "ray-ref"
OFFSETS_FILE = "ray-offsets.json"
NODES_FILE = "ray-nodes.json"
HEAD_FILE = "ray-head.json"
STATUS_EVERY = 0.25
"""Least seconds between two status calls to one attempt's ranks."""
CALL_TIMEOUT = 30.0
START_TIMEOUT = 300.0
"""Seconds Ray may take to start an attempt's actors and their ranks (a new worker
process each: seconds on an idle machine, over a minute on a loaded one) before
the attempt is lost."""
PROBE_PATIENCE = 60.0
"""Seconds a suspect node's probe may stay unanswered before it is sent again (a
task whose worker never started would otherwise keep the node out for ever)."""
CONNECT_TRIES = 10
"""Tries to join the service's own new Ray instance before giving up."""
STATE_TIMEOUT = 5.0
"""Seconds a call for Ray's node table may take (milliseconds when its head is up)
before its head is taken as lost."""


@dataclass
class RayNode:
    """A node of the inventory: its name for people and the Ray node it is."""

    name: str
    node_id: str
    gpu_type: str
    gpus: int
    devices: list[str] | None = None
    """Device indices of its GPUs (None: virtual GPUs, no device behind them)."""
    host: str = ""
    """The machine Ray says it runs on: a node that comes back under a new Ray id
    (its raylet restarted) is known by it ("": recorded before hosts were)."""


@dataclass
class _Attempt:
    token: str
    ranks: list[Any]
    """Actor handles, rank order (None where the actor is gone)."""
    nodes: list[str]
    offsets: list[int]
    folder: Path
    log: Path
    checked: float = 0.0
    starting: list[Any] | None = None
    """The ranks' start calls while Ray starts their actors (None once all answered)."""
    launched: float = 0.0


def parse_ref(ref: ProcessRef) -> tuple[str, int] | None:
    """``(token, ranks)`` of a Ray attempt's reference, None for anything else."""
    if not ref.pid_start.startswith(REF_PREFIX):
        return None
    token, _, count = ref.pid_start[len(REF_PREFIX) :].partition(":")
    return (token, int(count)) if count.isdigit() else None


class RayExecutor(Executor):
    runs_without_gpus = False  # a launch's ranks are the nodes of its GPUs

    def __init__(self, config: ServiceConfig) -> None:
        self.config = config
        self.settings = config.ray
        self.ray = import_ray(
            self.settings.address, "executor: ray", started_head=not self.settings.address
        )
        self.namespace = self.settings.namespace
        self.state_dir = config.state_dir
        self._head_group: int | None = None
        self._attempts: dict[str, _Attempt] = {}
        self._gone: set[str] = set()
        self._suspect: dict[str, Any] = {}
        """Nodes Ray still lists alive on which a rank was just lost -> the probe
        (a pinned task) that must come back before they are used again (None:
        not sent yet); a retry must not go where its last attempt died."""
        self._probed_at: dict[str, float] = {}
        self._checked = 0.0
        self._rank_class: Any = None
        self._probe_task: Any = None
        self._lost_since: float | None = None
        self._head_checked = 0.0
        self._head_was_away = False
        self._left = False
        """Whether this process left Ray while its cluster was away (it joins again
        when the head answers)."""
        self._reason: dict[str, str] = {}
        self.restarts = 0
        """Times the service's own Ray instance died and was started again."""
        if self.settings.address:
            self._connect(self.settings.address)
            self.nodes = self._cluster_inventory()
        else:
            self._local_head()
            self.nodes = self._local_inventory()
        self._gone = self._unalive()

    # ------------------------------------------------------------ Ray itself
    def _connect(self, address: str, own: bool = False) -> None:
        try:
            self.ray.init(
                address=address,
                namespace=self.namespace,
                log_to_driver=False,
                logging_level="ERROR",
            )
        except (ConnectionError, RuntimeError, ValueError) as exc:
            what = "the service's own Ray instance" if own else "ray.address: the Ray cluster"
            raise CorralError(f"{what} at {address} cannot be reached: {exc}") from None

    def _local_head(self) -> None:
        """Reach this service's own Ray instance, starting it if it is not running."""
        record = self.state_dir / HEAD_FILE
        head: dict[str, Any] = {}
        with contextlib.suppress(OSError, ValueError):
            head = json.loads(record.read_text())
        if head:
            head_group = int(head.get("group", 0))
            if head_group and head_alive(head_group) and _reachable(head.get("address", "")):
                try:
                    self._connect(head["address"], own=True)
                    self._head_group = head_group
                    return
                except CorralError as exc:  # whole, yet not joinable: replaced as stale
                    print(f"ray: replacing the service's own Ray instance: {exc}", file=sys.stderr)
            # our own head, left half-dead (its raylet or GCS gone) by a crash: end it
            # rather than wait on it, or mistake it for a configured cluster
            if head_group:
                stop_group(head_group, 5)
            forget_cluster_file(head.get("address", ""))
            with contextlib.suppress(OSError):
                record.unlink()
        groups = self.config.gpus
        if groups == "auto":
            slots = discover_nvidia()
            if not slots:
                raise CorralError("gpus: auto found no NVIDIA GPU for the local Ray instance")
            types: dict[str, int] = {}
            for slot in slots:
                types[slot.gpu_type] = types.get(slot.gpu_type, 0) + 1
        else:
            assert isinstance(groups, list)
            types = {}
            for group in groups:
                types[group.type] = types.get(group.type, 0) + group.count
        port = free_port()
        ray_cli = str(Path(sys.executable).parent / "ray")
        resources = {f"accelerator_type:{t}": n for t, n in types.items()}
        argv = [
            ray_cli,
            "start",
            "--head",
            "--node-ip-address=127.0.0.1",
            f"--port={port}",
            f"--num-cpus={os.cpu_count() or 1}",
            f"--num-gpus={sum(types.values())}",
            f"--resources={json.dumps(resources)}",
            "--include-dashboard=false",
            "--disable-usage-stats",
        ]
        log = self.state_dir / "ray-head.log"
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                argv, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
            code = proc.wait(120)
        if code != 0:
            raise CorralError(f"could not start a local Ray instance (exit {code}); see {log}")
        address = f"127.0.0.1:{port}"
        self._head_group = proc.pid
        write_atomic(record, json.dumps({"address": address, "group": proc.pid}))
        for attempt in range(CONNECT_TRIES):  # a driver that saw its old raylet die may
            try:  # need a moment before it can join a new instance
                self._connect(address, own=True)
                break
            except CorralError:
                if attempt == CONNECT_TRIES - 1:
                    raise
                with contextlib.suppress(Exception):
                    self.ray.shutdown()
                time.sleep(2.0)
        with contextlib.suppress(OSError):  # Ray's own logs, reachable from the state dir
            link = self.state_dir / "ray-logs"
            link.unlink(missing_ok=True)
            link.symlink_to(ray_session_logs())

    def _alive_nodes(self) -> list[dict[str, Any]]:
        """Ray's live nodes, as ``ray.nodes()`` lists them; TimeoutError when its head
        does not answer in :data:`STATE_TIMEOUT`. Asked through the driver's GCS
        client, whose calls take a timeout: ``ray.nodes()`` has none, and one in
        flight when the head dies waits out Ray's reconnect (60 s), holding the
        loop; nor can it be left to a thread, since its late answer after
        ``ray.shutdown()`` ends the process. (A Ray without that client: its
        ``ray.nodes()``.)"""
        worker = getattr(getattr(getattr(self.ray, "_private", None), "worker", None),
                         "global_worker", None)  # fmt: skip
        client = getattr(worker, "gcs_client", None)
        if client is None or not hasattr(client, "get_all_node_info"):
            return [n for n in self.ray.nodes() if n.get("Alive")]
        try:
            infos = client.get_all_node_info(timeout=STATE_TIMEOUT)
        except Exception as exc:  # (Ray's RpcError: its head did not answer)
            raise TimeoutError(f"Ray's head did not answer: {exc}") from None
        return [
            {
                "NodeID": node_id.hex(),
                "Alive": True,
                "Resources": dict(info.resources_total),
                "NodeManagerHostname": info.node_manager_hostname,
                "NodeManagerAddress": info.node_manager_address,
            }
            for node_id, info in infos.items()
            if info.state == 0  # (GcsNodeInfo.ALIVE)
        ]

    def _local_inventory(self) -> list[RayNode]:
        alive = self._alive_nodes()
        node_id = alive[0]["NodeID"] if alive else ""
        groups = self.config.gpus
        slots = discover_nvidia() if groups == "auto" else virtual_slots(groups)
        nodes: dict[str, RayNode] = {}
        for slot in slots:
            node = nodes.setdefault(
                slot.node,
                RayNode(slot.node, node_id, slot.gpu_type, 0, None if slot.device is None else []),
            )
            node.gpus += 1
            if node.devices is not None and slot.device is not None:
                node.devices.append(slot.device)
        return list(nodes.values())

    def _cluster_inventory(self) -> list[RayNode]:
        """Known nodes in their recorded order, then nodes that joined since."""
        known: list[RayNode] = []
        with contextlib.suppress(OSError, ValueError, TypeError):
            known = [RayNode(**n) for n in json.loads((self.state_dir / NODES_FILE).read_text())]
        known, _ = self._with_joined(known, self._alive_nodes())
        if not known:
            raise CorralError(f"the Ray cluster at {self.settings.address} has no node with GPUs")
        self._save_nodes(known)
        return known

    def _with_joined(
        self, known: list[RayNode], alive: list[dict[str, Any]]
    ) -> tuple[list[RayNode], bool]:
        """``known`` with the GPU nodes that joined Ray since, and whether any did. A
        joiner on the host of a known node Ray no longer lists alive, with its GPU type
        and count, takes that node's place (its name and GPU ids): a worker whose
        raylet restarted is the same machine under a new Ray id, not more GPUs, and
        its old entry must not stay down for ever. Other joiners are added at the end."""
        alive_ids = {i["NodeID"] for i in alive}
        nodes = list(known)
        joined = False
        for info in alive:
            if info["NodeID"] in {n.node_id for n in nodes} or _gpus_of(info) <= 0:
                continue
            new = self._node_from(info)
            joined = True
            k = next(
                (
                    k
                    for k, n in enumerate(nodes)
                    if n.node_id not in alive_ids
                    and (n.host, n.gpu_type, n.gpus) == (new.host, new.gpu_type, new.gpus)
                ),
                None,
            )
            if k is None:
                nodes.append(new)
                continue
            old = nodes[k]
            nodes[k] = RayNode(old.name, new.node_id, old.gpu_type, old.gpus, new.devices, old.host)
            print(
                f"ray: node {old.name} is back as Ray node {new.node_id[:8]} "
                f"(was {old.node_id[:8]}); its GPUs keep their ids",
                file=sys.stderr,
                flush=True,
            )
        return nodes, joined

    def _node_from(self, info: dict[str, Any]) -> RayNode:
        resources = info.get("Resources", {})
        types = [k.split(":", 1)[1] for k in resources if k.startswith("accelerator_type:")]
        count = _gpus_of(info)
        host = info.get("NodeManagerHostname") or info.get("NodeManagerAddress") or "node"
        return RayNode(
            f"{host}-{info['NodeID'][:8]}",
            info["NodeID"],
            types[0] if types else "GPU",
            count,
            None if self.settings.virtual_gpus else [str(k) for k in range(count)],
            host,
        )

    def _save_nodes(self, nodes: list[RayNode]) -> None:
        write_atomic(self.state_dir / NODES_FILE, json.dumps([asdict(n) for n in nodes]))

    def _unalive(self, alive_nodes: list[dict[str, Any]] | None = None) -> set[str]:
        """The inventory's nodes Ray does not list alive (from ``alive_nodes`` when
        they were just read)."""
        alive = {n["NodeID"] for n in (alive_nodes if alive_nodes is not None else
                                       self._alive_nodes())}  # fmt: skip
        return {n.name for n in self.nodes if n.node_id not in alive}

    # ------------------------------------------------------------ inventory
    def gpu_confinement(self) -> str | None:
        if self.settings.virtual_gpus:
            return None
        return "NOT confined on Ray nodes: a rank is given its GPUs by CUDA_VISIBLE_DEVICES alone"

    def slots(self) -> list[GpuSlot]:
        out: list[GpuSlot] = []
        for node in self.nodes:
            for k in range(node.gpus):
                device = node.devices[k] if node.devices is not None else None
                out.append(GpuSlot(len(out), node.name, node.gpu_type, device))
        return out

    def unavailable_nodes(self) -> set[str]:
        return self._gone | set(self._suspect)

    def watch(self) -> bool:
        now = time.monotonic()
        if now - self._checked < self.settings.poll_interval and not any(
            probe is None for probe in self._suspect.values()
        ):
            return False
        self._checked = now
        if self._head_group is not None and not head_alive(self._head_group):
            self._restart_head()
            return True
        if self._left or self._head_away(fresh=True):
            return self._cluster_lost()
        try:
            alive = self._alive_nodes()
        except Exception:  # Ray's head unreachable: every node is out until it is back
            return self._cluster_lost()
        if self._lost_since is not None:
            self._lost_since = None
            self._reason = {}
        changed = False
        if self.settings.address:
            self.nodes, joined = self._with_joined(self.nodes, alive)
            if joined:
                self._save_nodes(self.nodes)
                changed = True
        gone = self._unalive(alive)
        if gone != self._gone:
            self._gone = gone
            changed = True
        if self._suspect:
            changed |= self._probe_suspects()
        return changed

    def unavailable_reason(self, node: str) -> str | None:
        if node in self._suspect and node not in self._gone:
            return "a rank was lost on it; not used until Ray confirms it is alive"
        return self._reason.get(node) or ("left the Ray cluster" if node in self._gone else None)

    def _probe_suspects(self) -> bool:
        """Send each suspect node a pinned task, and take back those whose task came
        back (Ray runs work there: alive) or that Ray has declared gone (they are
        out as gone instead). True when the nodes out changed: one just suspected
        (the loop must stop placing there), or one taken back (it may again)."""
        changed = False
        for name, probe in list(self._suspect.items()):
            if name in self._gone:
                del self._suspect[name]
                continue
            if probe is None:
                print(
                    f"ray: node {name} lost a rank; not used until a probe runs there",
                    file=sys.stderr,
                    flush=True,
                )
                self._suspect[name] = self._send_probe(name)
                changed = True  # (newly out)
                continue
            ready, _ = self.ray.wait([probe], timeout=0)
            if not ready:
                if time.monotonic() - self._probed_at[name] >= PROBE_PATIENCE:
                    with contextlib.suppress(Exception):
                        self.ray.cancel(probe, force=True)
                    self._suspect[name] = self._send_probe(name)  # (Ray lists it alive: ask again)
                continue
            try:
                self.ray.get(probe, timeout=CALL_TIMEOUT)
            except Exception:  # not yet: ask again at the next look
                self._suspect[name] = self._send_probe(name)
                continue
            del self._suspect[name]
            print(f"ray: node {name} runs work again; in use", file=sys.stderr, flush=True)
            changed = True
        return changed

    def _send_probe(self, name: str) -> Any:
        self._probed_at[name] = time.monotonic()
        return self._probe(self.node_of(name).node_id)

    def _probe(self, node_id: str) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        if self._probe_task is None:
            self._probe_task = self.ray.remote(num_cpus=0, max_retries=0)(_here)
        strategy = NodeAffinitySchedulingStrategy(node_id, soft=False)
        return self._probe_task.options(scheduling_strategy=strategy).remote()

    def _restart_head(self) -> None:
        """The service's own Ray instance died (its raylet or GCS): start it again.
        Attempts that ran on it are lost with it; polling them ends each as a node
        failure, which the loop requeues from its checkpoint. Where this process
        cannot join the new instance (Ray's driver does not always rejoin after its
        raylet died), every node is marked down saying so, and the next start of the
        service ends the dead instance and starts a new one."""
        old = self._head_group
        print(
            f"ray: the service's own Ray instance (process group {old}) died; starting a new one",
            file=sys.stderr,
            flush=True,
        )
        with contextlib.suppress(Exception):
            self.ray.shutdown()
        try:
            self._local_head()
        except CorralError as exc:
            why = (
                "the service's own Ray instance died and this process could not join a new "
                f"one ({exc}); restart corral serve"
            )
            print(f"ray: {why}", file=sys.stderr, flush=True)
            if self._head_group is not None and self._head_group != old:
                stop_group(self._head_group, 5)  # the new one: the restart makes its own
            with contextlib.suppress(OSError):
                (self.state_dir / HEAD_FILE).unlink()
            self._head_group = None  # not watched again
            self._reason = {n.name: why for n in self.nodes}
            self._gone = {n.name for n in self.nodes}
            return
        self.nodes = self._local_inventory()
        self._gone = self._unalive()
        self._reason = {}
        self.restarts += 1
        for a in self._attempts.values():  # their starts went to the dead instance: the
            a.starting = None  # next poll asks their ranks, and finds them lost

    def _head_away(self, fresh: bool = False) -> bool:
        """Whether a configured head's port does not answer (asked before calling Ray:
        with its GCS gone, Ray's calls wait out its reconnect timeout while every node
        still looks alive). Asked at most once a second unless ``fresh``."""
        head = _head_address(self.settings.address)
        if head is None:
            return False
        now = time.monotonic()
        if fresh or now - self._head_checked >= 1.0:
            self._head_checked = now
            self._head_was_away = not _reachable(head)
        return self._head_was_away

    def _cluster_lost(self) -> bool:
        """A configured Ray cluster cannot be reached: its nodes are down, saying why,
        and the connection is tried again at each poll until it is back. Ray's driver
        ends its own process once its GCS has been away for Ray's reconnect timeout
        (60 s), which would take the service, its API and its loop with it: after
        ``ray.leave_after`` seconds away the service leaves Ray instead, and joins again
        when the head answers. Ranks are then found again by their actors' names: on
        a head that came back whole they are adopted; on a new one they are gone, and
        their attempts end as node failures (requeued, no retry used)."""
        address = self.settings.address or ""
        now = time.monotonic()
        if self._lost_since is None:
            self._lost_since = now
            why = f"the Ray cluster at {address} cannot be reached"
            self._reason = {n.name: why for n in self.nodes}
            self._gone = {n.name for n in self.nodes}
            print(f"ray: {why}; its nodes are down until it answers", file=sys.stderr, flush=True)
            return True
        head = _head_address(address)
        # ('auto' names no head to ask: left, it is joined again by a restart)
        reachable = head is not None and _reachable(head)
        if not self._left and (reachable or now - self._lost_since >= self.settings.leave_after):
            with contextlib.suppress(Exception):
                self.ray.shutdown()
            self._left = True
            if not reachable:
                print(
                    f"ray: left the Ray cluster at {address}, away for "
                    f"{now - self._lost_since:.0f} s (the service goes on; it joins again "
                    "when the head answers)",
                    file=sys.stderr,
                    flush=True,
                )
        if self._left and reachable:
            with contextlib.suppress(CorralError):
                self._connect(address)
                self._left = False
                self._attempts.clear()  # (their handles were the old connection's)
                print(
                    f"ray: joined the Ray cluster at {address} again", file=sys.stderr, flush=True
                )
        return False

    def node_of(self, name: str) -> RayNode:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    # ------------------------------------------------------------ attempts
    def _actor_class(self) -> Any:
        if self._rank_class is None:
            self._rank_class = self.ray.remote(num_cpus=0, max_restarts=0)(RankProcess)
        return self._rank_class

    def _actor_name(self, token: str, rank: int) -> str:
        return f"corral-{token}-r{rank}"

    def launch(self, request: LaunchRequest) -> ProcessRef:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        request.dir.mkdir(parents=True, exist_ok=True)
        by_node: dict[str, list[GpuSlot]] = {}
        for slot in request.gpus:
            by_node.setdefault(slot.node, []).append(slot)
        names = list(by_node)
        token = secrets.token_hex(6)
        write_atomic(request.dir / REF_FILE, f"{token} {len(names)}")
        conf = confinement(request, [])
        conf.cpus, conf.output = [], None  # CPU ids are the node's own; output comes back here
        base = job_environment(request)
        actors: list[Any] = []
        starting: list[Any] = []
        try:  # (nothing here waits for Ray: the loop goes on while it starts the actors)
            for rank, name in enumerate(names):
                strategy = NodeAffinitySchedulingStrategy(self.node_of(name).node_id, soft=False)
                actors.append(
                    self._actor_class()
                    .options(
                        name=self._actor_name(token, rank),
                        namespace=self.namespace,
                        lifetime="detached",
                        scheduling_strategy=strategy,
                    )
                    .remote()
                )
            # rank 0's address and port, handed to every rank's start by Ray itself
            head = actors[0].node.remote() if len(names) > 1 else None
            tasks = int(base.get("SLURM_NTASKS_PER_NODE", "1"))  # (an srun line's, per node)
            for rank, (name, actor) in enumerate(zip(names, actors, strict=True)):
                env = dict(base)
                devices = [s.device for s in by_node[name] if s.device is not None]
                env.update(
                    CUDA_VISIBLE_DEVICES=",".join(devices),
                    CORRAL_RANK=str(rank),
                    CORRAL_LOCAL_RANK="0",
                    CORRAL_WORLD_SIZE=str(len(names)),
                    CORRAL_NODE_GPUS=str(len(by_node[name])),
                    CORRAL_NODE=name,
                    SLURM_PROCID=str(rank),
                    SLURM_NODEID=str(rank),
                    SLURM_NTASKS=str(len(names) * tasks),
                    SLURM_NPROCS=str(len(names) * tasks),
                    SLURM_TASKS_PER_NODE=f"{tasks}(x{len(names)})",
                    SLURM_NNODES=str(len(names)),
                    SLURM_JOB_NUM_NODES=str(len(names)),
                    SLURM_GPUS_ON_NODE=str(len(by_node[name])),
                    SLURM_JOB_GPUS=",".join(str(s.id) for s in by_node[name]),
                    SLURMD_NODENAME=name,
                )
                folder = request.dir / f"rank-{rank}"
                starting.append(
                    actor.start.remote(str(folder), conf.as_dict(), env, request.argv, head)
                )
        except Exception as exc:  # Ray refused at once (a node it knows is dead)
            attempt = _Attempt(
                token, actors, names, [0] * len(names), request.dir, _log_of(request)
            )
            self._not_started(attempt, exc)
            return ProcessRef(0, f"{REF_PREFIX}{token}:{len(names)}")
        self._attempts[token] = _Attempt(
            token,
            actors,
            names,
            [0] * len(names),
            request.dir,
            _log_of(request),
            starting=starting,
            launched=time.monotonic(),
        )
        self._save_offsets(self._attempts[token])
        return ProcessRef(0, f"{REF_PREFIX}{token}:{len(names)}")

    def _not_started(self, a: _Attempt, exc: BaseException | str) -> ExitRecord:
        """End an attempt Ray could not start (lost: a node's trouble, not the job's)."""
        why = exc if isinstance(exc, str) else (str(exc).splitlines() or [""])[0]
        why = why or type(exc).__name__
        record = ExitRecord(None, None, f"Ray could not start it: {why}", lost=True)
        self._finish(a, record)
        return record

    def _started(self, a: _Attempt) -> ExitRecord | None:
        """While Ray starts the attempt's ranks: None once all started (or still
        starting); the attempt's end when one could not be started."""
        assert a.starting is not None
        out = [name for name in a.nodes if name in self._gone]
        if out:  # (Ray may never answer a start sent to a node that left)
            return self._not_started(a, f"node {out[0]} left the Ray cluster")
        ready, _ = self.ray.wait(a.starting, num_returns=len(a.starting), timeout=0)
        if len(ready) < len(a.starting):
            if time.monotonic() - a.launched < START_TIMEOUT:
                return None
            return self._not_started(a, f"not started in {START_TIMEOUT:.0f} s")
        for call in a.starting:
            try:
                self.ray.get(call, timeout=CALL_TIMEOUT)
            except Exception as exc:  # its node died under it, or Ray cannot place it
                return self._not_started(a, exc)
        a.starting = None
        return None

    def _attempt(self, ref: ProcessRef, folder: Path) -> _Attempt | None:
        parsed = parse_ref(ref)
        if parsed is None:
            return None
        token, count = parsed
        known = self._attempts.get(token)
        if known is not None:
            return known
        ranks = [self._lookup(token, rank) for rank in range(count)]
        offsets, nodes, log = [0] * count, [""] * count, folder / "log.txt"
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            saved = json.loads((folder / OFFSETS_FILE).read_text())
            offsets, nodes, log = saved["offsets"], saved["nodes"], Path(saved["log"])
        attempt = _Attempt(token, ranks, nodes, offsets, folder, log)
        self._attempts[token] = attempt
        return attempt

    def _save_offsets(self, a: _Attempt) -> None:
        record = {"offsets": a.offsets, "nodes": a.nodes, "log": str(a.log)}
        with contextlib.suppress(OSError):
            write_atomic(a.folder / OFFSETS_FILE, json.dumps(record))

    def _lookup(self, token: str, rank: int) -> Any:
        """A rank's actor by its name; None when it is gone (its node left, or it ended)."""
        try:
            return self.ray.get_actor(self._actor_name(token, rank), self.namespace)
        except ValueError:
            return None

    def signal(self, ref: ProcessRef, sig: int) -> None:
        parsed = parse_ref(ref)
        if parsed is None:
            return
        token, count = parsed
        known = self._attempts.get(token)  # (not registered here: its folder is poll's to give)
        ranks = known.ranks if known else [self._lookup(token, k) for k in range(count)]
        for actor in ranks:
            if actor is not None:
                with contextlib.suppress(Exception):
                    actor.signal.remote(sig)

    def poll(self, ref: ProcessRef, folder: Path) -> ExitRecord | None:
        if self._lost_since is not None or self._head_away():  # no news while it is away
            return read_exit_record(folder)
        a = self._attempt(ref, folder)
        if a is None:
            return read_exit_record(folder) or ExitRecord(
                None, None, "not a Ray attempt", lost=True
            )
        done = read_exit_record(folder)
        if done is not None and all(actor is None for actor in a.ranks):
            return done  # ended and recorded before a restart
        now = time.monotonic()
        if now - a.checked < STATUS_EVERY:
            return None
        a.checked = now
        if a.starting is not None:
            ended = self._started(a)
            if ended is not None or a.starting is not None:
                return ended
        calls: list[Any] = []
        for k, actor in enumerate(a.ranks):
            try:
                calls.append(actor.status.remote(a.offsets[k]) if actor is not None else None)
            except Exception as exc:  # refused at once: Ray knows the actor is dead
                calls.append(exc)
        records: list[dict[str, Any] | None] = []
        wrote = False
        for k, call in enumerate(calls):
            if call is None:
                records.append({"lost": True, "detail": f"rank {k}'s actor is gone"})
                continue
            try:
                if isinstance(call, Exception):
                    raise call
                answer = self.ray.get(call, timeout=CALL_TIMEOUT)
            except Exception as exc:  # the actor died with its node, or cannot be reached
                if self._head_away(fresh=True):  # (the head went: no news, not a loss)
                    return None
                where = f" on node {a.nodes[k]}" if a.nodes[k] else ""
                try:
                    left = a.nodes[k] in self._unalive()
                except TimeoutError:  # the head does not answer: no news, not a loss
                    return None
                why = "its node left the Ray cluster" if left else exc
                if a.nodes[k] and not left:  # (Ray may not know yet that the node died)
                    self._suspect.setdefault(a.nodes[k], None)
                records.append({"lost": True, "detail": f"rank {k}{where} lost: {why}"})
                continue  # (its handle kept: the attempt's end kills it, should it live)
            if answer["output"]:
                _append(a.log, answer["output"], k)
                a.offsets[k] = answer["offset"]
                wrote = True
            records.append(answer["record"])
        if wrote:
            self._save_offsets(a)
        final = _attempt_end(records)
        if final is None:
            return None
        self._finish(a, final)
        return final

    def _finish(self, a: _Attempt, record: ExitRecord) -> None:
        """Record the attempt's end beside its log, then stop and drop its ranks."""
        body = {
            "exit_code": record.exit_code,
            "signal": record.signal,
            "detail": record.detail,
            "lost": record.lost,
            "end_time": time.time(),
        }
        with contextlib.suppress(OSError):
            write_atomic(a.folder / EXIT_FILE, json.dumps(body))
        for actor in a.ranks:
            if actor is not None:
                with contextlib.suppress(Exception):
                    self.ray.get(actor.signal.remote(signal.SIGKILL), timeout=5)
                with contextlib.suppress(Exception):
                    self.ray.kill(actor, no_restart=True)
        a.ranks = [None] * len(a.ranks)
        self._attempts.pop(a.token, None)

    def adopt(self, ref: ProcessRef) -> bool:
        parsed = parse_ref(ref)
        if parsed is None:
            return False
        token, count = parsed
        for rank in range(count):
            actor = self._lookup(token, rank)
            try:
                self.ray.get(actor.node.remote(), timeout=CALL_TIMEOUT)
            except Exception:  # gone, or not answering
                return False
        return True

    def pid_from(self, folder: Path) -> ProcessRef | None:
        try:
            token, count = (folder / REF_FILE).read_text().split()
        except (OSError, ValueError):
            return None
        return ProcessRef(0, f"{REF_PREFIX}{token}:{count}")

    def close(self, jobs_running: bool) -> None:
        """Leave Ray; a local instance is stopped when no job runs on it."""
        with contextlib.suppress(Exception):
            self.ray.shutdown()
        if self._head_group is not None and not jobs_running:
            record = self.state_dir / HEAD_FILE
            with contextlib.suppress(OSError, ValueError):
                forget_cluster_file(json.loads(record.read_text()).get("address", ""))
            stop_group(self._head_group)
            with contextlib.suppress(OSError):
                record.unlink()
            with contextlib.suppress(OSError):
                (self.state_dir / "ray-logs").unlink()


def _here() -> bool:
    """A suspect node's probe: run there, it shows Ray runs work on the node."""
    return True


def _attempt_end(records: list[dict[str, Any] | None]) -> ExitRecord | None:
    """The attempt's end from its ranks': the first failure, else success once all ended."""
    for k, r in enumerate(records):
        if r is None:
            continue
        if r.get("lost"):
            return ExitRecord(None, None, r.get("detail"), lost=True)
        if r.get("exit_code") != 0:
            detail = r.get("detail")
            if len(records) > 1:
                detail = f"rank {k}: {detail}" if detail else f"rank {k}"
            return ExitRecord(r.get("exit_code"), r.get("signal"), detail)
    if all(r is not None for r in records):
        return ExitRecord(0, None, None)
    return None


def _append(log: Path, data: bytes, rank: int) -> None:
    if rank:
        lines = data.split(b"\n")
        tail = lines.pop()
        data = b"".join(b"[rank %d] %s\n" % (rank, line) for line in lines) + tail
    with contextlib.suppress(OSError), open(log, "ab") as out:
        out.write(data)


def _log_of(request: LaunchRequest) -> Path:
    return Path(request.output) if request.output else request.log


def _gpus_of(info: dict[str, Any]) -> int:
    return int(info.get("Resources", {}).get("GPU", 0))


def _head_address(address: str | None) -> str | None:
    """A configured head's ``host:port``, None for 'auto', a ``ray://`` client address
    or none at all (nothing to ask before calling Ray)."""
    if not address or "://" in address:
        return None
    host, colon, port = address.rpartition(":")
    return address if colon and host and port.isdigit() else None


def _reachable(address: str) -> bool:
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=2):
            return True
    except (OSError, ValueError):
        return False


def head_alive(group: int) -> bool:
    """Whether a Ray head started in process group ``group`` still runs its GCS and
    its raylet (a head that lost either cannot run anything, yet may still accept
    connections)."""
    names: set[str] = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            text = stat.read_text()
            name = text[text.index("(") + 1 : text.rindex(")")]
            fields = text[text.rindex(")") + 2 :].split()
            if int(fields[2]) == group:  # pgrp: the fifth field of stat
                names.add(name)
    return "raylet" in names and any(n.startswith("gcs_server") for n in names)


def ray_temp_dir() -> Path:
    """Where Ray keeps its sessions and its current-cluster file on this machine."""
    try:
        import importlib

        helpers = importlib.import_module("ray._common.utils")
        return Path(helpers.get_default_ray_temp_dir())
    except Exception:  # another Ray: its documented default
        return Path(tempfile.gettempdir()) / "ray"


def ray_session_logs() -> Path:
    """The log folder of the newest Ray session on this machine."""
    return ray_temp_dir() / "session_latest" / "logs"


def forget_cluster_file(address: str) -> None:
    """Remove the file in which ``ray start`` names the machine's current cluster when
    it names ours: a later local Ray program must not find our stopped head."""
    path = ray_temp_dir() / "ray_current_cluster"
    with contextlib.suppress(OSError):
        if address and path.read_text().strip() == address:
            path.unlink()


def stop_group(group: int, grace: float = 10.0) -> None:
    """Stop a process group: SIGTERM, then SIGKILL after ``grace`` seconds."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except (ProcessLookupError, PermissionError):
            return
        time.sleep(0.2)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, signal.SIGKILL)
