"""A round keeper: one process holding a job run as rounds between its tasks.

Hare keeps a job's model resident in the worker that runs its tasks, so a
task costs its mini-batches, not a rebuild. Live, each task of a round is
still a job of its own (its attempt, exit record and retries are the
service's business), but with ``workers: {keep: N}`` in the service's config
the executor also starts, per job and GPU, a *keeper*: ``python -m
corral.train.round_keeper FACTORY ... --socket PATH``, run as the job's user
with its limits and GPU, in a standby worker. It builds the job once and
listens on a Unix socket in the job's folder (only the job's user may
connect). A task process of that job on that GPU
(:mod:`corral.train.rounds`) hands its arguments to the keeper and waits;
the keeper runs the task on the state it holds (:class:`~corral.train.rounds.Held`)
and answers, and the task exits with its answer. So a task whose round's
starting state the keeper holds reads nothing from disk and builds nothing:
the keeper applied the last update, or ran another task of the round, or,
idle after running a task whose round another task completed, read the next
round's state as soon as it was written (Hare's preloading). Otherwise the
keeper reads the round's state file when the task comes, still without a
rebuild. Files are
written exactly as a task process writes them, so the result is the same.

On a GPU the keeper parks the job's tensors in pinned host memory between
tasks (:class:`corral.train.residency.Suspension`), so it holds no GPU memory
while other jobs use the GPU.

A keeper is an optimisation, never needed: a task that finds no keeper (not
started, busy starting, gone) runs the task itself, and a keeper that dies
part-way leaves files that are either whole or absent (a round's lock taken
by a dead process is taken over). A keeper ends when its job ends, when the
executor needs its place for another job's keeper (``keep`` per GPU), after
``--idle`` seconds without a task, and with the service (it never outlives it:
a restarted service starts new ones).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from corral.train.keeper_client import read_line, short_name

IDLE_SECONDS = 300.0
"""A keeper with no task for this long ends (its job may have moved elsewhere)."""
IDENTITY = ("factory", "kw", "seed", "rounds", "round_steps", "dir")
"""What a task must share with a keeper to run in it: the same job."""


class Keeper:
    """The job, held, and what serving a task involves."""

    def __init__(self, own: dict[str, Any], build: Callable[[], Any]) -> None:
        from corral.train.rounds import Held

        self.own = {key: own[key] for key in IDENTITY}
        self.held = Held.built(build)
        self.suspension = _suspension(self.held.task)
        self.served = -1
        """The round of the last task it ran."""

    def serve(self, request: dict[str, Any]) -> dict[str, Any]:
        from corral.train.rounds import check_task, run_part

        mismatch = [key for key in IDENTITY if request.get(key) != self.own[key]]
        if mismatch:
            return {"refused": f"another job ({', '.join(mismatch)} differ)"}
        try:
            round_, part, parts = int(request["round"]), int(request["part"]), int(request["parts"])
            check_task(round_, part, parts, self.own["round_steps"], self.own["rounds"])
        except (KeyError, TypeError, ValueError) as exc:
            return {"refused": f"malformed task: {exc}"}
        held = self.held.round_ == round_
        self._resume()
        applied = run_part(
            self.held,
            Path(self.own["dir"]),
            round_,
            part,
            parts,
            self.own["round_steps"],
            self.own["rounds"],
            self.own["seed"],
        )
        self._suspend()
        self.served = round_
        return {"applied": applied, "held": held}

    def prefetch(self) -> None:
        """Idle, having run a task of the round whose update another task applied: read
        the next round's state as soon as it is written (Hare's preloading), so the
        job's next task here finds it held."""
        from corral.train.rounds import state_path

        following = self.held.round_ + 1
        if self.served != self.held.round_ or following >= self.own["rounds"]:
            return
        folder = Path(self.own["dir"])
        if not state_path(folder, following).exists():
            return
        with contextlib.suppress(OSError, EOFError, RuntimeError):  # gone: the job moved on
            self.held.restore(folder, following)  # (into host memory on a GPU)

    def _resume(self) -> None:
        if self.suspension is not None:
            self.suspension.resume(self.held.task.objects)
            self.suspension.mover.settle()  # state is read and restored outside a step

    def _suspend(self) -> None:
        if self.suspension is not None:
            self.suspension.suspend(self.held.task.objects)


def _suspension(task: Any) -> Any:
    """Where the job's tensors wait between tasks on a GPU (None on the host)."""
    import torch

    if not torch.cuda.is_available():
        return None
    from corral.train.residency import Suspension, device_of, worker_mover

    device = device_of(task.objects)
    return None if device is None else Suspension(worker_mover(device))


def main(argv: list[str] | None = None) -> int:
    from corral.train.rounds import parser, request_of
    from corral.train.task import load_factory

    options = parser(__doc__.splitlines()[0])
    options.add_argument("--socket", type=Path, required=True, help="where to listen")
    options.add_argument("--idle", type=float, default=IDLE_SECONDS, help="seconds")
    options.add_argument(
        "--no-prefetch",
        dest="prefetch",
        action="store_false",
        help="read a round's state when its task comes, not when it is written",
    )
    args = options.parse_args(argv)
    stopping: list[int] = []
    signal.signal(signal.SIGTERM, lambda sig, _: stopping.append(sig))
    listener, bound = _listen(args.socket)  # first: a task waits for the build, not builds
    try:
        factory = load_factory(args.factory)
        keeper = Keeper(request_of(args), lambda: factory(**dict(args.kw)))
        print(f"corral: round keeper for {args.factory} listening", flush=True)
        last = time.monotonic()
        while not stopping and time.monotonic() - last < args.idle:
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                if args.prefetch:
                    keeper.prefetch()
                continue
            answer = _serve_one(keeper, conn)
            last = time.monotonic()
            if "error" in answer:
                break  # its state may be half-changed: tasks run themselves from here
    finally:
        listener.close()
        with contextlib.suppress(OSError):
            if args.socket.stat().st_ino == bound:  # not a newer keeper's
                args.socket.unlink()
    return 0


def _serve_one(keeper: Keeper, conn: socket.socket) -> dict[str, Any]:
    with conn:
        conn.settimeout(None)
        try:
            request = json.loads(read_line(conn) or b"null")
        except ValueError:
            request = None
        if not isinstance(request, dict):
            answer: dict[str, Any] = {"refused": "malformed request"}
            request = {}
        else:
            try:
                answer = keeper.serve(request)
            except Exception as exc:
                traceback.print_exc()
                answer = {"error": f"{type(exc).__name__}: {exc}"}
        which = f"{request.get('round', '?')}.{request.get('part', '?')}"
        print(f"corral: task {which}: {answer}", flush=True)
        with contextlib.suppress(OSError):
            conn.sendall(json.dumps(answer).encode() + b"\n")
    return answer


def _listen(path: Path) -> tuple[socket.socket, int]:
    """Listen at ``path``; the socket and the inode of its file there.

    The socket is bound under a name of its own and renamed to ``path`` once it
    listens: a task that finds the file may connect at once (bound but not yet
    listening, it would be refused and take the keeper for gone)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # a keeper before this one died without removing it
    starting = path.with_name(f".{path.name}.{os.getpid()}")
    with contextlib.suppress(FileNotFoundError):
        starting.unlink()
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o077)  # only the job's user (and root) may connect
    try:
        with short_name(starting) as name:
            listener.bind(name)
    finally:
        os.umask(old)
    listener.listen(16)
    os.replace(starting, path)
    listener.settimeout(0.05)  # to notice the next round's state, SIGTERM, the idle limit
    return listener, path.stat().st_ino


if __name__ == "__main__":
    sys.exit(main())
