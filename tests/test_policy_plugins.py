"""A policy from outside the project: given as ``file.py:Class`` or
``module:Class``, or declared by an installed package's ``corral.policies``
entry point, it runs in ``corral compare`` and in the live service with its
declared options checked. The policy is the guide's example
(``examples/policies/shortest_first.py``, ``docs/writing-a-policy.md``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from corral.cli.app import app
from corral.errors import CorralError
from corral.policies import POLICIES, make_policy, options_of
from tests.runtime.harness import PY, Harness

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "policies" / "shortest_first.py"
SPEC = f"{EXAMPLE}:ShortestFirst"


def test_the_guide_policy_runs_in_compare_from_its_own_file(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app,
        [
            "compare", "--trace", "philly", "--max-jobs", "300", "--cluster", "philly",
            "--cluster-scale", "0.17", "--policies", f"fifo,{SPEC}",
            "--policy-opt", "max_wait=7200", "--out", str(tmp_path),
        ],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    summary = json.loads((tmp_path / "shortest-first" / "summary.json").read_text())
    fifo = json.loads((tmp_path / "fifo" / "summary.json").read_text())
    assert summary["jobs_finished"] == fifo["jobs_finished"] == 300
    assert summary["avg_jct_s"] < fifo["avg_jct_s"]  # short jobs no longer wait behind long
    typo = CliRunner().invoke(
        app,
        ["sim", "--trace", "philly", "--max-jobs", "50", "--policy", SPEC,
         "--policy-opt", "max_wiat=5", "--out", str(tmp_path / "typo")],
    )  # fmt: skip
    assert typo.exit_code != 0 and "did you mean 'max_wait'" in str(typo.exception)


def test_bad_plugins_are_named_errors() -> None:
    with pytest.raises(CorralError, match="cannot import no_such_module"):
        make_policy("no_such_module:Policy")
    with pytest.raises(CorralError, match="has no Policy subclass named Nope"):
        make_policy(f"{EXAMPLE}:Nope")
    with pytest.raises(CorralError, match="no file"):
        make_policy("/nowhere/policy.py:Thing")
    assert options_of(SPEC) == ["max_wait"]
    # a plugin's declared options are checked as the built-in policies' are
    with pytest.raises(CorralError, match=r"option 'max_wait' must be a number > 0, got -5"):
        make_policy(SPEC, max_wait=-5)


def test_an_installed_package_declares_its_policy_by_entry_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "lab_policies.py").write_text(EXAMPLE.read_text())
    info = tmp_path / "lab_policies-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: lab-policies\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[corral.policies]\nlab-shortest = lab_policies:ShortestFirst\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    assert "lab-shortest" in list(POLICIES)
    policy = make_policy("Lab-Shortest", max_wait=60)
    assert type(policy).__name__ == "ShortestFirst" and policy.max_wait == 60  # type: ignore[attr-defined]


def test_the_guide_policy_schedules_live_shortest_first(tmp_path: Path) -> None:
    h = Harness(
        tmp_path / "state",
        policy=SPEC,
        policy_options={"max_wait": 3600},
        gpus=[{"type": "V100", "count": 1}],
    )
    try:
        sleep = [PY, "-c", "import time; time.sleep(2)"]
        blocker = h.submit(command=sleep, duration=2)
        h.wait_state(blocker["id"], {"RUNNING"})
        long = h.submit(command=[PY, "-c", "pass"], duration=600)
        short = h.submit(command=[PY, "-c", "pass"], duration=5)
        done = h.wait_done([blocker["id"], long["id"], short["id"]], 60)
        assert [j["status"] for j in done] == ["SUCCEEDED"] * 3
        assert done[2]["first_start"] < done[1]["first_start"]  # the short one went first
    finally:
        h.close()


def test_a_service_config_refuses_a_plugin_that_does_not_load(tmp_path: Path) -> None:
    from corral.runtime.jobspec.config import load_config

    config = tmp_path / "corral.yaml"
    config.write_text(
        "policy: no_such_module:Policy\n"
        "policy_options: {max_wait: 5}\n"
        "gpus: [{type: V100, count: 1}]\n"
        "users: [{name: alice, token: alice-token-1}]\n"
    )
    with pytest.raises(CorralError, match="cannot import no_such_module"):
        load_config(config)


def test_the_guides_code_blocks_make_the_example_policy(tmp_path: Path) -> None:
    """The guide's three blocks, in order, are a file that runs (their imports
    included), and the same class as the example file."""
    import re

    guide = (EXAMPLE.parents[2] / "docs" / "writing-a-policy.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", guide, re.S)[:3]
    (tmp_path / "guide_policy.py").write_text("\n".join(blocks))
    spec = f"{tmp_path / 'guide_policy.py'}:ShortestFirst"
    described = CliRunner().invoke(app, ["policies", spec])
    assert described.exit_code == 0, described.output
    assert "max_wait" in described.output and "3600" in described.output
    ran = CliRunner().invoke(
        app,
        ["sim", "--trace", "philly", "--max-jobs", "200", "--cluster", "philly",
         "--cluster-scale", "0.17", "--policy", spec, "--out", str(tmp_path / "run")],
    )  # fmt: skip
    assert ran.exit_code == 0, ran.output
    for code in blocks:  # each block is the example's own text
        body = "\n".join(line for line in code.splitlines() if line.strip())
        assert all(line in EXAMPLE.read_text() for line in body.splitlines()), body


def test_corral_policies_describes_a_policy_given_by_file() -> None:
    result = CliRunner().invoke(app, ["policies", SPEC, "--json"])
    assert result.exit_code == 0, result.output
    row = json.loads(result.output)
    assert row["name"] == SPEC and row["options"] == {"max_wait": 3600.0}
    missing = CliRunner().invoke(app, ["policies", "/nowhere/policy.py:Thing"])
    assert missing.exit_code != 0 and "no file" in str(missing.exception or missing.output)


LP_EXAMPLE = EXAMPLE.parent / "floor_throughput.py"


def test_the_lp_example_keeps_its_constraints_and_runs_in_compare(tmp_path: Path) -> None:
    """The guide's LP policy: every allocation it solves keeps each job to at most
    all of the time, each type's GPUs to its capacity, and each job that fits
    somewhere to its floor; in ``compare`` it runs beside Gavel's own with the
    engine's invariants checked."""
    import numpy as np

    from corral.model.cluster_specs import load_cluster
    from corral.sim.engine import Simulator
    from corral.sim.result import SimConfig
    from corral.traces.gavel_synthetic import GavelWorkload, generate_gavel

    policy = make_policy(f"{LP_EXAMPLE}:FloorThroughput", floor=0.8)
    solved: list[np.ndarray] = []
    allocate = type(policy).allocate

    def checked(self, state, jobs):  # type: ignore[no-untyped-def]
        x = allocate(self, state, jobs)
        problem = self._problem(state, jobs)
        assert (x.sum(axis=1) <= 1 + 1e-6).all()
        assert (problem.gpus @ x <= problem.capacity + 1e-6).all()
        isolated = problem.isolated_throughput()
        normalised = (problem.throughput * x).sum(axis=1)
        runs = isolated > 0
        assert (normalised[runs] >= 0.8 * isolated[runs] - 1e-6).all()
        solved.append(x)
        return x

    type(policy).allocate = checked  # type: ignore[method-assign]
    try:
        jobs = generate_gavel(GavelWorkload.parse("jobs=30,rate=20", seed=0))
        config = SimConfig(check_invariants=True)
        result = Simulator(jobs, load_cluster("gavel:4:4:4"), policy, config).run()
    finally:
        type(policy).allocate = allocate  # type: ignore[method-assign]
    assert solved and (result.state.finish_time == result.state.finish_time).all()
    ran = CliRunner().invoke(
        app,
        ["compare", "--trace", "gavel-synthetic:jobs=30,rate=20", "--cluster", "gavel:4:4:4",
         "--policies", f"gavel-max-min-fairness,{LP_EXAMPLE}:FloorThroughput[floor=0.5]",
         "--check", "--parallel", "1", "--out", str(tmp_path)],
    )  # fmt: skip
    assert ran.exit_code == 0, ran.output
    summary = json.loads((tmp_path / "floor-throughput-floor-0.5" / "summary.json").read_text())
    assert summary["jobs_finished"] == 30


