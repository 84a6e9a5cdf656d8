"""Setting up a simulation from names: the one path the CLI, benchmarks and docs use."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from corral.errors import CorralError
from corral.model.cluster import Cluster
from corral.model.jobs import JobTable
from corral.perf.locality import LocalityModel
from corral.perf.speeds import SpeedModel
from corral.perf.switching import switch_cost_seconds
from corral.perf.throughputs import ThroughputTable, gavel_throughputs
from corral.policies import checked_options, make_policy, options_of
from corral.policies.options import plain_number
from corral.sim.engine import Simulator
from corral.sim.presets import SIM_PRESETS
from corral.sim.result import SimConfig, SimResult, parse_failure_rates

if TYPE_CHECKING:
    from corral.sim.rounds.simulator import RoundResult


@dataclass
class RunSpec:
    policy: str
    placement: str | None = None
    """None: the policy's own default placement."""
    seed: int = 0
    switch_cost: str | float | None = None
    switch_profile: Path | None = None
    """The switching profile the ``measured`` switch costs read (None: the default)."""
    cross_node: float = 0.8
    cross_rack: float = 0.7
    check_invariants: bool = False
    policy_options: dict[str, Any] = field(default_factory=dict)
    measured_locality: bool = True
    """Locality slowdown from Pollux's measurements for the models it measured."""
    failure_rate: float = 0.0
    failure_rates: str | None = None
    """Chances by gang size (``1:0.05,2-4:0.1,9-:0.3``), over ``failure_rate``."""
    max_retries: int = 3
    preset: str | None = None
    """A named set of assumptions applied over the other fields (see SIM_PRESETS)."""
    profiles: ThroughputTable | None = None
    """Throughput measurements (None: the bundled Gavel table)."""
    label: str | None = None
    """What reports call the run (a variant's label: ``las[quantum=60]``); None:
    the policy's own name."""
    admission: str | None = None
    """An admission rule (``file.py:Class[key=value,...]``; None: every job admitted)."""
    mixed_sync: float = 0.9
    """Speed factor of a gang on more than one GPU type (see perf.speeds)."""
    charge_first_start: bool = False
    """Charge the switch cost at first starts too (see SimConfig)."""
    decide_every: float = 0.0
    """Seconds between passes on a fixed grid (0: at events; see SimConfig)."""

    def __post_init__(self) -> None:
        if self.preset is None:
            return
        if self.preset not in SIM_PRESETS:
            raise CorralError(
                f"unknown preset '{self.preset}' (choose from {', '.join(SIM_PRESETS)})"
            )
        if self.preset == "pollux-sim":
            self._pollux_artifact()
            return
        self.placement = "count"
        self.cross_node = self.cross_rack = 1.0
        self.measured_locality = False
        self.switch_cost = 0.0
        defaults: dict[str, Any] = {}
        if self.preset == "gavel-sim":
            # Gavel's workers are of one type: a gang never spans types there (counting
            # GPUs anywhere gave FIFO's 4-GPU jobs K80s beside V100s, at the K80's pace)
            self.placement = "count-one-type"
            if self.policy.startswith("gavel"):
                defaults = {"round": 360.0, "fill_between_rounds": 0, "reset_window": 1920.0}
        elif self.policy.startswith("tiresias"):
            defaults = {
                "queues": 3,
                "thresholds": "3250,7200,18000",
                "queue_order": "list",
                "demotion_wakeup": "run-time",
            }
            if self.policy == "tiresias-gittins":
                defaults |= {
                    "distribution": "yarn-gput1000",
                    "delta": 3250.0,
                    "ties": "fifo",
                    "index_table": "stepped",
                }
        self.policy_options = defaults | self.policy_options

    def _pollux_artifact(self) -> None:
        """How Pollux's artifact simulates its workloads: a pass every 60 s (arrivals
        and freed GPUs wait for it), 30 s without progress at every allocation, first
        starts included; Pollux's jobs submitted at their model's smallest trained
        batch; its Tiresias with two queues, a job moving down after 16 GPU-hours.
        Placement and the locality slowdown stay the policy's and the
        communication model's (the artifact interpolates Pollux's measured step times)."""
        self.switch_cost = 30.0
        self.charge_first_start = True
        self.decide_every = 60.0
        defaults: dict[str, Any] = {}
        if self.policy == "pollux":
            defaults = {"initial_batch": "model"}
        elif self.policy.startswith("tiresias"):
            defaults = {"queues": 2, "thresholds": "57600"}
            if self.policy == "tiresias-las":
                defaults["queue_order"] = "strict"
        self.policy_options = defaults | self.policy_options

    def config(self) -> SimConfig:
        return SimConfig(
            switch_cost=switch_cost_seconds(self.switch_cost, self.switch_profile),
            charge_first_start=self.charge_first_start,
            decide_every=self.decide_every,
            speeds=SpeedModel(
                self.profiles if self.profiles is not None else gavel_throughputs(),
                LocalityModel(self.cross_node, self.cross_rack, self.measured_locality),
                self.mixed_sync,
            ),
            check_invariants=self.check_invariants,
            failure_rate=self.failure_rate,
            failure_rates=parse_failure_rates(self.failure_rates or ""),
            max_retries=self.max_retries,
            seed=self.seed,
        )


