"""What ``corral submit`` sends beside the job's options, as sbatch does (the
submitting shell's environment, ``--export``, and the directory it ran in), and
what it says of the job it queued.

sbatch's default is ``--export=ALL``: a job starts with the environment of the
shell that submitted it, so ``module load`` and ``conda activate`` before
``sbatch`` reach the job, and so does ``$MYVAR``. ``NONE`` sends nothing (the
job starts with the service's clean environment); ``ALL,A=1`` adds or
replaces variables; a list without ``ALL`` (``A=1,B``) sends only those, ``B``
taken from the shell. The shell's ``CORRAL_*`` and ``SLURM_*`` variables are
never sent: the token in ``CORRAL_TOKEN`` must not be stored with a job, and a
job submitted from inside a job must not carry its parent's ids.

Standard library only: the quick path of ``corral submit`` imports it.
"""

from __future__ import annotations

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing: a quick command)

if TYPE_CHECKING:
    from typing import Any

NOT_SENT = ("CORRAL_", "SLURM_")
"""Prefixes of the shell's variables never sent (see the module docstring); the
service drops them too."""
DEFAULT_EXPORT = "ALL"


def exported(text: str | None, environ: dict[str, str]) -> dict[str, str] | None:
    """The variables ``--export TEXT`` sends from ``environ`` (None: none, the job's
    base is the service's). Raises ValueError on a word that is no variable."""
    words = [w.strip() for w in (text or DEFAULT_EXPORT).split(",") if w.strip()]
    if not words:
        raise ValueError("give ALL, NONE, or a list of variables (A=1,B)")
    head = words[0].upper()
    if head == "NONE":
        if len(words) > 1:
            raise ValueError(
                f"'{text}': NONE sends no variable; give the ones wanted as a list (A=1,B) "
                "or with ALL (ALL,A=1)"
            )
        return None
    out: dict[str, str] = {}
    if head == "ALL":
        out = {k: v for k, v in environ.items() if not k.startswith(NOT_SENT)}
        words = words[1:]
    for word in words:
        name, eq, value = word.partition("=")
        if not name or not name.replace("_", "a").isalnum() or name[0].isdigit():
            raise ValueError(f"'{word}' is not a variable (give NAME or NAME=VALUE)")
        if name.startswith(NOT_SENT):
            raise ValueError(f"'{name}': {name.split('_')[0]}_* variables are set for each job")
        if eq:
            out[name] = value
        elif name in environ:
            out[name] = environ[name]
    return out


def batch_fields(fields: dict[str, object], environ: dict[str, str], cwd: str) -> None:
    """Complete a submission's ``fields`` as sbatch would: its ``export`` option (None:
    ALL) resolved into ``export_env``, and ``submit_dir``."""
    value = exported(fields.pop("export", None), environ)  # type: ignore[arg-type]
    if value is not None:
        fields["export_env"] = value
    fields.setdefault("submit_dir", cwd)


def finish_submission(fields: dict[str, Any], environ: dict[str, str], cwd: str) -> None:
    """What both of ``corral submit``'s paths do last to the fields they read: the
    paths placed (:func:`place_paths`), the environment sent (:func:`batch_fields`),
    and a ``--begin`` read in local time, here, as sbatch reads it. Raises
    ValueError naming the option at fault."""
    place_paths(fields, cwd)
    try:
        batch_fields(fields, environ, cwd)
    except ValueError as exc:
        raise ValueError(f"--export: {exc}") from None
    if isinstance(fields.get("begin"), str):
        from corral.timespan import parse_begin

        try:
            fields["begin"] = parse_begin(fields["begin"])
        except ValueError as exc:
            raise ValueError(f"--begin: {exc}") from None


def place_paths(fields: dict[str, Any], cwd: str) -> None:
    """As sbatch: ``--chdir`` relative to where ``corral submit`` runs (that directory
    when none is given), and the output files relative to the job's working
    directory."""
    import os.path

    workdir = os.path.realpath(os.path.join(cwd, str(fields.get("workdir") or cwd)))
    fields["workdir"] = workdir
    for key in ("output", "error"):
        value = fields.get(key)
        if isinstance(value, str) and not value.startswith("/"):
            fields[key] = os.path.join(workdir, value)


def submitted_line(job: dict[str, Any]) -> str:
    """What ``corral submit`` says of a job it queued (an array: its tasks' ids)."""
    tasks = job.get("array_tasks")
    head = f"submitted array job {job['id']} ({job['name']})" if tasks else ""
    if not tasks:
        return f"submitted job {job['id']} ({job['name']})"
    if tasks == list(range(tasks[0], tasks[-1] + 1)):
        return f"{head}: {len(tasks)} tasks, jobs {tasks[0]}-{tasks[-1]}"
    return f"{head}: jobs " + ",".join(map(str, tasks))
