"""AntMan's dynamic memory scaling, live: an opportunistic job packed beside a
guaranteed one gets, at each heartbeat, the share of GPU memory the guaranteed
job's last heartbeat leaves (less a margin), growing and shrinking with it."""

from __future__ import annotations

import os
from pathlib import Path

from corral.perf.memory import MEMORY_MARGIN
from corral.testing.service_process import ServiceProcess, wait_for
from tests.runtime.harness import PY, TERMINAL, TOKENS

GB = 1e9
V100 = 16.0  # GB, corral.perf.memory's figure for the type


def owner(memory_file: Path) -> list[str]:
    """A guaranteed job reporting the peak GPU memory written in ``memory_file``."""
    script = (
        "import pathlib, time\n"
        "from corral.train import Session\n"
        "s = Session()\n"
        "for step in range(1, 100000):\n"
        f"    s.report(step, gpu_memory=float(pathlib.Path({str(memory_file)!r}).read_text()))\n"
        "    time.sleep(0.05)\n"
    )
    return [PY, "-c", script]


def watcher(out: Path) -> list[str]:
    """A job writing its OS priority and memory cap each time either changes
    (whole, by rename, so a reader never sees the file empty mid-write)."""
    script = (
        "import os, time\n"
        "from corral.train import Session\n"
        "s = Session()\n"
        "seen = []\n"
        "for step in range(1, 100000):\n"
        "    s.report(step)\n"
        "    now = f'{os.nice(0)}:{s.memory_fraction}'\n"
        "    if not seen or now != seen[-1]:\n"
        "        seen.append(now)\n"
        f"        open({str(out)!r} + '.tmp', 'w').write(' '.join(seen))\n"
        f"        os.replace({str(out)!r} + '.tmp', {str(out)!r})\n"
        "    time.sleep(0.05)\n"
    )
    return [PY, "-c", script]


def antman(tmp_path: Path, v100s: int) -> ServiceProcess:
    """A service running AntMan on V100s, with one VC owed one GPU."""
    return ServiceProcess(
        tmp_path,
        "antman",
        users=TOKENS,
        gpus=[{"type": "V100", "count": v100s}],
        vcs={"research": 1},
        stop_grace=5,
    )


def test_an_opportunistic_jobs_memory_cap_follows_its_partners_use(tmp_path: Path) -> None:
    memory = tmp_path / "owner-memory"
    memory.write_text(str(10 * GB))
    caps = tmp_path / "guest-caps"
    service = antman(tmp_path, 1)
    try:
        service.start()
        submit = service.client.submit
        host = submit({"name": "owner", "command": owner(memory), "gpus": 1, "vc": "research"})
        wait_for(lambda: service.client.job(host["id"])["status"] == "RUNNING", 30)
        job = submit({"name": "guest", "command": watcher(caps), "gpus": 1, "vc": "research"})
        wait_for(lambda: service.client.job(job["id"])["reason"] == "Opportunistic", 30)

        def seen() -> list[float]:  # the caps it was given, in order (its nice stays 19)
            text = caps.read_text().split() if caps.exists() else []
            return [float(x.split(":")[1]) for x in text]

        tight = round(1 - 10 / V100 - MEMORY_MARGIN, 3)
        wait_for(lambda: seen() and seen()[-1] == tight, 30, f"the cap to shrink to {tight}")
        assert seen()[0] == 0.5  # the launch figure, before the owner's use was known
        memory.write_text(str(4 * GB))  # the owner needs less: the guest may have more
        roomy = round(1 - 4 / V100 - MEMORY_MARGIN, 3)
        wait_for(lambda: seen()[-1:] == [roomy], 30, f"the cap to grow to {roomy}")
        assert seen() == [0.5, tight, roomy]
        for j in (host, job):
            service.client.action(j["id"], "cancel")
        for j in (host, job):
            wait_for(lambda j=j: service.client.job(j["id"])["status"] in TERMINAL, 30)
    finally:
        service.close()


def test_a_job_upgraded_while_running_gets_its_priority_and_memory_back(tmp_path: Path) -> None:
    seen = tmp_path / "seen"
    service = antman(tmp_path, 2)
    try:
        service.start()
        submit = service.client.submit
        first = submit({"command": ["sleep", "600"], "gpus": 1, "vc": "research"})
        wait_for(lambda: service.client.job(first["id"])["status"] == "RUNNING", 30)
        job = submit({"name": "beyond", "command": watcher(seen), "gpus": 1, "vc": "research"})
        wait_for(lambda: seen.exists() and seen.read_text() == "19:0.5", 30, "a low start")
        service.client.action(first["id"], "cancel")  # research's quota frees
        # raising a priority needs privilege: a service run by root gives it back
        nice = 0 if os.geteuid() == 0 else 19
        wait_for(lambda: seen.read_text().endswith(f" {nice}:1.0"), 30, "the upgrade")
        # reniced at once by the service, the cap lifted at the job's next heartbeat
        assert seen.read_text() in (
            f"19:0.5 {nice}:1.0",
            f"19:0.5 {nice}:0.5 {nice}:1.0",
            f"19:0.5 19:1.0 {nice}:1.0",
        )
        assert [e.detail for e in service.events("upgraded")] == [{"reniced": nice == 0}]
        row = service.client.job(job["id"])
        assert row["status"] == "RUNNING" and row["preemptions"] == 0 and row["reason"] is None
        service.client.action(job["id"], "cancel")
        wait_for(lambda: service.client.job(job["id"])["status"] in TERMINAL, 30)
    finally:
        service.close()
