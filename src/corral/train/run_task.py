"""Run a task (see :mod:`corral.train.task`) as an ordinary job process.

    python -m corral.train.run_task corral.examples.tasks:digits --steps 400 --kw seed=3

The same task a standby worker switches warm runs here cold: resumed from
its checkpoint, reporting heartbeats, checkpointing and exiting when the
scheduler asks it to stop, exactly as a hand-written loop on
:class:`corral.train.Session` would. The final state is saved as the last
checkpoint: it is the job's result. The first step of each run (the
process's start, each resumption after a pause) is logged with its time: a
switch ends there. Keyword values are read as JSON where
they parse (numbers, booleans), else kept as strings.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from corral.train import resident
from corral.train.session import STOPPED_EXIT, EndOfRun, Session, WarmHost
from corral.train.task import keyword, load_factory, place_task


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("factory", help="module:function building the task")
    parser.add_argument("--steps", type=int, required=True, help="steps in all")
    parser.add_argument("--kw", type=keyword, action="append", default=[], help="NAME=VALUE")
    parser.add_argument("--checkpoint-every", type=float, default=300.0, help="seconds")
    parser.add_argument(
        "--device", choices=["auto", "cpu", "cuda"], default="auto", help="auto: the GPU if any"
    )
    parser.add_argument(
        "--no-pipeline",
        dest="pipeline",
        action="store_false",
        help="copy the job's state to the GPU whole before its first step (for a model "
        "whose forward reads a later layer's weights before that layer runs)",
    )
    args = parser.parse_args(argv)
    try:
        factory = load_factory(args.factory)
    except (ImportError, ValueError) as exc:
        print(f"corral: {exc}", file=sys.stderr)
        return 2
    # in a warm worker, the job's task may still be resident from its last attempt there
    key = json.dumps([os.environ.get("CORRAL_JOB_ID"), args.factory, sorted(args.kw)])
    checkpoints = Path(os.environ.get("CORRAL_CHECKPOINT_DIR", "checkpoints"))
    kept = resident.take(key, checkpoints) if WarmHost.active else None
    task = kept.task if kept is not None else factory(**dict(args.kw))
    # (a task's objects are named for what they hold, never as Session's own options)
    session = Session(checkpoint_every=args.checkpoint_every, **task.objects)
    if kept is not None:
        step = session.resume_resident(kept.step)
        resident.bring_back(kept)
        host = kept.parked
        print(f"corral: resumed in memory at step {step} (nothing rebuilt or read)", flush=True)
    else:
        step = session.restore()
        host = place_task(task, args.device, pipeline=args.pipeline)
    run = -1  # the runs of this process: its start, then each resumption after a pause
    try:
        while step < args.steps:
            loss = task.step(step)
            step += 1
            if session.resumptions != run:  # when the GPU was this job's again (a switch's end)
                run = session.resumptions
                print(f"corral: step {step} done at t={time.time():.3f}", flush=True)
            session.report(step, loss=loss)
            if session.should_stop and step < args.steps:
                session.stop(step)
    except EndOfRun as end:  # stopped in a warm worker: the task stays there, resident
        if end.code == STOPPED_EXIT and os.environ.get("CORRAL_JOB_ID"):
            resident.keep(key, task, step, checkpoints, host)
        raise
    session.save(step)  # the trained state is the job's result
    session.finish(step)
    print(json.dumps({"final_step": step}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