def test_the_lp_example_schedules_in_the_live_loop(tmp_path: Path) -> None:
    """The LP policy from its file, in the service's own loop (virtual time, the real
    loop and store) on two GPU types: every job ends, and the loop records no
    policy error."""
    from corral.runtime.jobspec.config import GpuGroup
    from corral.runtime.storage.store import EventRow
    from tests.runtime.virtual_loop import virtual_loop

    loop = virtual_loop(
        tmp_path,
        f"{LP_EXAMPLE}:FloorThroughput",
        gpus=[GpuGroup(type="V100", count=2), GpuGroup(type="K80", count=2)],
        policy_options={"floor": 0.5, "round": 5},
    )
    try:
        ids = [loop.queue(command=["sleep", str(3 + k)], gpus=1 + k % 2) for k in range(6)]
        loop.run(200)
        assert [loop.row(j).status for j in ids] == ["SUCCEEDED"] * 6
        with loop.store.session() as s:
            assert not s.query(EventRow).filter(EventRow.kind == "policy_error").count()
    finally:
        loop.close()


def test_a_file_policys_options_can_be_addressed_by_its_name(tmp_path: Path) -> None:
    """``--policy-opt shortest-first.max_wait=60`` (the class's name, not its path)
    reaches the policy in ``sim`` as in ``compare``: checked, applied and recorded."""
    common = ["--trace", "philly", "--max-jobs", "200", "--cluster", "philly",
              "--cluster-scale", "0.17", "--no-progress"]  # fmt: skip
    for verb, which in (("sim", "--policy"), ("compare", "--policies")):
        out = tmp_path / verb
        ran = CliRunner().invoke(
            app,
            [verb, *common, which, SPEC, "--policy-opt", "shortest-first.max_wait=60",
             "--out", str(out)],
        )  # fmt: skip
        assert ran.exit_code == 0, ran.output
        record = json.loads((out / "provenance.json").read_text())
        assert record["policy_options"]["shortest-first"]["max_wait"] == 60
    wrong = CliRunner().invoke(
        app, ["sim", *common, "--policy", SPEC, "--policy-opt", "shortest-first.max_wiat=60",
              "--out", str(tmp_path / "x")],
    )  # fmt: skip
    assert wrong.exit_code != 0 and "max_wait" in str(wrong.exception)
