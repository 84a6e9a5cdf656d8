"""What a user submits: the job spec, validated before anything is stored.

The same pydantic model checks a YAML file given to ``corral submit``, the
JSON body of ``POST /v1/jobs`` and the flags of ``corral submit --gpus ...``,
so every route refuses a bad spec with the field named and never stores half
of it. The command is an argv list: it is executed directly, never handed to
a shell, so no quoting or injection can change what runs.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from corral.errors import InputError
from corral.model.cluster import normalise_gpu_type
from corral.yamlio import load_yaml, validation_error

RESERVED_ENV_PREFIX = "CORRAL_"
"""Variables the executor sets for every attempt; a spec may not override them."""

_DURATION = re.compile(r"^(?:(\d+)d)?(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s?)?$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def parse_seconds(value: Any) -> float:
    """Seconds from a number, ``HH:MM:SS`` / ``MM:SS`` (Slurm's form) or ``1h30m`` / ``90s``."""
    if isinstance(value, bool):
        raise ValueError("expected a duration")
    if isinstance(value, int | float):
        seconds = float(value)
    else:
        text = str(value).strip().lower()
        if ":" in text:
            parts = text.split(":")
            if len(parts) > 3 or not all(p.strip().isdigit() for p in parts):
                raise ValueError(f"'{value}' is not HH:MM:SS")
            seconds = 0.0
            for part in parts:
                seconds = seconds * 60 + int(part)
        else:
            match = _DURATION.match(text)
            if not text or match is None:
                raise ValueError(f"'{value}' is not a duration (e.g. 3600, 1h30m, 01:30:00)")
            d, h, m, s = (float(g) if g else 0.0 for g in match.groups())
            seconds = d * 86400 + h * 3600 + m * 60 + s
    if seconds <= 0:
        raise ValueError("a duration must be positive")
    return seconds


class JobSpec(BaseModel):
    """A training job as its owner describes it."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field("job", min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    command: list[str] = Field(min_length=1, description="argv; run directly, never by a shell")
    gpus: int = Field(1, ge=1, le=4096, description="GPUs of the gang")
    gpu_type: str | None = Field(None, description="run only on this GPU type (any when unset)")
    job_type: str = Field("generic", min_length=1, description="throughput-profile key")
    priority: int = Field(0, ge=-1000, le=1000, description="higher runs first among equals")
    weight: float = Field(1.0, gt=0, description="weight in weighted-JCT objectives")
    max_retries: int = Field(2, ge=0, le=100, description="failed attempts retried")
    wall_time: float | None = Field(None, description="seconds (or 1h30m, HH:MM:SS) per attempt")
    duration: float | None = Field(
        None,
        description="expected run time (seconds, 1h30m or HH:MM:SS), for policies that rank "
        "by work left; unset: wall_time, else an estimate from the owner's finished jobs",
    )
    vc: str | None = Field(
        None,
        min_length=1,
        max_length=64,
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        description="virtual cluster (Slurm's account, Kueue's queue) whose quota it uses",
    )
    env: dict[str, str] = Field(default_factory=dict)
    workdir: str | None = Field(None, description="working directory (default: the service's)")
    total_steps: int | None = Field(None, ge=1, description="steps to the end (for progress)")
    prerun_steps: int | None = Field(
        None, ge=0, description="iterations of a 1-GPU pre-run first (0: none; unset: config)"
    )

    @field_validator("command")
    @classmethod
    def _command(cls, value: list[str]) -> list[str]:
        if not value[0].strip():
            raise ValueError("the program (first element) is empty")
        if any("\x00" in part for part in value):
            raise ValueError("arguments may not contain NUL bytes")
        return value

    @field_validator("gpu_type")
    @classmethod
    def _gpu_type(cls, value: str | None) -> str | None:
        return None if value is None or not value.strip() else normalise_gpu_type(value)

    @field_validator("wall_time", "duration", mode="before")
    @classmethod
    def _seconds(cls, value: Any) -> float | None:
        return None if value is None else parse_seconds(value)

    @field_validator("env")
    @classmethod
    def _env(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not _ENV_NAME.match(key):
                raise ValueError(f"'{key}' is not a valid variable name")
            if key.startswith(RESERVED_ENV_PREFIX):
                raise ValueError(f"'{key}': {RESERVED_ENV_PREFIX}* variables are set by corral")
        return value


def load_job_spec(path: str | Path) -> JobSpec:
    """A job spec from YAML; errors name the file, the line and the field."""
    doc = load_yaml(path)
    source = str(path)
    if not isinstance(doc, dict):
        raise InputError(source, 1, None, "a job spec is a mapping (name, command, gpus, ...)")
    if isinstance(doc.get("command"), str):
        line = doc.line_of("command") if hasattr(doc, "line_of") else None
        raise InputError(
            source, line, "command", "give the command as a list (argv), e.g. [python, train.py]"
        )
    try:
        return JobSpec.model_validate(dict(doc))
    except ValidationError as exc:
        raise validation_error(source, doc, exc) from None
