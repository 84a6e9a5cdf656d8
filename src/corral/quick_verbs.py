"""The ``corral`` command's entry point: ``corral submit`` in its everyday form and
``corral queue`` answered without the full command line.

Slurm's users submit in loops (``for i in ...; do sbatch ...; done``). Through
the full command line (:mod:`corral.cli`) every submission paid for Typer, Rich
and the reading of every option before a 5 ms request: about 0.12 s a command
on the development machine, 8 jobs a second in a loop. Here a submission whose
words are all understood here (the flags in :data:`VALUES` and :data:`FLAGS`,
then ``--`` and the command) is sent with the standard library and the HTTP
client alone; so is a batch script given alone after those flags (``corral
submit job.sh``: its directives read by :mod:`corral.runtime.jobspec.directives`,
without pydantic). Any other word (a spec file, a script, ``--wait``,
``--help``, a value that is not a number where one is wanted, no ``--``) hands
the whole command to :mod:`corral.cli`, which answers it as before, or gives
its error. So the quick path sends exactly what the full one would (a test
compares the two) for what it takes, and never answers what it does not take.
``corral queue`` is taken with any of its options; its rows and plain columns
are the full command line's own (:mod:`corral.queue_listing`), and a screenful
is drawn in the full command line's box (as Rich draws it, without Typer).
"""

from __future__ import annotations

import os
import sys

TYPE_CHECKING = False  # (typing.TYPE_CHECKING without importing typing: a quick command)


if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

VALUES: dict[str, tuple[str, Callable[[str], Any]]] = {
    "--gpus": ("gpus", int),
    "--name": ("name", str),
    "-J": ("name", str),
    "--gpu-type": ("gpu_type", str),
    "--job-type": ("job_type", str),
    "--priority": ("priority", int),
    "--max-retries": ("max_retries", int),
    "--wall-time": ("wall_time", str),
    "--time": ("wall_time", str),
    "-t": ("wall_time", str),
    "--duration": ("duration", str),
    "--total-steps": ("total_steps", int),
    "--cpus": ("cpus", int),
    "--cpus-per-task": ("cpus", int),
    "-c": ("cpus", int),
    "--mem": ("memory", str),
    "--memory": ("memory", str),
    "--vc": ("vc", str),
    "--account": ("vc", str),
    "-A": ("vc", str),
    "--export": ("export", str),
    "--array": ("array", str),
    "-a": ("array", str),
    "--dependency": ("dependency", str),
    "-d": ("dependency", str),
    "--output": ("output", str),
    "-o": ("output", str),
    "--error": ("error", str),
    "--workdir": ("workdir", str),
    "--chdir": ("workdir", str),
    "-D": ("workdir", str),
    "--begin": ("begin", str),
    "-b": ("begin", str),
    "--partition": ("partition", str),
    "-p": ("partition", str),
    "--nodes": ("nodes", int),
    "-N": ("nodes", int),
    "--ntasks-per-node": ("tasks_per_node", int),
    "--mail-type": ("mail_type", str),
    "--mail-user": ("mail_user", str),
    "--signal": ("signal", str),
    "--target-loss": ("target_loss", float),
    "--url": ("url", str),
    "--token": ("token", str),
}
"""Options with a value that the quick path reads, as the full command line names
them, and the field each sets (``url`` and ``token`` say where to send it)."""

FLAGS: dict[str, tuple[str, bool]] = {
    "--hold": ("hold", True),
    "-H": ("hold", True),
    "--exclusive": ("exclusive", True),
    "--requeue": ("requeue", True),
    "--no-requeue": ("requeue", False),
    "--json": ("json", True),
}
"""Options without a value that the quick path reads."""


SPECS = (".yaml", ".yml", ".json")
"""Endings of a job spec's file name, which the full command line reads."""


def read_options(
    options: list[str],
    values: dict[str, tuple[str, Callable[[str], Any]]],
    flags: dict[str, tuple[str, bool]],
) -> dict[str, Any] | None:
    """The fields ``options`` set (each a flag, ``--opt value`` or ``--opt=value``), or
    None at the first word that is none of those."""
    fields: dict[str, Any] = {}
    k = 0
    while k < len(options):
        word = options[k]
        name, eq, given = word.partition("=")
        if word in flags:
            key, value = flags[word]
            fields[key] = value
            k += 1
            continue
        if eq and name.startswith("--") and name in values:
            text = given
            k += 1
        elif word in values and k + 1 < len(options):
            name, text = word, options[k + 1]
            k += 2
        else:
            return None
        key, kind = values[name]
        try:
            fields[key] = kind(text)
        except ValueError:  # (the full command line says what is wrong with it)
            return None
    return fields


