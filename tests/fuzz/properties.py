"""The fuzzer's properties: for every command a strategy makes, the invariant holds
(tests/fuzz/invariant.py). `test_fuzz.py` runs each seeded and bounded inside `make test`;
`long.py` runs them with fresh seeds for as long as `make fuzz` is given.

A property that breaks saves its shrunk example under tests/fuzz/found/ (only the final one,
not every step of shrinking), which `test_found.py` replays from then on.
"""

from __future__ import annotations

import atexit
import functools
import io
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from engine_cli import engine
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.control import current_build_context
from invariant import OUT, USER, Broken, Example, check, outcomes, save
from strategies import TEXT, csv_text, jsonl, overrides, rows

TINY_FILES = (
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
    "generation_config.json",
    "chat_template.jinja",
)


SHORT = (
    "recipe=text-lora",
    "data.max_samples=8",
    "eval.max_samples=2",
    "eval.compare=false",
    "stage.llm.train.max_steps=1",
    "stage.llm.train.per_device_train_batch_size=4",
)


def holds(example: Example, outputs: Path | None = None, found: Example | None = None) -> None:
    """The invariant for `example`, its final (shrunk) failure saved as a found case (`found`:
    the example to save, when `example` was derived from it)."""
    with tempfile.TemporaryDirectory(prefix="fuzz-") as workdir:
        try:
            check(example, Path(workdir) / "w", outputs)
        except Broken as broken:
            if _final():
                print(f"saved {save(found or example, str(broken))}", file=sys.stderr)
            raise


def _final() -> bool:
    """Whether this is the shrunk example Hypothesis reports (outside a search: a replay)."""
    try:
        return current_build_context().is_final
    except Exception:  # noqa: BLE001 - no search running: a found case being replayed
        return False


# --------------------------------------------------------------------------- overrides


@given(argv=overrides())
def overrides_plan(argv: list[str]) -> None:
    holds(Example(("plan", *argv, f"output_root={OUT}"), what="overrides"))


# --------------------------------------------------------------------------- data files


@st.composite
def data_file(draw: st.DrawFn) -> Example:
    """A data file of the user's in any format and encoding, maybe cut short, with the images
    its rows may name (one missing, one not an image)."""
    made = draw(rows())
    kind = draw(st.sampled_from(["jsonl", "json", "csv", "parquet", "saved"]))
    files, binary = _written(made, kind, draw(st.sampled_from(["utf-8", "latin-1", "utf-16"])))
    # What was written: a saved folder, or one file (JSON lines where Arrow could not store).
    name = "data" if any("/" in f for f in files) else next(iter(files))
    if name != "data" and draw(st.integers(0, 4)) == 0:
        cut = {name: draw(st.integers(0, max(0, len(files[name]) - 1)))}
    else:
        cut = {}
    files["broken.png"], binary = "not a png", (*binary, "broken.png")
    recipe = draw(st.sampled_from(["text-lora", "r1-llm-only"]))
    # Sometimes `run` (one short step): rows `plan` accepts, the trainer must take.
    verb = ("run", *SHORT[1:]) if draw(st.integers(0, 5)) == 0 else ("plan",)
    argv = (*verb, f"recipe={recipe}", "data.source=local", f"data.path={USER}/{name}")
    extra = draw(st.sampled_from([(), ("data.format=auto",), ("data.eval_fraction=0.5",)]))
    argv = (*argv, *extra, f"output_root={OUT}")
    return Example(argv, files, binary, cut=cut, what="data")


def _written(made: list[dict[str, object]], kind: str, encoding: str) -> tuple[dict, tuple]:
    """The rows as the files of `kind` (name -> text or latin-1 bytes), and which are bytes."""
    if kind in ("jsonl", "json", "csv"):
        write = {"jsonl": jsonl, "csv": csv_text}.get(kind, lambda m: json.dumps(m, default=str))
        text = write(made)
        raw = text.encode(encoding, errors="replace")
        return {f"data.{kind}": raw.decode("latin-1")}, (f"data.{kind}",)
    try:
        return _parquet(made) if kind == "parquet" else _saved(_table(made))
    except Exception:  # noqa: BLE001 - rows Arrow cannot store: the user would write JSON lines
        return {"data.jsonl": jsonl(made)}, ()


def _parquet(made: list[dict[str, object]]) -> tuple[dict, tuple]:
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pq.write_table(_table(made), buffer)
    return {"data.parquet": buffer.getvalue().decode("latin-1")}, ("data.parquet",)


def _table(made: list[dict[str, object]]):  # noqa: ANN202 - pyarrow is imported lazily
    import pyarrow as pa

    return pa.Table.from_pylist(made)


def _saved(table) -> tuple[dict, tuple]:  # noqa: ANN001
    import datasets

    datasets.disable_progress_bars()
    with tempfile.TemporaryDirectory() as folder:
        datasets.Dataset(table).save_to_disk(folder)
        files = {
            f"data/{p.relative_to(folder)}": p.read_bytes().decode("latin-1")
            for p in Path(folder).rglob("*")
            if p.is_file()
        }
    return files, tuple(files)


@given(example=data_file())
def data_files_plan(example: Example) -> None:
    holds(example)


# --------------------------------------------------------------------------- model folders


