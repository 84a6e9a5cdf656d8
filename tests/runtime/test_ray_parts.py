"""The Ray executor's parts that need no Ray: references, how a gang's end is
read from its ranks', configs refused, and when Ray is kept on loopback."""

from __future__ import annotations

from pathlib import Path

import pytest

from corral.errors import InputError
from corral.ray_support import TOKEN_SETTINGS, ensure_token, is_local
from corral.runtime.execution.executor import ProcessRef
from corral.runtime.execution.ray_executor import _append, _attempt_end, parse_ref
from corral.runtime.jobspec.config import load_config


def test_references_name_the_attempts_ranks():
    assert parse_ref(ProcessRef(12, "ray:0a1b2c3d4e5f:2")) == ("0a1b2c3d4e5f", 2)
    assert parse_ref(ProcessRef(12, "123456")) is None  # a local process
    assert len("ray:0a1b2c3d4e5f:2") <= 32  # fits the store's column


def test_a_gang_ends_at_its_first_failure_or_when_all_ranks_succeeded():
    ok = {"exit_code": 0, "signal": None, "detail": None}
    assert _attempt_end([ok, None]) is None  # rank 1 still runs
    assert _attempt_end([ok, ok]).exit_code == 0
    failed = _attempt_end([ok, {"exit_code": 3, "signal": None, "detail": "boom"}])
    assert failed.exit_code == 3 and failed.detail == "rank 1: boom"
    lost = _attempt_end([None, {"lost": True, "detail": "rank 1 on node n lost"}])
    assert lost.lost and "rank 1" in lost.detail


def test_ranks_after_the_first_are_prefixed_in_the_log(tmp_path):
    log = tmp_path / "log.txt"
    _append(log, b"a\nb\n", 0)
    _append(log, b"c\nd", 1)
    assert log.read_bytes() == b"a\nb\n[rank 1] c\nd"


def test_loopback_addresses_and_local_instances_stay_local():
    assert is_local(None) and is_local("127.0.0.1:6379") and is_local("localhost:1")
    assert is_local("ray://127.0.0.1:10001")
    assert not is_local("10.0.0.5:6379") and not is_local("auto")


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ("executor: ray\nworkers: {standby: 1}\n", "standby workers run with the local"),
        (
            "executor: ray\nray: {address: '10.0.0.1:6379'}\ngpus: [{type: V100, count: 1}]\n",
            "the GPUs are the Ray cluster's",
        ),
        ("executor: ray\nray: {adress: x}\n", "ray.adress"),
        ("executor: mpi\n", "executor"),
    ],
)
def test_bad_ray_settings_are_refused_with_the_line(tmp_path, extra, words):
    path = tmp_path / "corral.yaml"
    path.write_text("users: [{name: a, token: aaaaaaaa}]\n" + extra)
    with pytest.raises(InputError) as err:
        load_config(path)
    assert words in str(err.value), str(err.value)