def parse_submit(words: list[str]) -> dict[str, Any] | None:
    """The fields of ``corral submit WORDS`` (with ``url``, ``token`` and ``json``
    among them), or None when a word is not one the quick path takes."""
    if "--" not in words:
        return parse_script_submit(words)
    split = words.index("--")
    options, command = words[:split], words[split + 1 :]
    if not command or os.path.isfile(command[0]) or command[0].lower().endswith(SPECS):
        return None  # (a spec file or a batch script, read by the full command line)
    fields = read_options(options, VALUES, FLAGS)
    if fields is None:
        return None
    fields["command"] = command
    return finished(fields)


def finished(fields: dict[str, Any]) -> dict[str, Any] | None:
    """``fields`` completed as the full command line completes them (paths, the
    environment sent, a begin time), or None where that fails (the full command line
    then says what is wrong)."""
    from corral.submit_env import finish_submission

    try:
        finish_submission(fields, dict(os.environ), os.getcwd())
    except ValueError:
        return None
    return fields


def options_end(
    words: list[str],
    values: dict[str, tuple[str, Callable[[str], Any]]] | None = None,
    flags: dict[str, tuple[str, bool]] | None = None,
) -> int:
    """Where the options (of ``submit`` unless given) end in ``words``: the first other word."""
    values = VALUES if values is None else values
    flags = FLAGS if flags is None else flags
    k = 0
    while k < len(words):
        word = words[k]
        name, eq, _ = word.partition("=")
        if word in flags or (eq and name.startswith("--") and name in values):
            k += 1
        elif word in values:
            k += 2
        else:
            break
    return k


def parse_script_submit(words: list[str]) -> dict[str, Any] | None:
    """The fields of ``corral submit [OPTIONS] script.sh`` (sbatch's everyday form):
    the script's directives, then the options given, as the full command line reads
    them; None for anything else (words after the script, which the full command line
    reads as options, a spec file, a program binary, a directive it must refuse)."""
    k = options_end(words)
    if k != len(words) - 1:
        return None
    path = words[k]
    if path.startswith("-") or path.lower().endswith(SPECS):
        return None
    from corral.runtime.jobspec.directives import is_script

    if not is_script(path):
        return None
    given = read_options(words[:k], VALUES, FLAGS)
    if given is None:
        return None
    from pathlib import Path

    from corral.runtime.jobspec.directives import PER_UNIT_MEMORY, per_unit_memory, script_fields

    try:
        fields = script_fields(Path(path))
        if "memory" in given:  # (the command line's --mem over a script's per-unit memory)
            fields.pop(PER_UNIT_MEMORY, None)
        fields.update(given)
        per_unit_memory(fields, path)
    except Exception:  # (a directive refused, a file unreadable: the full command line says it)
        return None
    return finished(fields)


def quick_submit(words: list[str]) -> int | None:
    """Submit as ``corral submit WORDS`` does, and the exit code; None when the
    words are not the quick path's (nothing was sent)."""
    fields = parse_submit(words)
    if fields is None:
        return None
    from corral.api.client import Client
    from corral.errors import CorralError

    url, token, as_json = (
        fields.pop("url", None),
        fields.pop("token", None),
        fields.pop("json", False),
    )
    try:
        with Client(url, token) as client:
            job = client.submit(fields)
    except CorralError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except OSError as exc:
        print(f"error: {exc.strerror or exc}", file=sys.stderr)
        return 2
    if as_json:
        import json

        sys.stdout.write(json.dumps(job, indent=2) + "\n")
    else:
        from corral.submit_env import submitted_line

        sys.stdout.write(submitted_line(job) + "\n")
    return 0


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ValueError(text)
    return value


QUEUE_VALUES: dict[str, tuple[str, Callable[[str], Any]]] = {
    "--state": ("state", str),
    "-t": ("state", str),
    "--user": ("user", str),
    "-u": ("user", str),
    "--name": ("name", str),
    "-n": ("name", str),
    "--jobs": ("jobs", str),
    "-j": ("jobs", str),
    "--format": ("format", str),
    "-o": ("format", str),
    "--limit": ("limit", _positive),
    "--url": ("url", str),
    "--token": ("token", str),
}
"""``corral queue``'s options (all of them), as the full command line names them."""
QUEUE_FLAGS = {"--mine": ("mine", True), "--no-mine": ("mine", False), "--json": ("json", True)}


