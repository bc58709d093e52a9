"""The invariant every command keeps, whatever it is given: exit 0, or exit 2 with exactly one
`error:` line (naming what is wrong and the fix); never a traceback; nothing written on a
refusal; nothing of the user's changed. (`run` may also exit 1, a stage that failed in
training, with its one `error:` line.)

`Example` is one command with the user's files it reads; `check` runs it in this process (the
engine's `main`, as the console script calls it) and raises `Broken` with what broke. A broken
example is saved under tests/fuzz/found/ (`save`), and tests/fuzz/test_found.py replays every
saved one on each `make test`, so a bug the fuzzer found stays found.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import shutil
import traceback
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path

from logging_state import logging_as_it_was

from recipe_engine.cli.main import main

FOUND = Path(__file__).parent / "found"
USER = "{user}"  # in an argument: the folder of the user's own files for this example
OUT = "{out}"  # the output root, which a refusal must leave unmade
outcomes: Counter[int] = Counter()  # exit codes of the examples `check` ran (make fuzz reports)


@dataclass(frozen=True)
class Example:
    """A command line (after the program name) and the user's files it reads, by relative
    path: text, or bytes as a latin-1 string (so an example is plain JSON). `model` copies a
    built-in tiny model to `model/` first; `cut` truncates files to a length and `remove`
    deletes them, after the files are laid out."""

    argv: tuple[str, ...]
    files: dict[str, str] = field(default_factory=dict)
    binary: tuple[str, ...] = ()  # the files whose text is bytes as latin-1
    model: str | None = None
    cut: dict[str, int] = field(default_factory=dict)
    remove: tuple[str, ...] = ()
    what: str = ""  # which fuzzer made it

    def lay_out(self, user: Path) -> None:
        if self.model:
            from recipe_engine.resolve.tiny import build_tiny_model

            shutil.copytree(build_tiny_model(self.model), user / "model")
        for name, text in self.files.items():
            path = user / name
            path.parent.mkdir(parents=True, exist_ok=True)
            data = text.encode("latin-1") if name in self.binary else text.encode()
            path.write_bytes(data)
        for name, length in self.cut.items():
            if (user / name).is_file():
                (user / name).write_bytes((user / name).read_bytes()[:length])
        for name in self.remove:
            (user / name).unlink(missing_ok=True)

    def command(self, user: Path, out: Path) -> list[str]:
        return [a.replace(USER, str(user)).replace(OUT, str(out)) for a in self.argv]


class Broken(AssertionError):
    """The invariant broke: what happened, for the report and the saved case."""


def snapshot(folder: Path) -> dict[str, str]:
    """Every file under `folder` by content hash (folders as such, links by their target)."""
    found: dict[str, str] = {}
    for path in sorted(folder.rglob("*")) if folder.exists() else []:
        name = str(path.relative_to(folder))
        if path.is_symlink():
            found[name] = f"-> {os.readlink(path)}"
        elif path.is_file():
            found[name] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            found[name] = "/"
    return found


def check(example: Example, workdir: Path, outputs: Path | None = None) -> int:
    """Run `example` in a fresh `workdir` and raise Broken unless the invariant holds; the
    exit code otherwise. `outputs`: an output root the engine wrote before (copied in as
    `out`), which a refusal must leave as it was."""
    shutil.rmtree(workdir, ignore_errors=True)
    user, out = workdir / "user", workdir / "out"
    user.mkdir(parents=True)
    if outputs is not None:
        shutil.copytree(outputs, out, symlinks=True)
    example.lay_out(user)
    before, outputs_before = snapshot(user), snapshot(out)
    code, stderr = _run(example.command(user, out), cwd=workdir)
    outcomes[code] += 1
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    allowed = (0, 1, 2) if example.argv[:1] == ("run",) else (0, 2)
    if "Traceback" in stderr or code not in allowed:
        raise Broken(f"exit {code}, a traceback or an unexpected exit:\n{stderr[-4000:]}")
    if code != 0 and len(errors) != 1:
        raise Broken(f"exit {code} with {len(errors)} `error:` lines:\n{stderr[-4000:]}")
    if code == 2 and snapshot(out) != outputs_before:
        changed = sorted(set(snapshot(out).items()) ^ set(outputs_before.items()))
        raise Broken(f"a refusal wrote or changed {changed[:5]}:\n{errors}")
    if snapshot(user) != before:
        raise Broken(f"the user's files changed: {sorted(set(snapshot(user)) ^ set(before))}")
    return code


def _run(argv: list[str], cwd: Path) -> tuple[int, str]:
    """`main(argv)` in `cwd`, its exit code and what it printed to stderr (an exception that
    escapes it is what a user would see as a traceback)."""
    stderr, stdout = io.StringIO(), io.StringIO()
    previous = Path.cwd()
    os.chdir(cwd)
    try:
        with (
            contextlib.redirect_stderr(stderr),
            contextlib.redirect_stdout(stdout),
            logging_as_it_was(),
        ):
            try:
                code = main(argv)
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else 1
            except BaseException:  # noqa: BLE001 - exactly what the invariant forbids
                traceback.print_exc()
                code = 1
    finally:
        os.chdir(previous)
    return code, stderr.getvalue()


def save(example: Example, why: str) -> Path:
    """Keep a broken example as a case tests/fuzz/test_found.py replays."""
    record = asdict(example)
    text = json.dumps(record, indent=1, sort_keys=True)
    path = FOUND / f"{hashlib.sha256(text.encode()).hexdigest()[:12]}.json"
    FOUND.mkdir(exist_ok=True)
    lines = [line.strip() for line in why.splitlines() if line.strip()]
    broke = [lines[0], lines[-1]] if len(lines) > 1 else lines  # what, and the error's own line
    path.write_text(json.dumps({**record, "broke": broke}, indent=1))
    return path


def load(path: Path) -> Example:
    record = json.loads(path.read_text())
    record.pop("broke", None)
    for name in ("argv", "binary", "remove"):
        record[name] = tuple(record.get(name, ()))
    return Example(**record)
