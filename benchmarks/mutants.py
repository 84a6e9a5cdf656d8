"""The fault schedules scored by the bugs they catch: each mutant is a small, named
change to the live loop (a realistic bug, one or more per rule of the outcome
oracle and of the invariants), applied to a scratch copy of the package; the
schedules of :mod:`corral.testing.fault_schedules` then run on that copy, seed
after seed, until one breaks a rule or the seeds run out.

    python benchmarks/mutants.py              # every mutant, 40 seeds of each policy
    python benchmarks/mutants.py --only retries-one-more --seeds 50

Each mutant's line says the seed and policy that caught it and what broke; the last
line is ``K of N mutants caught``. Exits 1 unless every mutant was caught.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "corral"
LOOP = "runtime/loop"


@dataclass(frozen=True)
class Mutant:
    """One bug: in ``file`` (under the package), ``old`` (found exactly once) becomes ``new``."""

    name: str
    rule: str
    file: str
    old: str
    new: str
    policies: tuple[str, ...] = ("tiresias-las", "fifo")


MUTANTS = [
    Mutant(
        "held-at-submission-starts",
        "held",
        f"{LOOP}/transitions.py",
        "if row.status != JobStatus.SUSPENDED and row.held is None:",
        "if row.status != JobStatus.SUSPENDED:",
    ),
    Mutant(
        "hold-not-kept-from-the-policy",
        "held",
        f"{LOOP}/transitions.py",
        "        self.loop.book.hold(row.id)\n        row.held, row.reason = holder",
        "        row.held, row.reason = holder",
    ),
    Mutant(
        "retries-one-more",
        "retries",
        f"{LOOP}/transitions.py",
        "row.failures > spec.max_retries",
        "row.failures > spec.max_retries + 1",
    ),
    Mutant(
        "afterok-met-by-a-failure",
        "dependency",
        f"{LOOP}/queueing.py",
        "if ended and state != JobStatus.SUCCEEDED:",
        "if False:",
    ),
    Mutant(
        "afterany-met-at-its-start",
        "dependency",
        f"{LOOP}/queueing.py",
        'if kind == "afterany" and not ended:',
        'if kind == "afterany" and not (ended or started):',
    ),
    Mutant(
        "begin-time-ahead-again-ignored",
        "dependency",
        f"{LOOP}/queueing.py",
        "        changed = self.begins_ahead_again(now)\n",
        "        changed = False\n",
    ),
    Mutant(
        "singleton-ignored",
        "dependency",
        f"{LOOP}/queueing.py",
        "        if waiting.singleton is not None:\n            user, name",
        "        if False:\n            user, name",
    ),
    Mutant(
        "begin-time-ignored",
        "dependency",
        f"{LOOP}/queueing.py",
        "begin=spec.begin or 0.0,",
        "begin=0.0,",
    ),
    Mutant(
        "throttle-plus-one",
        "throttle",
        f"{LOOP}/queueing.py",
        "if in_flight[array] >= waiting.limit:",
        "if in_flight[array] > waiting.limit:",
    ),
    Mutant(
        "wall-time-doubled",
        "wall time",
        f"{LOOP}/transitions.py",
        "if a.wall_limit is not None and a.ran_for(now) >= a.wall_limit:",
        "if a.wall_limit is not None and a.ran_for(now) >= 2 * a.wall_limit:",
    ),
    Mutant(
        "wall-time-halved",
        "wall time",
        f"{LOOP}/transitions.py",
        "if a.wall_limit is not None and a.ran_for(now) >= a.wall_limit:",
        "if a.wall_limit is not None and a.ran_for(now) >= a.wall_limit / 2:",
    ),
    Mutant(
        "cancel-of-a-running-job-not-carried-out",
        "cancel",
        f"{LOOP}/transitions.py",
        '                if a is not None:\n                    stops.append((a, "cancel"))',
        "                if a is not None:\n                    pass",
    ),
    Mutant(
        "request-written-in-a-pass-cleared-unread",
        "cancel (a race)",
        f"{LOOP}/transitions.py",
        ".where(JobRow.id.in_(ids), JobRow.request == request)",
        ".where(JobRow.request.is_not(None))",
    ),
    Mutant(
        "exit-code-1-succeeds",
        "command",
        "runtime/execution/exits.py",
        'if code == 0 and stop != "hung":',
        'if code in (0, 1) and stop != "hung":',
    ),
    Mutant(
        "user-cap-forgets-leaving-attempts",
        "limits",
        f"{LOOP}/user_limits.py",
        "        for job, a in self.loop.attempts.items():\n            k = self.loop.live",
        "        for job, a in {}.items():\n            k = self.loop.live",
    ),
    Mutant(
        "checkpoint-forgotten-at-preemption",
        "checkpoint",
        f"{LOOP}/transitions.py",
        "                rec.preempted = True\n                if ours:",
        "                rec.preempted = True\n                row.checkpoint_step = None\n"
        "                if ours:",
        ("las", "tiresias-las"),
    ),
    Mutant(
        "end-event-without-its-cause",
        "history",
        f"{LOOP}/transitions.py",
        "                attempt=a.number,\n                cause=cause.value,",
        "                attempt=a.number,\n                cause=a.stop,",
    ),
    Mutant(
        "second-launch-when-the-pid-was-never-stored",
        "crash inside a pass",
        f"{LOOP}/recovery.py",
        "else self.loop.executor.pid_from(Path(att.dir))",
        "else None",
    ),
    Mutant(
        "request-for-an-ended-job-carried-out",
        "transitions (strict)",
        f"{LOOP}/transitions.py",
        "if i is None or row.status in TERMINAL:\n                return",
        "if i is None:\n                return",
    ),
    Mutant(
        "drained-node-kept-in-use",
        "drain",
        f"{LOOP}/recovery.py",
        "        drained |= gone\n",
        "        drained = set(gone)\n",
    ),
    Mutant(
        "second-stop-puts-the-kill-off",
        "wall time",
        f"{LOOP}/stops.py",
        "a.kill_at = now + grace if a.kill_at is None else min(a.kill_at, now + grace)",
        "a.kill_at = now + grace",
        ("gandiva", "tiresias-las"),
    ),
    Mutant(
        "paused-time-forgotten-at-a-restart",
        "wall time",
        f"{LOOP}/recovery.py",
        "since, a.paused_total, a.warned = histories.get((a.job, a.number), (None, 0.0, False))",
        "since, _, a.warned = histories.get((a.job, a.number), (None, 0.0, False))",
        ("gandiva",),
    ),
    Mutant(
        "returning-task-skips-its-throttle",
        "throttle",
        f"{LOOP}/queueing.py",
        "if holds and (row.first_start is None or waiting.limit):",
        "if holds and row.first_start is None:",
        ("gandiva", "tiresias-las"),
    ),
    Mutant(
        "leavers-all-resumed-at-once",
        "structure",
        f"{LOOP}/sharing.py",
        "        if beside < SHARED_MOST:",
        "        if True:",
        ("gandiva",),
    ),
    Mutant(
        "grown-job-counted-at-its-ask",
        "limits",
        f"{LOOP}/user_limits.py",
        "counted[int(i)] = len(alloc) if alloc else int(st.gpus[i])",
        "counted[int(i)] = int(st.gpus[i])",
        ("pollux",),
    ),
    Mutant(
        "guest-launched-beside-a-leaving-guest",
        "structure",
        f"{LOOP}/launching.py",
        "    def _guest_leaving(self, job: int, host: int) -> bool:\n",
        "    def _guest_leaving(self, job: int, host: int) -> bool:\n        return False\n",
        ("gandiva",),
    ),
    Mutant(
        "packed-onto-a-drained-node",
        "drain",
        f"{LOOP}/scheduler.py",
        "        self._keep_off_drained(plan)\n",
        "",
        ("gandiva",),
    ),
    Mutant(
        "resume-of-a-held-job-starts-it",
        "held",
        f"{LOOP}/transitions.py",
        "elif row.status == JobStatus.SUSPENDED and row.held is not None:",
        "elif False:",
    ),
    Mutant(
        "warm-cap-forgotten-at-a-cold-start",
        "warm workers",
        f"{LOOP}/launching.py",
        "warm_most=self.warm_cap(row.user),",
        "warm_most=None,",
    ),
    Mutant(
        "warm-ahead-past-the-cap",
        "warm workers",
        f"{LOOP}/warm_ahead.py",
        "self._start(run_as, g, cap)",
        "self._start(run_as, g, None)",
    ),
    Mutant(
        "job-launched-as-the-service",
        "identity",
        f"{LOOP}/launching.py",
        "run_as = self.loop.identities.get(row.user)",
        "run_as = None",
    ),
    Mutant(
        "guest-taken-for-the-holder-at-a-restart",
        "sharing",
        f"{LOOP}/recovery.py",
        "key=lambda j: (j in packed, packed.get(j, 0), j)",
        "key=lambda j: j",
        ("gandiva",),
    ),
    Mutant(
        "gpus-never-freed",
        "structure",
        f"{LOOP}/transitions.py",
        "            if self.loop.holders.get(g) == a.job:\n"
        "                del self.loop.holders[g]\n"
        "        self.sharing.unpair(a.job, now)",
        "            pass\n        self.sharing.unpair(a.job, now)",
    ),
    Mutant(
        "cpu-jobs-not-counted",
        "cpus",
        f"{LOOP}/cpu_jobs.py",
        "            elif need_cpus <= free_cpus and need_memory <= free_memory:",
        "            elif True:",
    ),
    Mutant(
        "cpu-jobs-shown-to-the-policy",
        "cpus",
        f"{LOOP}/scheduler.py",
        "            with self.cpu_jobs.hidden():",
        "            with threading.Lock():  # (a context that hides nothing)",
    ),
    Mutant(
        "vc-gpu-cap-off-by-one",
        "limits",
        f"{LOOP}/user_limits.py",
        "if vc in limits.vc_gpus and held + size > limits.vc_gpus[vc]:",
        "if vc in limits.vc_gpus and held + size > limits.vc_gpus[vc] + 1:",
    ),
    Mutant(
        "vc-running-cap-ignored",
        "limits",
        f"{LOOP}/user_limits.py",
        "if vc in limits.vc_running and running + 1 > limits.vc_running[vc]:",
        "if False:",
    ),
    Mutant(
        "gang-layout-forgotten",
        "gang",
        f"{LOOP}/live_state.py",
        "        st.nodes_req[i] = nodes\n",
        "        st.nodes_req[i] = 0\n",
    ),
    Mutant(
        "next-round-before-its-round-ends",
        "rounds",
        f"{LOOP}/round_jobs.py",
        "if len(current) < spec.gpus or any(t.status != JobStatus.SUCCEEDED for t in current):",
        "if len(current) < spec.gpus or all(t.status != JobStatus.SUCCEEDED for t in current):",
        ("hare",),
    ),
    Mutant(
        "last-round-skipped",
        "rounds",
        f"{LOOP}/round_jobs.py",
        "        if latest + 1 >= rounds:",
        "        if latest + 2 >= rounds:",
        ("hare",),
    ),
]

RUNNER = """
import sys
import corral
assert corral.__file__.startswith(sys.argv[1]), corral.__file__
from corral.testing.fault_schedules import run_seed
first, last, policies = int(sys.argv[2]), int(sys.argv[3]), sys.argv[4].split(",")
skip = set(sys.argv[5].split(",")) if len(sys.argv) > 5 else set()
for seed in range(first, last):
    for policy in policies:
        if f"{seed}:{policy}" in skip:
            continue
        broke = run_seed(policy, seed)
        if broke is not None:
            print(f"caught {seed} {policy} {broke}")
            sys.exit(0)