def quick_queue(words: list[str]) -> int | None:
    """List the queue as ``corral queue WORDS`` does, and the exit code; None when the
    words are not the quick path's. A long listing (plain columns) or JSON needs
    nothing more; a screenful is drawn by the full command line's table."""
    given = read_options(words, QUEUE_VALUES, QUEUE_FLAGS)
    if given is None:
        return None
    from corral.api.client import Client
    from corral.errors import CorralError
    from corral.queue_listing import (
        PLAIN_ROWS,
        QUEUE_FIELDS,
        box_table,
        cut_note,
        plain_table,
        queue_columns,
        queue_rows,
        queue_title,
    )

    as_json = given.get("json", False)
    try:
        chosen = queue_columns(given.get("format"))
        with Client(given.get("url"), given.get("token")) as client:
            filters = (given.get("state"), given.get("mine", False), given.get("limit"))
            chosen_by = (given.get("user"), given.get("name"), given.get("jobs"))
            if as_json:
                jobs, total = client.jobs_counted(*filters, None, *chosen_by)
            else:
                table, total = client.job_table(QUEUE_FIELDS, *filters, *chosen_by)
    except CorralError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    shown = len(jobs) if as_json else len(table["id"])
    note = cut_note(shown, total, given.get("limit"))
    if note:
        print(note, file=sys.stderr)
    if as_json:
        import json

        sys.stdout.write(json.dumps(jobs, indent=2) + "\n")
        return 0
    rows = queue_rows(table, chosen)
    if len(rows) > PLAIN_ROWS:
        plain_table(queue_title(shown, total), chosen, rows)
    else:
        box_table(queue_title(shown, total), chosen, rows)
    return 0


BULK_VALUES: dict[str, tuple[str, Callable[[str], Any]]] = {
    "--user": ("user", str),
    "-u": ("user", str),
    "--state": ("states", str),
    "-t": ("states", str),
    "--name": ("name", str),
    "-n": ("name", str),
    "--vc": ("vc", str),
    "--account": ("vc", str),
    "-A": ("vc", str),
    "--url": ("url", str),
    "--token": ("token", str),
}
"""The options of the verbs that act on jobs, as the full command line names them."""
BULK_FLAGS = {"--json": ("json", True)}
BULK_VERBS = ("cancel", "suspend", "resume", "hold", "release", "requeue")


def bulk_words(words: list[str]) -> tuple[list[int], dict[str, Any]] | None:
    """The ids and options of ``corral cancel WORDS`` (and the other verbs acting on
    jobs), or None at a word the quick path does not take."""
    ids: list[int] = []
    options: list[str] = []
    k = 0
    while k < len(words):
        word = words[k]
        if word in BULK_VALUES:
            options += words[k : k + 2]
            k += 2
            continue
        if word.isdigit():
            ids.append(int(word))
        else:
            options.append(word)
        k += 1
    given = read_options(options, BULK_VALUES, BULK_FLAGS)
    return None if given is None else (ids, given)


def quick_bulk(verb: str, words: list[str]) -> int | None:
    """``corral VERB`` (cancel, hold, ...) on job ids and filters, as the full command
    line does it (:mod:`corral.bulk_verbs`); None when a word is not the quick path's
    (an array's task, ``12_3``, is read by the full command line)."""
    read = bulk_words(words)
    if read is None:
        return None
    ids, given = read
    from corral.api.client import Client
    from corral.bulk_verbs import act_on_many
    from corral.errors import CorralError

    filters = {k: given.get(k) for k in ("user", "states", "name", "vc")}
    alone = ids[0] if len(ids) == 1 and not any(filters.values()) else None
    try:
        with Client(given.get("url"), given.get("token")) as client:
            selection = {"ids": ids, "tasks": []}
            act_on_many(client, verb, selection, filters, given.get("json", False), alone)
    except CorralError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


def bulk_verb(verb: str) -> Callable[[list[str]], int | None]:
    def quick(words: list[str]) -> int | None:
        return quick_bulk(verb, words)

    return quick


CLIENT_VALUES: dict[str, tuple[str, Callable[[str], Any]]] = {
    "--url": ("url", str),
    "--token": ("token", str),
}
"""Where to send a request, as every verb of the full command line names it."""