def parse_policy_options(pairs: list[str], policy: str) -> dict[str, Any]:
    """``key=value`` or ``policy.key=value`` pairs that apply to ``policy``.

    A bare key applies to every policy that takes it; values are numbers where
    they parse as numbers.
    """
    accepted = set(options_of(policy))
    out: dict[str, Any] = {}
    for pair in pairs:
        target, name, value = option_pair(pair)
        if target and target != policy:
            continue
        if not target and name not in accepted:
            continue
        out[name] = plain_number(value)
    return out


def option_pair(pair: str) -> tuple[str, str, str]:
    """(policy or "", option, value) from ``key=value`` or ``policy.key=value``."""
    key, eq, value = pair.partition("=")
    if not eq or not key.strip():
        raise CorralError(f"--policy-opt '{pair}': expected key=value or policy.key=value")
    target, _, name = key.strip().rpartition(".")
    return target, name, value.strip()


def check_policy_options(pairs: list[str], policies: list[str]) -> None:
    """Refuse an option no policy of the run takes: a misspelled option must never
    leave an experiment silently at its defaults. A bare ``key=value`` must be taken
    by at least one of ``policies``; ``policy.key=value`` names a policy of the run
    and one of its options."""
    from corral.policies import unknown_option

    taken = {name: options_of(name) for name in policies}
    for pair in pairs:
        target, name, _ = option_pair(pair)
        if target:
            if target not in taken:
                raise CorralError(
                    f"--policy-opt '{pair}': '{target}' is not a policy of this run "
                    f"({', '.join(policies)})"
                )
            if name not in taken[target]:
                raise CorralError(
                    f"--policy-opt '{pair}': {unknown_option(target, name, taken[target])}"
                )
        elif not any(name in options for options in taken.values()):
            if len(policies) == 1:
                why = unknown_option(policies[0], name, taken[policies[0]])
            else:
                import difflib

                every = sorted({o for options in taken.values() for o in options})
                near = difflib.get_close_matches(name, every, n=1)
                why = f"no policy of this run ({', '.join(policies)}) has an option '{name}'"
                why += f"; did you mean '{near[0]}'?" if near else ""
            raise CorralError(f"--policy-opt '{pair}': {why}")
    for policy in policies:  # values too, before any run starts
        try:
            checked_options(policy, parse_policy_options(pairs, policy))
        except CorralError as exc:
            raise CorralError(f"--policy-opt: {exc}") from None


def simulate(
    jobs: JobTable,
    cluster: Cluster,
    spec: RunSpec,
    progress: Callable[[int, int], None] | None = None,
) -> SimResult:
    policy = make_policy(
        spec.policy, spec.placement, spec.seed, spec.admission, **spec.policy_options
    )
    return Simulator(jobs, cluster, policy, spec.config(), progress).run()


def simulate_rounds(jobs: JobTable, cluster: Cluster, spec: RunSpec) -> RoundResult:
    """Run a round-model planner (hare, sched-allox, sched-homo) on the workload."""
    from corral.policies.rounds.planners import ROUND_PLANNERS
    from corral.policies.rounds.workload import build_workload
    from corral.sim.rounds.simulator import RoundSimulator

    cls = ROUND_PLANNERS[spec.policy]
    if spec.admission is not None:
        raise CorralError(f"policy '{spec.policy}' plans rounds: it takes no --admission")
    if spec.decide_every or spec.charge_first_start:
        raise CorralError(
            f"policy '{spec.policy}' plans rounds of its own: --preset {spec.preset} (passes on "
            "a fixed grid, a charge at first starts) is for policies that decide at events"
        )
    try:
        planner = cls(**checked_options(spec.policy, spec.policy_options))
    except TypeError as exc:
        raise CorralError(f"policy '{spec.policy}': {exc}") from None
    config = spec.config()
    work = build_workload(jobs, cluster, config.speeds)
    result = RoundSimulator(work, planner, config.switch_cost).run()
    if spec.check_invariants:
        result.check()
    return result