print("missed")
"""
"""Runs seeds ``first`` to ``last`` - 1 of each policy on the package at ``argv[1]``
(but the ``seed:policy`` pairs of ``argv[5]``); prints the first that breaks a rule
(``caught SEED POLICY what``), else ``missed``."""


def _run(
    src: Path, first: int, last: int, policies: str, timeout: float, skip: str = ""
) -> list[str]:
    """The runner's verdict lines, on the package copied to ``src``."""
    env = {"PYTHONPATH": str(src), "PATH": "/usr/bin:/bin", "PYTHONDONTWRITEBYTECODE": "1"}
    done = subprocess.run(
        [sys.executable, "-c", RUNNER, str(src), str(first), str(last), policies, skip],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith(("caught", "missed"))]
    if not lines:
        tail = done.stderr.strip().splitlines()[-1:] or ["no output"]
        return [f"error: {tail[0]}"]
    return lines


def run_mutant(mutant: Mutant, seeds: int, timeout: float) -> tuple[Mutant, str, float]:
    """(mutant, what happened, seconds): ``caught SEED POLICY what``, ``missed`` or an
    error. A seed counts only if the code without the mutant holds it: a seed that
    breaks a rule either way (a defect of the loop or of the harness not yet
    mended) is passed over, and the search goes on from the next seed (it is named
    in the verdict)."""
    began = time.perf_counter()
    passed_over: list[str] = []
    with tempfile.TemporaryDirectory(prefix="corral-mutant-") as scratch:
        src, clean = Path(scratch) / "src", Path(scratch) / "clean"
        shutil.copytree(PACKAGE, src / "corral", ignore=shutil.ignore_patterns("__pycache__"))
        shutil.copytree(PACKAGE, clean / "corral", ignore=shutil.ignore_patterns("__pycache__"))
        path = src / "corral" / mutant.file
        text = path.read_text()
        if text.count(mutant.old) != 1:
            found = text.count(mutant.old)
            return mutant, f"not applied: its text is found {found} times in {mutant.file}", 0.0
        path.write_text(text.replace(mutant.old, mutant.new))
        first, policies = 0, ",".join(mutant.policies)
        while True:
            left = timeout - (time.perf_counter() - began)
            try:
                skip = ",".join(p.replace(" ", ":") for p in passed_over)
                verdict = _run(src, first, seeds, policies, max(left, 1.0), skip)[-1]
                if not verdict.startswith("caught"):
                    break
                seed, policy = verdict.split()[1:3]
                again = _run(clean, int(seed), int(seed) + 1, policy, max(left, 1.0))[-1]
            except subprocess.TimeoutExpired:
                verdict = f"missed: not caught within {timeout:.0f} s"
                break
            if again == "missed":
                break
            passed_over.append(f"{seed} {policy}")
            first = int(seed)
            verdict = "missed"
    if passed_over:
        verdict += f" (passed over, broken without the mutant too: {', '.join(passed_over)})"
    return mutant, verdict, time.perf_counter() - began


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=40, help="seeds per policy (default 40)")
    parser.add_argument("--only", action="append", help="run this mutant (repeatable)")
    parser.add_argument("--jobs", type=int, default=2, help="mutants run at once")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per mutant")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if not args.only or m.name in args.only]
    if args.list:
        for m in chosen:
            print(f"{m.name:48} {m.rule:24} {m.file}")
        return 0
    caught = 0
    with ThreadPoolExecutor(args.jobs) as pool:
        for mutant, what, seconds in pool.map(
            lambda m: run_mutant(m, args.seeds, args.timeout), chosen
        ):
            ok = what.startswith("caught")
            caught += ok
            print(f"{mutant.name:48} [{mutant.rule}] {what} ({seconds:.0f} s)", flush=True)
    print(f"{caught} of {len(chosen)} mutants caught")
    return 0 if caught == len(chosen) else 1


if __name__ == "__main__":
    sys.exit(main())
