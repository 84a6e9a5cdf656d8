"""The Ray executor end to end: ``corral serve`` with ``executor: ray``.

On a Ray instance the service starts itself (4 virtual GPUs), and on a Ray
cluster of three fake GPU nodes of two types made with
``ray.cluster_utils.Cluster``: a multi-node gang and a preemptive policy, a
node removed mid-run, and ``kill -9`` of the service with ranks adopted
after the restart. Everything listens on 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from corral.ray_support import import_ray
from corral.runtime.execution.ray_executor import HEAD_FILE, NODES_FILE, stop_group
from corral.testing.service_process import ServiceProcess, wait_for
from tests.runtime.harness import PY, TERMINAL, TOKENS

pytest.importorskip("ray")

WORK = """
import os, pathlib, sys, time
rank, ranks = os.environ["CORRAL_RANK"], os.environ["CORRAL_WORLD_SIZE"]
print("rank", rank, "of", ranks, "on", os.environ["CORRAL_NODE"], "with",
      os.environ["CORRAL_NODE_GPUS"], "of", os.environ["CORRAL_NUM_GPUS"], "GPUs", flush=True)
gate = pathlib.Path(sys.argv[2]) if len(sys.argv) > 2 else None
while gate is not None and not gate.exists():  # held until the test lets it end
    time.sleep(0.1)
mark = pathlib.Path(os.environ["CORRAL_CHECKPOINT_DIR"]) / f"seconds-{rank}"
mark.parent.mkdir(parents=True, exist_ok=True)
done = float(mark.read_text()) if mark.exists() else 0.0
while done < float(sys.argv[1]):
    time.sleep(0.1)
    done += 0.1
    mark.with_suffix(".tmp").write_text(str(done))
    os.replace(mark.with_suffix(".tmp"), mark)
"""
"""Seconds of work that survive preemption (each rank checkpoints its progress,
atomically: a stop signal between truncating and writing the file would leave it
empty for the next attempt). A job given a gate file does no work until it exists."""


def job(seconds: float, gpus: int = 1, gate: Path | None = None, **extra: Any) -> dict[str, Any]:
    command = [PY, "-c", WORK, str(seconds), *([str(gate)] if gate else [])]
    return {"command": command, "gpus": gpus, **extra}


class RayService(ServiceProcess):
    def __init__(self, folder: Path, policy: str, options: dict[str, Any], **settings: Any):
        super().__init__(
            folder,
            policy,
            options,
            users=TOKENS,
            executor="ray",
            stop_grace=5,
            retry={"backoff": 0.2, "backoff_max": 1},
            **settings,
        )

    def wait_done(self, ids: list[int], timeout: float = 120) -> list[dict[str, Any]]:
        self.wait_jobs(ids, lambda job: job["status"] in TERMINAL, timeout, f"jobs {ids} to end")
        return [self.client.job(j) for j in ids]

    def wait_jobs(
        self, ids: list[int], ready: Callable[[dict[str, Any]], bool], timeout: float, what: str
    ) -> None:
        """Wait until ``ready(job)`` holds for each job; else say, readable in a CI log,
        what each job not ready went through, the nodes' states and the service's log."""
        try:
            wait_for(lambda: all(ready(self.client.job(j)) for j in ids), timeout, what)
        except TimeoutError as exc:
            jobs = {j: self.client.job(j) for j in ids}
            states = {j: job["status"] for j, job in jobs.items()}
            stuck = {
                j: [
                    (e["kind"], e["time"], e["detail"].get("cause") or e["detail"].get("gpus"))
                    for e in job["events"]
                ]
                + [(a["cause"], a["detail"]) for a in job["attempts"]]
                for j, job in jobs.items()
                if not ready(job)
            }
            nodes = [(n["name"], n["state"], n.get("reason")) for n in self.admin.nodes()]
            tail = self.log.read_text(errors="replace")[-3000:]
            raise TimeoutError(
                f"{exc}: {states}; events and attempts of those not ready: {stuck}; "
                f"nodes: {nodes}; at {time.time():.1f} the service's log ends:\n{tail}"
            ) from None

    def wait_log(self, job_id: int, text: str, timeout: float, what: str) -> None:
        """Wait until the job's log holds ``text`` (reported as :meth:`wait_jobs` does)."""
        self.wait_jobs([job_id], lambda _job: text in self.client.logs(job_id).text, timeout, what)

    def close(self) -> None:
        super().close()
        for pid_file in (self.folder / "state" / "jobs").glob("*/attempt-*/rank-*/launcher.pid"):
            with contextlib.suppress(ValueError, OSError):
                os.killpg(int(pid_file.read_text()), signal.SIGKILL)
        with contextlib.suppress(OSError, ValueError, KeyError):
            stop_group(json.loads((self.folder / "state" / HEAD_FILE).read_text())["group"], 5)