def test_a_token_is_made_for_rays_own_instance_once_and_kept_private(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    for name in TOKEN_SETTINGS:
        monkeypatch.delenv(name, raising=False)
    ensure_token()
    path = tmp_path / ".ray" / "auth_token"
    token = path.read_text()
    assert len(token) == 64 and int(token, 16) >= 0
    assert path.stat().st_mode & 0o777 == 0o600
    ensure_token()
    assert path.read_text() == token  # an existing token is Ray's: never replaced
    monkeypatch.setenv("RAY_AUTH_TOKEN_PATH", str(tmp_path / "elsewhere"))
    path.unlink()
    ensure_token()
    assert not path.exists()  # the owner said where the token is


def test_a_configured_cluster_lost_marks_every_node_down_with_the_reason_until_back(
    monkeypatch,
) -> None:
    """A test double for Ray (no cluster): ``nodes()`` fails while the cluster is
    away, and the executor says why every node is out, then takes them back."""
    from types import SimpleNamespace

    from corral.runtime.execution import ray_executor as rx

    class FakeRay:
        def __init__(self) -> None:
            self.away = False
            self.inits = 0

        def nodes(self) -> list[dict]:
            if self.away:
                raise ConnectionError("GCS unreachable")
            return [{"NodeID": "n1", "Alive": True}, {"NodeID": "n2", "Alive": True}]

        def shutdown(self) -> None:
            pass

        def init(self, **_: object) -> None:
            self.inits += 1

    executor = object.__new__(rx.RayExecutor)
    executor.ray = FakeRay()
    executor.settings = SimpleNamespace(address="10.0.0.1:6379", poll_interval=0.0)
    executor.namespace = "corral"
    executor.nodes = [rx.RayNode("a", "n1", "V100", 2, None), rx.RayNode("b", "n2", "K80", 2, None)]
    executor._head_group = None
    executor._checked = 0.0
    executor._lost_since = None
    executor._reason = {}
    executor._gone = set()
    executor._suspect = {}
    executor._left, executor._lost_since = False, None
    executor._head_checked, executor._head_was_away = 0.0, False
    executor._attempts = {}
    executor.state_dir = None
    monkeypatch.setattr(rx, "_reachable", lambda address: True)
    assert executor.watch() is False and executor.unavailable_nodes() == set()
    executor.ray.away = True
    assert executor.watch() is True
    assert executor.unavailable_nodes() == {"a", "b"}
    assert executor.unavailable_reason("a") == "the Ray cluster at 10.0.0.1:6379 cannot be reached"
    executor.watch()  # still away: it tries to connect again
    assert executor.ray.inits == 1
    executor.ray.away = False
    assert executor.watch() is True  # back: every node usable, no reason left
    assert executor.unavailable_nodes() == set() and executor.unavailable_reason("a") is None


def test_a_rank_whose_actor_ray_refuses_at_once_is_lost_and_the_poll_goes_on(tmp_path) -> None:
    """Ray may refuse a call to an actor it knows is dead when the call is made, not
    when its answer is awaited ("Failed to submit task to actor"): the poll must read
    that as the rank lost, as it does a failed answer. It raised out of the loop's
    pass instead, on every pass, while the attempt was never ended (found live: a
    raylet killed under a running job)."""
    from types import SimpleNamespace

    from corral.runtime.execution import ray_executor as rx
    from corral.runtime.execution.executor import ProcessRef

    class DeadActor:
        class status:  # (as Ray's method object is named)
            @staticmethod
            def remote(offset: int) -> object:
                raise Exception("Failed to submit task to actor: it might be dead")

    class FakeRay:
        def nodes(self) -> list[dict]:
            return [{"NodeID": "n1", "Alive": True}]

    executor = object.__new__(rx.RayExecutor)
    executor.ray = FakeRay()
    executor.settings = SimpleNamespace(address=None)  # (its own instance)
    executor.nodes = [rx.RayNode("a", "n1", "V100", 2, None)]
    executor._attempts = {}
    executor._gone = set()
    executor._suspect = {}
    executor._left, executor._lost_since = False, None
    executor._head_checked, executor._head_was_away = 0.0, False
    attempt = rx._Attempt("tok", [DeadActor()], ["n1"], [0], tmp_path, tmp_path / "log.txt")
    executor._attempts["tok"] = attempt
    record = executor.poll(ProcessRef(0, f"{rx.REF_PREFIX}tok:1"), tmp_path)
    assert record is not None and record.lost, record
    assert "rank 0 on node n1 lost" in (record.detail or ""), record
    assert "tok" not in executor._attempts  # ended and dropped: no pass asks it again


def test_a_node_a_rank_was_lost_on_is_not_used_until_ray_runs_work_there_again(
    tmp_path: Path,
) -> None:
    """A raylet killed under a running rank: the rank is lost at once, but Ray lists
    the node alive for a while yet, and the retry went to the same dead node and
    failed again. Now the node is out (with why) until a task pinned to it comes
    back, or Ray declares it gone. A test double for Ray: its ``nodes()``, ``wait``
    and ``get``, and a probe task whose answer the test decides."""
    from types import SimpleNamespace

    from corral.runtime.execution import ray_executor as rx
    from corral.runtime.execution.executor import ProcessRef

    class DeadActor:
        class status:
            @staticmethod
            def remote(offset: int) -> object:
                raise Exception("Failed to submit task to actor: it might be dead")

    class Probe:
        def __init__(self, fails: bool) -> None:
            self.fails = fails

    class FakeRay:
        def __init__(self) -> None:
            self.alive = {"n1", "n2"}
            self.sent: list[Probe] = []
            self.answers = True  # whether a probe sent now will come back
            self.ready = False

        def nodes(self) -> list[dict]:
            return [{"NodeID": n, "Alive": n in self.alive} for n in ("n1", "n2")]

        def wait(self, refs: list[Probe], timeout: float) -> tuple[list[Probe], list[Probe]]:
            return (refs, []) if self.ready else ([], refs)

        def get(self, ref: Probe, timeout: float) -> bool:
            if ref.fails:
                raise RuntimeError("the task's node died")
            return True

        def cancel(self, ref: Probe, force: bool) -> None:
            self.cancelled.append(ref)

    fake = FakeRay()
    fake.cancelled = []
    executor = object.__new__(rx.RayExecutor)
    executor.ray = fake
    executor.settings = SimpleNamespace(address="10.0.0.1:6379", poll_interval=5.0)
    executor.nodes = [
        rx.RayNode("a", "n1", "V100", 2, None),
        rx.RayNode("b", "n2", "V100", 2, None),
    ]
    executor._attempts, executor._gone, executor._suspect = {}, set(), {}
    executor._left, executor._lost_since = False, None
    executor._head_checked, executor._head_was_away = 0.0, False
    executor._head_group, executor._lost_since, executor._reason = None, None, {}
    executor._checked = 0.0
    executor._probe_task, executor._probed_at = None, {}
    executor._probe = lambda node_id: fake.sent.append(Probe(not fake.answers)) or fake.sent[-1]
    executor._attempts["tok"] = rx._Attempt(
        "tok", [DeadActor()], ["a"], [0], tmp_path, tmp_path / "log.txt"
    )
    record = executor.poll(ProcessRef(0, f"{rx.REF_PREFIX}tok:1"), tmp_path)
    assert record is not None and record.lost
    assert executor.unavailable_nodes() == {"a"}  # Ray still lists it alive: out all the same
    assert "until Ray confirms" in (executor.unavailable_reason("a") or "")
    executor._checked = rx.time.monotonic()  # (a look just made: a new suspect is probed now)
    assert executor.watch() is True and len(fake.sent) == 1  # the loop re-reads: a is out
    fake.answers, fake.ready = False, True
    fake.sent[0].fails = True  # its probe failed: asked again, still out
    executor._checked = 0.0
    assert executor.watch() is False and len(fake.sent) == 2
    assert executor.unavailable_nodes() == {"a"}
    fake.sent[1].fails = True  # failed too: a third is sent
    executor._checked = 0.0
    assert executor.watch() is False and len(fake.sent) == 3
    fake.ready = False  # the third is never answered (its worker never started)
    executor._checked = 0.0
    assert executor.watch() is False and len(fake.sent) == 3  # (patient a while)
    executor._probed_at["a"] -= rx.PROBE_PATIENCE  # long unanswered: sent again
    executor._checked = 0.0
    assert executor.watch() is False and len(fake.sent) == 4 and fake.cancelled == fake.sent[2:3]
    fake.ready = True
    fake.sent[3].fails = False  # the last one came back: Ray runs work there
    executor._checked = 0.0
    assert executor.watch() is True and executor.unavailable_nodes() == set()
    assert executor.unavailable_reason("a") is None

    executor._suspect["b"] = None  # a rank lost on b; then Ray declares b dead
    fake.alive = {"n1"}
    executor._checked = 0.0
    assert executor.watch() is True and executor.unavailable_nodes() == {"b"}
    assert executor._suspect == {} and executor.unavailable_reason("b") == "left the Ray cluster"


def test_a_node_that_returns_under_a_new_ray_id_takes_its_old_place(tmp_path: Path) -> None:
    """A worker whose raylet restarted joins Ray as a new node: the inventory keeps its
    name and GPU ids (once it was added as more GPUs and its old entry stayed down
    for ever); a node on another host, or with other GPUs, is a newcomer. The same
    on a restart of the service, from the recorded inventory."""
    from types import SimpleNamespace

    from corral.runtime.execution import ray_executor as rx

    def info(node_id: str, host: str, gpu_type: str, gpus: int) -> dict:
        return {
            "NodeID": node_id,
            "Alive": True,
            "NodeManagerHostname": host,
            "Resources": {"GPU": float(gpus), f"accelerator_type:{gpu_type}": float(gpus)},
        }

    class FakeRay:
        def __init__(self) -> None:
            self.listed = [info("aa" * 8, "h1", "V100", 2), info("bb" * 8, "h2", "K80", 2)]

        def nodes(self) -> list[dict]:
            return self.listed

    def executor_on(fake: FakeRay) -> rx.RayExecutor:
        executor = object.__new__(rx.RayExecutor)
        executor.ray = fake
        executor.settings = SimpleNamespace(
            address="10.0.0.1:6379", poll_interval=0.0, virtual_gpus=False
        )
        executor.state_dir = tmp_path
        executor._head_group = None
        executor._checked = 0.0
        executor._lost_since = None
        executor._reason = {}
        executor._suspect = {}
        executor._left, executor._lost_since = False, None
        executor._head_checked, executor._head_was_away = 0.0, False
        executor.nodes = executor._cluster_inventory()
        executor._gone = executor._unalive()
        return executor

    fake = FakeRay()
    executor = executor_on(fake)
    before = [(s.id, s.node, s.gpu_type) for s in executor.slots()]
    assert before == [(0, "h1-aaaaaaaa", "V100"), (1, "h1-aaaaaaaa", "V100"),
                      (2, "h2-bbbbbbbb", "K80"), (3, "h2-bbbbbbbb", "K80")]  # fmt: skip
    fake.listed = fake.listed[:1]  # h2's raylet dies
    assert executor.watch() is True and executor.unavailable_nodes() == {"h2-bbbbbbbb"}
    # it comes back under a new id, with a newcomer on h2 that has other GPUs
    fake.listed = [*fake.listed, info("cc" * 8, "h2", "K80", 2), info("dd" * 8, "h2", "A100", 1)]
    assert executor.watch() is True and executor.unavailable_nodes() == set()
    after = [(s.id, s.node, s.gpu_type) for s in executor.slots()]
    assert after == [*before, (4, "h2-dddddddd", "A100")]
    assert executor.node_of("h2-bbbbbbbb").node_id == "cc" * 8
    assert executor.node_of("h2-bbbbbbbb").devices == ["0", "1"]
    # a service started again reads the recorded inventory: the same GPUs, no more
    again = executor_on(fake)
    assert [(s.id, s.node, s.gpu_type) for s in again.slots()] == after
    # the host's node dies again and returns while the service is down
    fake.listed = [fake.listed[0], info("ee" * 8, "h2", "K80", 2), fake.listed[2]]
    third = executor_on(fake)
    assert [(s.id, s.node) for s in third.slots()] == [(i, n) for i, n, _ in after]
    assert third.node_of("h2-bbbbbbbb").node_id == "ee" * 8 and third.unavailable_nodes() == set()


def test_a_head_away_past_the_grace_is_left_and_joined_again_when_it_answers(
    monkeypatch, tmp_path: Path
) -> None:
    """With its GCS gone, Ray's driver ends its own process after 60 s, and Ray's
    calls wait meanwhile while every node looks alive (found live: a head killed, the
    node up and the job RUNNING for 60 s, then the service gone). The head's port is
    asked first: its nodes are down at once, no attempt is polled through Ray while
    it is away, the service leaves Ray after ``ray.leave_after`` seconds, and it joins again
    (finding ranks anew by name) once the head answers."""
    from types import SimpleNamespace

    from corral.runtime.execution import ray_executor as rx
    from corral.runtime.execution.executor import ProcessRef

    class FakeRay:
        def __init__(self) -> None:
            self.calls: list[str] = []

        def nodes(self) -> list[dict]:
            self.calls.append("nodes")
            return [{"NodeID": "n1", "Alive": True}]

        def shutdown(self) -> None:
            self.calls.append("shutdown")

        def init(self, **_: object) -> None:
            self.calls.append("init")

        def get_actor(self, name: str, namespace: str) -> object:
            raise ValueError(name)  # a new head: the ranks are gone

    clock = [1000.0]
    monkeypatch.setattr(rx.time, "monotonic", lambda: clock[0])
    head_up = [True]
    monkeypatch.setattr(rx, "_reachable", lambda address: head_up[0])
    executor = object.__new__(rx.RayExecutor)
    fake = FakeRay()
    executor.ray = fake
    executor.settings = SimpleNamespace(address="10.0.0.1:6379", poll_interval=0.0, leave_after=20)
    executor.namespace = "corral"
    executor.nodes = [rx.RayNode("a", "n1", "V100", 2, None)]
    executor._head_group = None
    executor._checked = 0.0
    executor._lost_since, executor._left = None, False
    executor._head_checked, executor._head_was_away = 0.0, False
    executor._reason, executor._gone, executor._suspect = {}, set(), {}
    executor._attempts = {"tok": object()}  # a running attempt's handles
    executor.state_dir = tmp_path
    assert executor.watch() is False and set(fake.calls) == {"nodes"}
    head_up[0] = False  # the head is killed
    fake.calls.clear()
    assert executor.watch() is True and executor.unavailable_nodes() == {"a"}
    assert fake.calls == []  # Ray was not asked: its calls would wait, nodes looking alive
    folder = tmp_path / "attempt-1"
    folder.mkdir()
    assert executor.poll(ProcessRef(0, f"{rx.REF_PREFIX}tok:1"), folder) is None
    clock[0] += 19
    assert executor.watch() is False and "shutdown" not in fake.calls
    clock[0] += 2  # away past the grace: the service leaves before Ray's driver ends it
    assert executor.watch() is False and fake.calls == ["shutdown"] and executor._left
    clock[0] += 300
    assert executor.watch() is False and fake.calls == ["shutdown"]  # waits, alive
    head_up[0] = True  # a new head answers: joined again, ranks found anew by name
    monkeypatch.setattr(executor, "_connect", lambda address, own=False: fake.calls.append("init"))
    assert executor.watch() is False and fake.calls == ["shutdown", "init"]
    fake.calls.clear()
    assert not executor._left and executor._attempts == {}
    assert executor.watch() is True and executor.unavailable_nodes() == set()
    gone = executor.poll(ProcessRef(0, f"{rx.REF_PREFIX}tok:1"), folder)
    assert gone is not None and gone.lost and "actor is gone" in (gone.detail or "")


def test_an_attempt_ray_is_slow_to_start_is_waited_for_without_holding_the_loop(
    tmp_path: Path,
) -> None:
    """A launch only asks Ray for the ranks' actors and starts (a new worker process
    each: over a minute on a loaded host, during which the loop placed nothing
    else): the polls then find them started, or not started in time, or failed.
    A test double for Ray: ``wait`` and ``get`` on start calls the test answers."""
    from types import SimpleNamespace

    from corral.runtime.execution import ray_executor as rx
    from corral.runtime.execution.executor import ProcessRef

    class Call:
        def __init__(self) -> None:
            self.done, self.error = False, None

    class Actor:
        killed = 0

        class status:
            @staticmethod
            def remote(offset: int) -> dict:
                return {"record": None, "output": b"", "offset": offset}

        class signal:
            @staticmethod
            def remote(sig: int) -> str:
                return "signalled"

    class FakeRay:
        def wait(self, refs: list, num_returns: int, timeout: float) -> tuple[list, list]:
            return [r for r in refs if r.done], [r for r in refs if not r.done]

        def get(self, ref: object, timeout: float) -> object:
            if isinstance(ref, Call) and ref.error:
                raise RuntimeError(ref.error)
            return ref

        def kill(self, actor: Actor, no_restart: bool) -> None:
            actor.killed += 1

    executor = object.__new__(rx.RayExecutor)
    executor.ray = FakeRay()
    executor.settings = SimpleNamespace(address=None)
    executor._attempts, executor._gone, executor._suspect = {}, set(), {}
    executor._left, executor._lost_since = False, None
    executor._head_checked, executor._head_was_away = 0.0, False

    def attempt(token: str, calls: list[Call]) -> tuple[list[Actor], Path]:
        folder = tmp_path / token
        folder.mkdir()
        actors = [Actor() for _ in calls]
        executor._attempts[token] = rx._Attempt(
            token, list(actors), ["a"] * len(calls), [0] * len(calls), folder,
            folder / "log.txt", starting=calls, launched=rx.time.monotonic(),
        )  # fmt: skip
        return actors, folder

    def poll(token: str, folder: Path, count: int):
        executor._attempts[token].checked = 0.0
        return executor.poll(ProcessRef(0, f"{rx.REF_PREFIX}{token}:{count}"), folder)

    calls = [Call(), Call()]
    actors, folder = attempt("slow", calls)
    assert poll("slow", folder, 2) is None  # still starting: no answer, no wait
    calls[0].done = True
    assert poll("slow", folder, 2) is None and executor._attempts["slow"].starting is calls
    calls[1].done = True
    assert poll("slow", folder, 2) is None  # started: now its ranks are asked
    assert executor._attempts["slow"].starting is None and not any(a.killed for a in actors)

    calls = [Call()]
    actors, folder = attempt("late", calls)
    executor._attempts["late"].launched -= rx.START_TIMEOUT
    record = poll("late", folder, 1)
    assert record is not None and record.lost
    assert record.detail == f"Ray could not start it: not started in {rx.START_TIMEOUT:.0f} s"
    assert actors[0].killed == 1 and "late" not in executor._attempts  # (its actor ended)

    calls = [Call()]
    actors, folder = attempt("gone", calls)
    executor._gone = {"a"}  # its node left before Ray answered the start
    record = poll("gone", folder, 1)
    assert record is not None and record.lost and actors[0].killed == 1
    assert record.detail == "Ray could not start it: node a left the Ray cluster"
    executor._gone = set()

    calls = [Call()]
    calls[0].done, calls[0].error = True, "the actor's node died\nmore lines"
    actors, folder = attempt("failed", calls)
    record = poll("failed", folder, 1)
    assert record is not None and record.lost
    assert record.detail == "Ray could not start it: the actor's node died"
    assert (folder / "exit.json").exists() and actors[0].killed == 1
