"""What the trackers (`report_to`) get from one run of a stage: a run name and TensorBoard's folder.

Both belong to the run, not to the stage's weights, so they are decided here at run time and
never enter the plan or the stage key. TensorBoard's default folder in transformers is
`<output_dir>/runs/...`, inside the stage's checkpoint folder, which the commit deletes; the
engine points it at the run folder instead, one sub-folder per stage.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from recipe_engine.config.library_objects import LibraryKwargs

# transformers' TensorBoardCallback reads this when the Trainer builds it (SFTConfig has no
# logging_dir in transformers 5); unset, it writes under output_dir.
TENSORBOARD_VARIABLE = "TENSORBOARD_LOGGING_DIR"


def with_run_name(settings: Mapping[str, Any], recipe: str, stage: str) -> LibraryKwargs:
    """The stage's SFTConfig arguments with `run_name` defaulting to `<recipe>/<stage>`, so
    W&B, MLflow and the others name runs by what they trained, not by a checkpoint path."""
    if settings.get("run_name"):
        return dict(settings)
    return {**settings, "run_name": f"{recipe}/{stage}"}


def tensorboard_dir(run_dir: Path, stage: str, train: Mapping[str, Any]) -> Path:
    """Where TensorBoard writes this stage's events: `stage.<name>.train.logging_dir` if set,
    else the user's TENSORBOARD_LOGGING_DIR, else `<run folder>/tensorboard/<stage>`."""
    chosen = train.get("logging_dir") or os.environ.get(TENSORBOARD_VARIABLE)
    folder = Path(chosen).expanduser() if chosen else run_dir / "tensorboard" / stage
    return folder.absolute()


@contextmanager
def tensorboard_logging_dir(folder: Path) -> Iterator[None]:
    """TENSORBOARD_LOGGING_DIR set to `folder` while the Trainer (and so its TensorBoard
    callback, which keeps the folder) is built; the process's own value is back afterwards."""
    before = os.environ.get(TENSORBOARD_VARIABLE)
    os.environ[TENSORBOARD_VARIABLE] = str(folder)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(TENSORBOARD_VARIABLE, None)
        else:
            os.environ[TENSORBOARD_VARIABLE] = before