@pytest.fixture
def services(tmp_path: Path) -> Iterator[list[RayService]]:
    made: list[RayService] = []
    yield made
    for service in made:
        service.close()


@pytest.fixture
def cluster() -> Iterator[Any]:
    """Three fake GPU nodes on loopback: two with 2 V100s, one with 2 K80s."""
    ray = import_ray("127.0.0.1:0")
    from ray.cluster_utils import Cluster

    made = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 1, "num_gpus": 0, "include_dashboard": False},
    )
    made.by_type = {}
    for gpu_type in ("V100", "V100", "K80"):
        node = made.add_node(num_cpus=1, num_gpus=2, resources={f"accelerator_type:{gpu_type}": 2})
        made.by_type.setdefault(gpu_type, []).append(node)
    made.wait_for_nodes()
    yield made
    with contextlib.suppress(Exception):
        ray.shutdown()
    made.shutdown()


def outward_listeners() -> set[tuple[str, int]]:
    """TCP sockets listening on an address other than loopback (from /proc)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as fh:
            for line in fh.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                address, port = local.split(":")
                # 127.0.0.1, as itself or IPv4-mapped in IPv6, or ::1
                loopback = address.endswith("0100007F") or address == "0" * 24 + "01000000"
                if state == "0A" and not loopback:  # LISTEN
                    found.add((address, int(port, 16)))
    return found


def ranks_placed_as_planned(service: RayService, job_id: int) -> list[str]:
    """The Ray node each rank of each attempt ran on, checked against the
    nodes of the GPUs the policy chose; the nodes' names."""
    nodes = json.loads((service.folder / "state" / NODES_FILE).read_text())
    slots = [n for n in nodes for _ in range(n["gpus"])]
    used = []
    attempts = service.client.job(job_id)["attempts"]
    for attempt in attempts:
        folder = service.folder / "state" / "jobs" / str(job_id) / f"attempt-{attempt['number']}"
        planned = list(dict.fromkeys(slots[g]["name"] for g in attempt["gpus"]))
        exit_file = folder / "exit.json"
        record = json.loads(exit_file.read_text()) if exit_file.exists() else {"detail": None}
        if (record["detail"] or "").startswith("Ray could not start it"):
            # (on a loaded host an actor may take longer to start than the executor
            # waits; the attempt is lost before any rank ran, and the job starts again)
            assert record["lost"] and attempt is not attempts[-1], (job_id, attempt)
            continue
        for rank, name in enumerate(planned):
            node_file = folder / f"rank-{rank}" / "ray-node-id"
            events = [(e.kind, e.detail) for e in service.events() if e.job_id == job_id]
            assert node_file.exists(), (job_id, attempt, record, events)
            ran_on = node_file.read_text()
            expected = next(n["node_id"] for n in nodes if n["name"] == name)
            assert ran_on == expected, (job_id, attempt["number"], rank)
        used += planned
    return used


def test_local_ray_instance_runs_six_jobs_on_four_virtual_gpus(services, tmp_path):
    before = outward_listeners()
    service = RayService(tmp_path / "local", "tiresias-las", {})
    services.append(service)
    service.start(timeout=120)
    assert outward_listeners() <= before  # Ray and the service listen on 127.0.0.1 only
    ids = [service.client.submit(job(1.5, gpus=1 + k % 2))["id"] for k in range(6)]
    done = service.wait_done(ids)
    assert [j["status"] for j in done] == ["SUCCEEDED"] * 6
    log = service.client.logs(ids[1]).text
    assert "rank 0 of 1" in log
    head = json.loads((tmp_path / "local" / "state" / HEAD_FILE).read_text())
    assert head["address"].startswith("127.0.0.1:")


