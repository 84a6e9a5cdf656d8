"""Atomic checkpoints of a training loop: model, optimiser, step and RNG state.

A checkpoint is written to a temporary file, flushed to disk and renamed over
the previous one, so a job killed in the middle of a save still finds the
last complete checkpoint. Random-number state (Python, NumPy, PyTorch's CPU
and CUDA generators) is saved with it, so a resumed run draws the same
numbers an uninterrupted one would have. PyTorch is used when it is
installed (``torch.save``); without it, objects are pickled.
"""

from __future__ import annotations

import os
import pickle
import random
from pathlib import Path
from typing import Any, Protocol

import numpy as np

FILE_NAME = "checkpoint.pt"


class Stateful(Protocol):
    def state_dict(self) -> Any: ...

    def load_state_dict(self, state: Any) -> Any: ...


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        return None
    return torch


def rng_state() -> dict[str, Any]:
    state: dict[str, Any] = {"python": random.getstate(), "numpy": np.random.get_state()}
    torch = _torch()
    if torch is not None:
        state["torch"] = torch.get_rng_state()
        if torch.cuda.is_available():
            state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch = _torch()
    if torch is not None and "torch" in state:
        torch.set_rng_state(state["torch"])
        if "cuda" in state and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda"])


def save(folder: Path, step: int, objects: dict[str, Stateful], extra: dict[str, Any]) -> Path:
    """Write a checkpoint atomically; returns its path."""
    folder.mkdir(parents=True, exist_ok=True)
    payload = {
        "step": int(step),
        "state": {name: obj.state_dict() for name, obj in objects.items()},
        "rng": rng_state(),
        "extra": extra,
    }
    final = folder / FILE_NAME
    tmp = folder / f".{FILE_NAME}.{os.getpid()}.tmp"
    torch = _torch()
    with open(tmp, "wb") as handle:
        if torch is not None:
            torch.save(payload, handle)
        else:
            pickle.dump(payload, handle, protocol=pickle.HIGHEST_PROTOCOL)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, final)
    _fsync_dir(folder)
    return final


def load(folder: Path) -> dict[str, Any] | None:
    """The latest checkpoint in ``folder``, or None when there is none."""
    path = folder / FILE_NAME
    if not path.exists():
        return None
    torch = _torch()
    with open(path, "rb") as handle:
        if torch is not None:
            return torch.load(handle, map_location="cpu", weights_only=False)
        return pickle.load(handle)


def restore(payload: dict[str, Any], objects: dict[str, Stateful]) -> int:
    """Load saved state into ``objects`` and the RNGs; returns the saved step."""
    for name, obj in objects.items():
        if name in payload["state"]:
            obj.load_state_dict(payload["state"][name])
    set_rng_state(payload["rng"])
    return int(payload["step"])


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
