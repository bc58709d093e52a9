"""A disk that fills while a stage writes: one message naming the stage and the disk.

Whichever write hits the full disk first (safetensors, torch.save, a JSON record, a tokenizer
file) fails in its library's own words: an OSError with errno ENOSPC, a SafetensorError, a
RuntimeError from torch's stream writer. What they share is the disk: so a stage that fails
while the disk under its store has no room left failed for that reason. Nothing is lost by
saying so: a stage is visible only once committed (store.commit), and a rerun resumes only from
a checkpoint whose trainer_state.json was written last and whole.
"""

from __future__ import annotations

import errno
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from recipe_engine.errors import StageFailed

FULL = (errno.ENOSPC, errno.EDQUOT)
# Less free space than this, after a failed write, is a full disk (file systems keep a few
# blocks back; a write of a few megabytes fails well before free space reaches zero).
NEARLY_FULL_BYTES = 1 << 20


@contextmanager
def full_disk_is_one_message(stage: str, store_root: Path) -> Iterator[None]:
    try:
        yield
    except StageFailed:
        raise
    except Exception as error:
        if not ran_out_of_space(error, store_root):
            raise
        raise StageFailed(
            f"stage `{stage}` stopped: the disk holding {store_root} is full ({_free(store_root)}"
            f" free; {type(error).__name__} while writing). Nothing was committed and no partial "
            "write is trusted: free space there (`python -m recipe_engine runs gc` removes "
            "unreferenced stages) and rerun; it resumes from the last complete checkpoint."
        ) from error


def ran_out_of_space(error: BaseException, folder: Path) -> bool:
    """Whether `error` (or what caused it) is a full disk, or the disk under `folder` is full
    now."""
    seen: BaseException | None = error
    while seen is not None:
        if getattr(seen, "errno", None) in FULL or "No space left on device" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    try:
        return shutil.disk_usage(_existing(folder)).free < NEARLY_FULL_BYTES
    except OSError:
        return False


def _existing(folder: Path) -> Path:
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def _free(folder: Path) -> str:
    try:
        free = shutil.disk_usage(_existing(folder)).free
    except OSError:
        return "unknown"
    return f"{free / 1024:.0f} KiB" if free < 1 << 30 else f"{free / (1 << 30):.1f} GiB"