@pytest.mark.long  # four minutes of a three-node Ray; the parts in tests/runtime/test_ray_parts.py
def test_gang_across_nodes_preemption_node_loss_and_kill9(services, cluster, tmp_path):
    service = RayService(
        tmp_path / "svc",
        "las",
        {"quantum": 2.0},
        gpus="auto",
        ray={"address": cluster.address, "virtual_gpus": True, "poll_interval": 0.5},
    )
    services.append(service)
    service.start(timeout=120)
    nodes = service.admin.nodes()
    assert sorted(n["gpu_type"] for n in nodes) == ["K80", "V100", "V100"]
    # a 4-GPU V100 gang spans both V100 nodes: two ranks, one per node
    gang = service.client.submit(job(4, gpus=4, gpu_type="V100", name="gang"))["id"]
    # two long single jobs run first (held until the test lets them end, so one
    # cannot end while Ray slowly starts the other on a loaded host); once both
    # run, seven newcomers with no service at all come, so LAS must cut both
    # (past their 2 s quantum)
    gate = tmp_path / "go"
    hogs = [service.client.submit(job(2, gate=gate, name=f"hog-{k}"))["id"] for k in range(2)]
    for hog in hogs:
        service.wait_log(hog, "rank 0 of 1", 300, "a long job to run")
    singles = [service.client.submit(job(2 + k % 3))["id"] for k in range(7)]
    service.wait_jobs(hogs, lambda j: j["preemptions"] > 0, 300, "LAS to cut both long jobs")
    gate.touch()
    ids = [gang, *hogs, *singles]
    done = service.wait_done(ids, timeout=600)  # (Ray starts workers slowly on a loaded host)
    assert [j["status"] for j in done] == ["SUCCEEDED"] * 10, [
        (j["id"], j["status"], [(a["cause"], a["detail"]) for a in j["attempts"]])
        for j in done
        if j["status"] != "SUCCEEDED"
    ]  # the causes of a failed job's attempts, readable in a CI log
    assert all(j["preemptions"] > 0 for j in done[1:3]), [  # LAS cut the long jobs
        (j["id"], [(e["kind"], e["time"], e["detail"].get("gpus")) for e in j["events"]])
        for j in done
    ]  # (each job's events, readable in a CI log)
    gang_nodes = ranks_placed_as_planned(service, gang)
    assert len(set(gang_nodes)) >= 2
    log = service.client.logs(gang).text
    assert "rank 0 of 2" in log and "[rank 1] rank 1 of 2" in log
    assert log.count("with 2 of 4 GPUs") == 2 * log.count("rank 0 of 2")  # each its node's
    for j in ids[1:]:
        ranks_placed_as_planned(service, j)

    # a node leaves mid-run: its job ends as a node failure and is retried elsewhere
    # (the V100s are busy with a 4-GPU job, so a 2-GPU job of any type lands on the K80s)
    blocker = service.client.submit(job(6, gpus=4, gpu_type="V100", name="blocker"))["id"]
    service.wait_log(blocker, "rank 0 of 2", 300, "the V100 job")
    long = service.client.submit(job(10, gpus=2, name="moved"))["id"]
    service.wait_log(long, "rank 0 of 1", 300, "the K80 job to run")
    first = service.client.job(long)["attempts"][0]["gpus"]
    cluster.remove_node(cluster.by_type["K80"][0])
    wait_for(
        lambda: any(a["cause"] == "node_failure" for a in service.client.job(long)["attempts"]),
        180,
        "the K80 job's attempt to end as a node failure",
    )
    wait_for(
        lambda: [n["state"] for n in service.admin.nodes() if n["gpu_type"] == "K80"] == ["down"],
        180,
        "the K80 node to be down",
    )
    moved, blocked = service.wait_done([long, blocker], timeout=300)
    assert moved["status"] == "SUCCEEDED" and blocked["status"] == "SUCCEEDED"
    assert moved["attempts"][0]["cause"] == "node_failure"
    assert not set(moved["attempts"][-1]["gpus"]) & set(first)  # on the V100s this time
    # the K80 machine comes back (a new Ray node, the same host and GPUs): it takes its
    # old place, up again, rather than adding GPUs beside an entry down for ever
    k80 = [n["name"] for n in service.admin.nodes() if n["gpu_type"] == "K80"]
    cluster.add_node(num_cpus=1, num_gpus=2, resources={"accelerator_type:K80": 2})
    wait_for(
        lambda: (
            [(n["name"], n["state"]) for n in service.admin.nodes() if n["gpu_type"] == "K80"]
            == [(k80[0], "up")]
        ),
        180,
        "the K80 node to be back in its place",
    )
    assert len(service.admin.nodes()) == 3

    # kill -9 of the service; the ranks of a running job are adopted after the restart
    survivor = service.client.submit(job(8, gpus=2, name="survivor"))["id"]
    service.wait_log(survivor, "rank 0 of 1", 300, "the job to run")
    service.kill9()
    service.start(timeout=120)
    kinds = [e.kind for e in service.events() if e.job_id == survivor]
    assert "adopted" in kinds
    (final,) = service.wait_done([survivor], timeout=300)
    assert final["status"] == "SUCCEEDED" and len(final["attempts"]) == 1
    # the adopted attempt's end and output are recorded in its own folder
    folder = service.folder / "state" / "jobs" / str(survivor) / "attempt-1"
    assert json.loads((folder / "exit.json").read_text())["exit_code"] == 0
    assert "rank 0 of 1" in (folder / "log.txt").read_text()

    # a node that joins the Ray cluster adds its GPUs; a job asking for its type runs there
    cluster.add_node(num_cpus=1, num_gpus=1, resources={"accelerator_type:A100": 1})
    wait_for(lambda: "A100" in [n["gpu_type"] for n in service.admin.nodes()], 180, "the A100")
    newcomer = service.client.submit(job(1, gpu_type="A100", name="newcomer"))["id"]
    (ran,) = service.wait_done([newcomer], timeout=300)
    assert ran["status"] == "SUCCEEDED"
    (where,) = ranks_placed_as_planned(service, newcomer)
    assert where in [n["name"] for n in service.admin.nodes() if n["gpu_type"] == "A100"]