@st.composite
def model_folder(draw: st.DrawFn) -> Example:
    """The tiny Qwen2 as the user's own folder, with files cut short, removed or overwritten
    (a garbage header, a config that is not JSON or is JSON of another shape)."""
    cut, remove, files = {}, [], {}
    for name in draw(st.lists(st.sampled_from(TINY_FILES), min_size=1, max_size=3, unique=True)):
        how = draw(st.sampled_from(["cut", "remove", "garbage", "json"]))
        if how == "cut":
            cut[f"model/{name}"] = draw(st.integers(0, 4096))
        elif how == "remove":
            remove.append(f"model/{name}")
        elif how == "garbage":
            files[f"model/{name}"] = draw(TEXT)
        else:
            files[f"model/{name}"] = json.dumps(draw(st.dictionaries(TEXT, TEXT, max_size=3)))
    # Sometimes `run` (one short step): what `plan` accepts, the run must load.
    verb = ("run", *SHORT[1:]) if draw(st.integers(0, 3)) == 0 else ("plan",)
    argv = (*verb, "recipe=text-lora", f"stage.llm.init.path={USER}/model", f"output_root={OUT}")
    return Example(argv, files, model="tiny-qwen2", cut=cut, remove=tuple(remove), what="model")


@given(example=model_folder())
def model_folders_plan(example: Example) -> None:
    holds(example)


# --------------------------------------------------------------------------- store entries


@functools.cache
def trained_store() -> Path:
    """An output root holding one run and its committed stage, trained once per process."""
    root = Path(tempfile.mkdtemp(prefix="fuzz-store-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)  # the process's, gone with it
    done = _engine("run", *SHORT, f"output_root={root}")
    assert done.returncode == 0, done.stderr[-3000:]
    return root


@st.composite
def store_verb(draw: st.DrawFn) -> Example:
    """A verb over a store whose stage entry (or run record) was damaged: a file cut short,
    removed or overwritten."""
    entry = next(p for p in (trained_store() / "store").iterdir() if (p / "COMPLETE").is_file())
    run = next((trained_store() / "runs" / "text-lora").iterdir())
    targets = sorted(
        [f"store/{entry.name}/{p.name}" for p in entry.iterdir() if p.is_file()]
        + [f"runs/text-lora/{run.name}/summary.json"]
    )
    damaged = draw(st.sampled_from(targets))
    how = draw(st.sampled_from(["cut", "remove", "garbage"]))
    verb = draw(
        st.sampled_from(
            [("runs",), ("runs", "gc"), ("inspect", f"{OUT}/store/{entry.name}"), ("plan", *SHORT)]
        )
    )
    files = {f"damage/{damaged}": draw(TEXT)} if how == "garbage" else {}
    return Example(
        (*verb, f"output_root={OUT}") if verb[0] != "inspect" else verb,
        files,
        cut={f"damage/{damaged}": draw(st.integers(0, 200))} if how == "cut" else {},
        remove=(f"damage/{damaged}",) if how == "remove" else (),
        what=f"store {how} {damaged}",
    )


@given(example=store_verb())
def store_entries(example: Example) -> None:
    on_a_damaged_store(example)


def on_a_damaged_store(example: Example) -> None:
    """The damage is applied to a copy of the trained store (the example names the file under
    `damage/`), then the verb runs on it."""
    with tempfile.TemporaryDirectory(prefix="fuzz-outputs-") as copy:
        outputs = Path(copy) / "out"
        shutil.copytree(trained_store(), outputs, symlinks=True)
        _damage(example, outputs)
        holds(Example(example.argv, what=example.what), outputs, found=example)


def _damage(example: Example, outputs: Path) -> None:
    for name, text in example.files.items():
        (outputs / name.removeprefix("damage/")).write_text(text)
    for name, length in example.cut.items():
        path = outputs / name.removeprefix("damage/")
        path.write_bytes(path.read_bytes()[:length])
    for name in example.remove:
        (outputs / name.removeprefix("damage/")).unlink(missing_ok=True)


# --------------------------------------------------------------------------- verb order

STEPS = ("run", "runs gc", "runs rm", "kill", "plan")


@given(steps=st.lists(st.sampled_from(STEPS), min_size=1, max_size=3))
def verb_order(steps: list[str]) -> None:
    """Verbs in any order on one output root, a run killed part-way among them; each keeps
    the invariant, and a last `run` trains (or reuses) the stage and exits 0."""
    with tempfile.TemporaryDirectory(prefix="fuzz-order-") as folder:
        root = Path(folder) / "out"
        for step in [*steps, "run"]:
            _step(step, root)


def _step(step: str, root: Path) -> None:
    args = {
        "run": ("run", *SHORT),
        "plan": ("plan", *SHORT),
        "runs gc": ("runs", "gc"),
        "runs rm": ("runs", "rm", *_newest_run(root)),
    }
    if step == "kill":
        _killed_run(root)
        return
    done = _engine(*args[step], f"output_root={root}")
    outcomes[done.returncode] += 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    ok = done.returncode == 0 or (done.returncode == 2 and len(errors) == 1)
    if not ok or "Traceback" in done.stderr:
        raise Broken(f"{step}: exit {done.returncode}\n{done.stderr[-3000:]}")


def _newest_run(root: Path) -> tuple[str, ...]:
    runs = sorted((root / "runs" / "text-lora").glob("*")) if root.is_dir() else []
    return (str(runs[-1]),) if runs else ("2026-01-01_00-00-00",)


def _killed_run(root: Path) -> None:
    """A run stopped as a user stops it (Ctrl-C, then a kill), a few seconds in."""
    command = [sys.executable, "-m", "recipe_engine", *SHORT, f"output_root={root}"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(4)
    process.send_signal(signal.SIGINT)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def _engine(*args: str) -> subprocess.CompletedProcess:
    return engine(*args, cwd=Path.cwd())


PROPERTIES = {
    "overrides": overrides_plan,
    "data files": data_files_plan,
    "model folders": model_folders_plan,
    "store entries": store_entries,
    "verb order": verb_order,
}
