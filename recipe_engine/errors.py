"""User-facing errors: one message naming the key and the fix, exit code 2, no traceback."""

from __future__ import annotations

import difflib
from collections.abc import Iterable

EXIT_USER_ERROR = 2
EXIT_INCOMPLETE = 1  # the run stopped or left something undone; what trained is kept


class RecipeError(Exception):
    """A problem with the user's recipe, data, paths or hardware request.

    The CLI prints ``str(error)`` and exits with code 2; it never shows a traceback.
    """

    def __init__(self, message: str, key: str | None = None) -> None:
        self.key = key
        super().__init__(message)


class StageFailed(Exception):
    """Training went wrong in a way only the user can fix (e.g. the loss became NaN).

    The stage is not committed; the CLI prints ``str(error)`` and exits with code 1.
    """


# Words users type for an option that spelling alone would not lead to (`gpu` is closer to
# `cpu` than to `cuda`): the option they mean, where it is one of the options.
SYNONYMS = {
    "gpu": "cuda",
    "gpus": "cuda",
    "nvidia": "cuda",
    "metal": "mps",
    "apple": "mps",
    "dp": "ddp",
    "data_parallel": "ddp",
    "ds": "deepspeed",
    "zero": "deepspeed",
    "zero2": "deepspeed",
    "zero3": "deepspeed",
    "train": "run",
    "fit": "run",
    "finetune": "run",
    "dry-run": "plan",
    "dryrun": "plan",
    "list": "runs",
    "ls": "runs",
}


def closest(word: str, options: Iterable[str]) -> str | None:
    """The option closest to `word` (or the one its synonym names), None when none is close."""
    options = list(options)
    typed = str(word).strip().lower()
    synonym = difflib.get_close_matches(typed, SYNONYMS, n=1, cutoff=0.8)  # `trian`: train
    meant = SYNONYMS.get(typed) or (SYNONYMS[synonym[0]] if synonym else None)
    if meant in options:
        return meant
    matches = difflib.get_close_matches(word, options, n=1, cutoff=0.6)
    return matches[0] if matches else None


def did_you_mean(word: str, options: Iterable[str]) -> str:
    """' Did you mean `x`?' for the closest option, or '' when nothing is close."""
    match = closest(word, options)
    return f" Did you mean `{match}`?" if match else ""


def unknown_key(key: str, valid: Iterable[str], where: str) -> RecipeError:
    valid = sorted(valid)
    hint = did_you_mean(key.rsplit(".", 1)[-1], valid)
    listing = ", ".join(valid) if len(valid) <= 12 else ", ".join(valid[:12]) + ", ..."
    return RecipeError(
        f"Unknown key `{key}` in {where}.{hint} Valid keys: {listing}.",
        key=key,
    )