def head_processes(group: int) -> dict[str, int]:
    """The processes of a Ray head's group, by name."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            text = stat.read_text()
            name = text[text.index("(") + 1 : text.rindex(")")]
            if int(text[text.rindex(")") + 2 :].split()[2]) == group:
                found[name] = int(stat.parent.name)
    return found


def head_group(state: Path) -> int | None:
    """The service's own Ray head's process group, as recorded (None while it is
    being replaced)."""
    try:
        return int(json.loads((state / HEAD_FILE).read_text())["group"])
    except (OSError, ValueError, KeyError):
        return None


def kill_raylet(state: Path, process: str = "raylet") -> int:
    """SIGKILL the raylet (or another process) of the service's own Ray head; the
    head's group."""
    group = int(json.loads((state / HEAD_FILE).read_text())["group"])
    name = next(n for n in head_processes(group) if n.startswith(process))
    os.kill(head_processes(group)[name], signal.SIGKILL)
    return group


@pytest.mark.long  # two minutes of Ray starts; its own local instance runs jobs in the test above
def test_a_dead_ray_instance_is_replaced_and_a_stale_head_never_blocks_a_start(services, tmp_path):
    from corral.runtime.execution.ray_executor import ray_temp_dir

    service = RayService(tmp_path / "heal", "fifo", {}, ray={"poll_interval": 0.5})
    services.append(service)
    state = tmp_path / "heal" / "state"
    service.start(timeout=120)
    running = service.client.submit(job(3))["id"]
    wait_for(lambda: service.client.job(running)["status"] == "RUNNING", 60, "the job to run")

    # the raylet dies under a running job: its attempt ends as a node failure and the
    # job waits; the service either runs its Ray again or, where this process cannot
    # join a new instance, says so on every node
    old = kill_raylet(state)
    wait_for(
        lambda: (
            [a["cause"] for a in service.client.job(running)["attempts"]][:1] == ["node_failure"]
        ),
        120,
        "the lost attempt ended",
    )
    nodes = wait_for(
        lambda: (n := service.admin.nodes()) and (
            head_group(state) not in (None, old) or all(x["state"] == "down" for x in n)
        ) and n,
        120,
        "a new Ray instance, or the nodes down with a reason",
    )  # fmt: skip
    if head_group(state) in (None, old):
        assert all("restart corral serve" in (x["reason"] or "") for x in nodes), nodes
        service.stop()
        assert head_processes(old).get("raylet") is None
        service.start(timeout=180)  # ends the dead instance, starts a new one
        assert head_group(state) not in (None, old)
    assert [j["status"] for j in service.wait_done([running], 180)] == ["SUCCEEDED"]

    # killed, its head left half-dead: a start ends that head and starts a new one,
    # instead of waiting on it or calling it a configured cluster
    service.kill9()
    stale = kill_raylet(state)
    service.start(timeout=180)
    assert head_group(state) not in (None, stale)
    assert "raylet" not in head_processes(stale)
    again = service.client.submit(job(0.5))["id"]
    assert [j["status"] for j in service.wait_done([again], 180)] == ["SUCCEEDED"]
    address = json.loads((state / HEAD_FILE).read_text())["address"]

    # a clean stop leaves nothing behind: its head, its record, Ray's cluster file
    service.stop()
    assert not (state / HEAD_FILE).exists()
    cluster_file = ray_temp_dir() / "ray_current_cluster"
    assert not cluster_file.exists() or cluster_file.read_text().strip() != address