def quick_show(words: list[str]) -> int | None:
    """``corral show ID`` (``--json``, ``--script``), printed as the full command line
    prints it (:mod:`corral.job_views`); None when a word is not the quick path's."""
    ids = [w for w in words if w.isdigit()]
    flags = {"--json": ("json", True), "--script": ("script", True)}
    given = read_options([w for w in words if not w.isdigit()], CLIENT_VALUES, flags)
    if given is None or len(ids) != 1 or words.count(ids[0]) != 1:
        return None
    if words.index(ids[0]) > 0 and words[words.index(ids[0]) - 1] in CLIENT_VALUES:
        return None  # (a number given as --url's or --token's value)

    def show(client: Any) -> None:
        job_id = int(ids[0])
        if given.get("script"):
            data = client.script(job_id).encode()
            if sys.stdout.isatty():
                from corral.job_views import terminal_safe

                data = terminal_safe(data)
            sys.stdout.buffer.write(data)
            return
        job = client.job(job_id)
        if given.get("json"):
            import json

            sys.stdout.write(json.dumps(job, indent=2) + "\n")
            return
        from corral.job_views import print_job

        print_job(job)

    return asking(given, show)


def quick_logs(words: list[str]) -> int | None:
    """``corral logs ID`` (``-f``, ``--attempt N``, ``--json``), as the full command
    line prints it (:func:`corral.job_views.print_log`)."""
    values = {**CLIENT_VALUES, "--attempt": ("attempt", _positive)}
    flags = {"--json": ("json", True), "--follow": ("follow", True), "-f": ("follow", True)}
    k = options_end(words, values, flags)
    if k != len(words) - 1 or not words[k].isdigit():
        given = None
    else:
        given = read_options(words[:k], values, flags)
    if given is None:
        return None

    def logs(client: Any) -> None:
        from corral.job_views import print_log

        follow, as_json = given.get("follow", False), given.get("json", False)
        print_log(client, int(words[k]), follow, given.get("attempt"), as_json)

    return asking(given, logs)


HISTORY_VALUES: dict[str, tuple[str, Callable[[str], Any]]] = {
    **CLIENT_VALUES,
    "--user": ("user", str),
    "-u": ("user", str),
    "--since": ("since", str),
    "--starttime": ("starttime", str),
    "-S": ("starttime", str),
    "--endtime": ("endtime", str),
    "-E": ("endtime", str),
    "--state": ("state", str),
    "-s": ("state", str),
}
"""``corral history``'s options (all of them), as the full command line names them."""


def quick_history(words: list[str]) -> int | None:
    """``corral history`` (sacct), with any of its options, as the full command line
    prints it (:func:`corral.job_views.print_history`)."""
    flags = {"--json": ("json", True), "--all-users": ("all_users", True)}
    given = read_options(words, HISTORY_VALUES, flags)
    if given is None:
        return None

    def history(client: Any) -> None:
        from corral.job_views import history_span, print_history

        window = history_span(given.get("since"), given.get("starttime"), given.get("endtime"))
        rows = client.history(
            given.get("user"), given.get("all_users", False), *window, given.get("state")
        )
        if given.get("json"):
            import json

            sys.stdout.write(json.dumps(rows, indent=2) + "\n")
            return
        print_history(rows)

    return asking(given, history)


def _number(word: str) -> bool:
    """A whole number, negative ones too (``set-priority 6 -5``)."""
    return word.removeprefix("-").isdigit()


def quick_set_priority(words: list[str]) -> int | None:
    """``corral set-priority ID PRIORITY``, as the full command line says it."""
    k = options_end(words, CLIENT_VALUES, {"--json": ("json", True)})
    given = read_options(words[:k], CLIENT_VALUES, {"--json": ("json", True)})
    rest = words[k:]
    if given is None or len(rest) != 2 or not rest[0].isdigit() or not _number(rest[1]):
        return None

    def change(client: Any) -> None:
        job = client.set_priority(int(rest[0]), int(rest[1]))
        if given.get("json"):
            import json

            sys.stdout.write(json.dumps(job, indent=2) + "\n")
            return
        sys.stdout.write(f"job {rest[0]}: priority {job['priority']}\n")

    return asking(given, change)


