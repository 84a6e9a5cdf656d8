"""A job whose node fails under it is requeued without using its retries, as Slurm
requeues a batch job (``--requeue``, up to ``MaxBatchRequeue``); ``--no-requeue``
ends it FAILED; past ``retry.node_requeues`` node failures count as failures
(virtual time: the node fails and returns at chosen instants)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corral.runtime.jobspec.config import RetryConfig
from corral.runtime.storage.store import JobRow
from tests.runtime.virtual_loop import virtual_loop


def lose_node_repeatedly(tmp_path: Path, times: int, **spec: Any) -> JobRow:
    """Run a 30-s job on a one-node cluster whose node fails ``times`` times under it."""
    loop = virtual_loop(
        tmp_path,
        retry=RetryConfig(backoff=1.0, backoff_max=1.0, node_requeues=3),
        drain_after=100,  # (the node is not what is tested here)
    )
    job = loop.queue(command=["sleep", "30"], gpus=1, **spec)
    (node,) = loop.executor.nodes()
    for _ in range(times):
        loop.run(5)
        loop.executor.fail_node(node)
        loop.run(2)
        loop.executor.return_node(node)
    loop.run(60)
    row = loop.row(job)
    loop.close()
    return row


def test_node_failures_requeue_the_job_without_using_its_retries(tmp_path: Path) -> None:
    row = lose_node_repeatedly(tmp_path, 3, max_retries=0)
    assert (row.status, row.failures) == ("SUCCEEDED", 0), row.reason


def test_past_the_requeue_limit_a_node_failure_counts_as_a_failure(tmp_path: Path) -> None:
    row = lose_node_repeatedly(tmp_path, 4, max_retries=0)
    assert row.status == "FAILED" and row.failures == 1
    assert row.reason is not None and row.reason.startswith("node_failure")


def test_a_job_that_asked_not_to_be_requeued_ends_failed(tmp_path: Path) -> None:
    row = lose_node_repeatedly(tmp_path, 1, max_retries=3, requeue=False)
    assert row.status == "FAILED" and "--no-requeue" in (row.reason or "")


def test_a_requeued_job_is_stopped_queued_again_and_resumes_from_its_checkpoint(
    tmp_path: Path,
) -> None:
    """scontrol requeue: the running attempt is stopped as a preemption, the job waits
    again, starts again and ends, the work before the requeue kept (it checkpoints)."""
    loop = virtual_loop(tmp_path)
    job = loop.queue(command=["train", "200", "10"], gpus=1)
    loop.run(5)
    with loop.store.session() as s:
        row = s.get(JobRow, job)
        assert row is not None and row.status == "RUNNING"
        row.request = "requeue"  # as the API records it
    loop.run(40)
    row = loop.row(job)
    assert (row.status, row.preemptions, row.failures) == ("SUCCEEDED", 1, 0), row.reason
    attempts = loop.attempts(job)
    assert [a.cause for a in attempts] == ["preempted", "succeeded"]
    ran = [(a.end_time or 0.0) - a.start_time for a in attempts]
    assert ran[1] < 20.0 - 1.0  # the second resumed: less than the whole 20 s of work
    loop.close()