REACH = """
import os, sys
from corral.ray_support import import_ray
ray = import_ray(sys.argv[1])
ray.init(address=sys.argv[1], logging_level="ERROR", log_to_driver=False)
print("mode", os.environ.get("RAY_AUTH_MODE"), "answer", ray.get(
    ray.remote(lambda: 42).remote(), timeout=60), flush=True)
"""


def test_a_cluster_started_with_token_authentication_is_reached_with_the_users_token(
    tmp_path: Path,
) -> None:
    """``ray start --head`` (Ray 2.60) uses token authentication by default; corral
    reaching it by address uses the token the user has, as Ray's command line does
    (it printed InvalidAuthToken every second before, and gave up)."""
    from corral.runtime.execution.executor import free_port

    home = tmp_path / "home"
    (home / ".ray").mkdir(parents=True)
    (home / ".ray" / "auth_token").write_text("a" * 64)
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env.update(HOME=str(home), RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    port = free_port()
    ray_cli = str(Path(PY).parent / "ray")
    head = subprocess.Popen(
        [ray_cli, "start", "--head", "--block", f"--port={port}", "--node-ip-address=127.0.0.1",
         "--num-cpus=1", "--num-gpus=0", "--include-dashboard=false", "--disable-usage-stats"],
        env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        reached = subprocess.run(
            [PY, "-c", REACH, f"127.0.0.1:{port}"],
            env=env, capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        assert "mode token answer 42" in reached.stdout, reached.stderr[-2000:]
    finally:
        stop_group(head.pid, 10)
        head.wait(20)


@pytest.mark.long  # a real head killed; its logic in virtual time in test_ray_parts.py
def test_a_configured_clusters_head_lost_and_back_never_ends_the_service(
    services: list[RayService], tmp_path: Path
) -> None:
    """A ``ray start --head`` cluster whose head is killed (its whole process group)
    under a running job: its node is down at the next poll, the service leaves Ray
    before Ray's driver would end it (60 s) and goes on answering; the head started
    again on its port is joined, its machine takes its old place, and the job, whose
    rank died with the head, is requeued without using a retry (it allows none) and
    ends. A SIGTERM then still stops the service whole (Ray's driver, joined again
    from the loop's thread, had put its own handler in Python's place)."""
    from corral.runtime.execution.executor import free_port

    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_AUTH")}
    env.update(RAY_AUTH_MODE="disabled", RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    port = free_port()
    ray_cli = str(Path(PY).parent / "ray")

    def start_head() -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [ray_cli, "start", "--head", "--block", f"--port={port}",
             "--node-ip-address=127.0.0.1", "--num-cpus=1", "--num-gpus=2",
             '--resources={"accelerator_type:V100": 2}', "--include-dashboard=false",
             "--disable-usage-stats"],
            env=env, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            start_new_session=True,
        )  # fmt: skip

    heads = [start_head()]
    try:
        service = RayService(
            tmp_path / "svc",
            "fifo",
            {},
            gpus="auto",
            ray={"address": f"127.0.0.1:{port}", "virtual_gpus": True, "poll_interval": 0.5,
                 "leave_after": 3},
            env={"RAY_AUTH_MODE": "disabled"},
        )  # fmt: skip
        services.append(service)
        service.start(timeout=180)
        (node,) = service.admin.nodes()
        ran = service.client.submit({**job(6), "max_retries": 0})["id"]
        service.wait_log(ran, "rank 0 of 1", 300, "the job to run")

        os.killpg(heads[0].pid, signal.SIGKILL)
        heads[0].wait(10)
        wait_for(
            lambda: [(n["state"], "cannot be reached" in (n["reason"] or ""))
                     for n in service.admin.nodes()] == [("down", True)],
            10,
            "the node to be down",
        )  # fmt: skip
        wait_for(lambda: "ray: left the Ray cluster" in service.log.read_text(), 30, "leaving")
        time.sleep(5)  # (past the leave: the service still answers, the job is kept)
        assert service.proc is not None and service.proc.poll() is None
        assert service.client.job(ran)["status"] in ("RUNNING", "PENDING")

        heads.append(start_head())
        wait_for(
            lambda: (
                [(n["name"], n["state"]) for n in service.admin.nodes()] == [(node["name"], "up")]
            ),
            180,
            "the node back in its place",
        )
        (done,) = service.wait_done([ran], timeout=180)
        assert done["status"] == "SUCCEEDED", done
        assert done["attempts"][0]["cause"] == "node_failure", done["attempts"]
        service.stop()
        assert service.proc.returncode == 0 and "corral: stopped" in service.log.read_text()
        assert "SIGTERM received" not in service.log.read_text()
    finally:
        for head in heads:
            stop_group(head.pid, 10)
            head.wait(20)
