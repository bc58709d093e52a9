"""The probes a comparison asks: the root stage's held-out split (or the rows the run already
read), a probe file read and checked like training data, or a `.txt` of prompts. Each `Probe`
keeps its row's shape and carries its reference and the `input` / `image` text the records show.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recipe_engine.errors import RecipeError
from recipe_engine.resolve.row_shapes import asks_question
from recipe_engine.run.measuring import described, probes_of
from recipe_engine.store.records import Manifest
from recipe_engine.store.scores import Probe


def probe_set(
    probes: str | Path | None,
    root: tuple[Path, Manifest],
    seed: int,
    held_out: Any,
    limit: int | None,
) -> tuple[list[Probe], str]:
    """The probes (at most `limit`) and their source; an empty set is a user error.
    `root` is the root stage's output folder and manifest."""
    rows, source = _probe_rows(probes, root, seed, held_out)
    if limit is not None:
        rows = rows[: int(limit)]
    if not rows:
        raise RecipeError(f"The probe set ({source}) has no rows.", key="probes")
    return rows, source


def _probe_rows(
    probes: str | Path | None, root: tuple[Path, Manifest], seed: int, held_out: Any
) -> tuple[list[Probe], str]:
    """The probes and a description of their source."""
    if probes is None:
        return _held_out_rows(root[1], seed, held_out)
    path = Path(probes).expanduser().resolve()
    if not path.exists():
        raise RecipeError(f"Probe file {path} does not exist.", key="probes")
    if path.suffix.lower() == ".txt":
        return _prompt_rows(path), f"prompts in {path}"
    chat_template = probe_chat_template(*root)
    return probe_file_rows(path, root[1].kind, seed, chat_template), f"rows of {path}"


def _held_out_rows(root_manifest: Manifest, seed: int, held_out: Any) -> tuple[list[Probe], str]:
    """The root stage's held-out split: the rows given (the run just read them), else read."""
    from recipe_engine.resolve.data import data_config, load_splits

    data = root_manifest.data
    if not data:
        raise RecipeError("The root stage's manifest names no data; pass probes=FILE.", "probes")
    if held_out is not None:
        return _asked_of(held_out, data), f"held-out split of data `{data.get('name')}`"
    splits = load_splits(data_config(data), kind=root_manifest.kind, seed=seed)
    if splits.eval is None:
        raise RecipeError(
            f"Data `{data.get('name') or data.get('path')}` has no held-out split to probe "
            "with. Pass probes=FILE (rows like the data, or a .txt of prompts).",
            key="probes",
        )
    return _asked_of(splits.eval, data), f"held-out split of data `{data.get('name')}`"


def _asked_of(rows: Any, data: Any) -> list[Probe]:
    """The held-out rows as probes; rows that ask nothing (language-modeling text) refused."""
    if len(rows) and not asks_question(rows[0]):
        raise RecipeError(
            f"The root stage's held-out rows (data `{data.get('name') or data.get('path')}`) "
            "are language-modeling text, which asks no question: there is nothing to compare "
            "answers on (each stage's held-out loss is in its run's table). Pass probes=FILE "
            "(rows with questions and answers, or a .txt of prompts) to compare the models.",
            key="probes",
        )
    return probes_of(rows)


def _prompt_rows(path: Path) -> list[Probe]:
    """A `.txt` file's prompts, one a line: asked without references (no task metrics)."""
    prompts = [line.strip() for line in path.read_text().splitlines() if line.strip()]
    rows = [
        {
            "messages": [
                {"role": "user", "content": p},
                {"role": "assistant", "content": ""},  # dropped: generation sees the prompt
            ],
            "images": [],
        }
        for p in prompts
    ]
    return [described(row, reference=None) for row in rows]


def probe_file_rows(path: Path, kind: str, seed: int, chat_template: str = "auto") -> list[Probe]:
    """A probe file's rows, read and checked like training data (`data.chat_template`: how
    plain prompt/completion rows are asked)."""
    from recipe_engine.config.schema import DataConfig
    from recipe_engine.resolve.data import load_splits

    probes = DataConfig(
        path.name, path=str(path), eval_split=None, eval_fraction=0, chat_template=chat_template
    )  # every row is a probe
    splits = load_splits(probes, kind=kind, seed=seed)
    return probes_of(splits.train)


def probe_chat_template(folder: Path, manifest: Manifest) -> str:
    """Plain prompt/completion probes are asked as the run's own rows were: through the chat
    template where the plan put them there (or the tokenizer has one, when the run's rows were
    conversations already), as plain text where it did not. `folder` and `manifest` are the
    root stage's."""
    from recipe_engine.resolve.templates import read_chat_template

    decided = str(manifest.data.get("chat_template") or "auto").lower()
    if decided in ("true", "false"):
        return decided
    return "true" if read_chat_template(str(folder)) else "false"