def node_verb(verb: str) -> Callable[[list[str]], int | None]:
    """``corral drain NODE`` (``undrain``): an admin's change of a node's state."""
    values: dict[str, tuple[str, Callable[[str], Any]]] = {
        **CLIENT_VALUES,
        "--reason": ("reason", str),
    }
    flags = {"--json": ("json", True)}

    def quick(words: list[str]) -> int | None:
        k = options_end(words, values, flags)
        name = words[k] if k < len(words) else ""
        given = read_options(words[:k] + words[k + 1 :], values, flags)
        if given is None or not name or name.startswith("-"):
            return None

        def change(client: Any) -> None:
            node = client.node_state(name, verb, given.get("reason"))
            if given.get("json"):
                import json

                sys.stdout.write(json.dumps(node, indent=2) + "\n")
                return
            from corral.queue_listing import printable

            sys.stdout.write(printable(f"node {node['name']} is {node['state']}") + "\n")

        return asking(given, change)

    return quick


def quick_nodes(words: list[str]) -> int | None:
    """``corral nodes`` (``--json``), as the full command line prints it."""
    given = read_options(words, CLIENT_VALUES, {"--json": ("json", True)})
    if given is None:
        return None

    def nodes(client: Any) -> None:
        rows = client.nodes()
        if given.get("json"):
            import json

            sys.stdout.write(json.dumps(rows, indent=2) + "\n")
            return
        from corral.job_views import print_nodes

        print_nodes(rows)

    return asking(given, nodes)


def asking(given: dict[str, Any], ask: Callable[[Any], None]) -> int:
    """Run ``ask`` with a client of the service ``given`` names; the exit code (a
    refusal said as the full command line says it)."""
    from corral.api.client import Client
    from corral.errors import CorralError

    try:
        with Client(given.get("url"), given.get("token")) as client:
            ask(client)
    except CorralError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


HELP_WIDTH = 80
"""The width click wraps help at, at most: the kept pages' (see corral.cli.help_pages)."""


def quick_help(verb: str | None) -> int | None:
    """``corral --help`` or ``corral VERB --help``: the page kept in the package, on a
    terminal at least as wide as it (as ``shutil.get_terminal_size`` reads it, like
    click); None where there is none, or the terminal is narrower (Typer wraps it)."""
    name = verb or "corral"
    if not name.replace("-", "").isalpha():
        return None
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        width = int(columns)
    else:
        try:
            width = os.get_terminal_size(sys.__stdout__.fileno()).columns  # type: ignore[union-attr]
        except (AttributeError, ValueError, OSError):
            width = HELP_WIDTH
    if width < HELP_WIDTH:
        return None
    page = os.path.join(os.path.dirname(__file__), "data", "help", f"{name}.txt")
    try:
        with open(page, encoding="utf-8") as handle:
            text = handle.read()
    except OSError:
        return None
    sys.stdout.write(text)
    return 0


def quick_version(words: list[str]) -> int | None:
    """``corral --version``."""
    if words:
        return None
    from corral import __version__

    print(f"corral {__version__}")
    return 0


QUICK: dict[str, Callable[[list[str]], int | None]] = {
    "submit": quick_submit,
    "queue": quick_queue,
    "--version": quick_version,
    "show": quick_show,
    "nodes": quick_nodes,
    "logs": quick_logs,
    "history": quick_history,
    "set-priority": quick_set_priority,
    "drain": node_verb("drain"),
    "undrain": node_verb("resume"),
}
QUICK.update({verb: bulk_verb(verb) for verb in BULK_VERBS})
"""The verbs answered here when their words allow."""


READER_GONE = 141
"""The exit status of a command whose reader went (``| head``): a shell's 128 + SIGPIPE."""


def main() -> None:
    """``corral``: the quick path where it applies, else the full command line."""
    words = sys.argv[1:]
    quick = QUICK.get(words[0]) if words else None
    asked: Callable[[], int | None] | None = None
    if words == ["--help"] or (len(words) == 2 and words[1] == "--help"):
        asked = lambda: quick_help(words[0] if len(words) == 2 else None)  # noqa: E731
    elif quick is not None:
        asked = lambda: quick(words[1:])  # noqa: E731
    if asked is not None:
        try:
            code = asked()
            if code is not None:
                sys.stdout.flush()
        except BrokenPipeError:
            # the reader went (corral show 12 | head -3): quietly, as C programs end
            # there, and with nothing left to flush at exit
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(READER_GONE)
        if code is not None:
            sys.exit(code)
    from corral.cli import main as full

    full()


if __name__ == "__main__":
    main()
