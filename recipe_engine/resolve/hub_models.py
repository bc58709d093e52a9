"""Hub model ids checked before any weight is read: a valid id the hub has (or the local cache,
offline), at the asked revision, not gated; else why it cannot be had from here.

Nothing here imports huggingface_hub at import time: it is imported inside the functions.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from recipe_engine.errors import RecipeError, closest

# One question to the hub while planning, not a download with retries.
HUB_TIMEOUT_S = 5


@dataclass(frozen=True)
class Where:
    """Who pointed at the folder: the message names it, the error carries the key."""

    key: str
    subject: str

    def error(self, text: str) -> RecipeError:
        return RecipeError(f"{self.subject} {text}", key=self.key)

    def refuse(self, folder: Path, text: str) -> RecipeError:
        return self.error(f"is {folder}: {text}")


# --------------------------------------------------------------------------- hub ids


@dataclass(frozen=True)
class HubModel:
    """What planning could learn of a hub model without downloading weights."""

    cached: Path | None = None  # the cached snapshot folder holding its config
    unavailable: str | None = None  # why it cannot be loaded from here (offline, no answer)


def check_hub_model(
    model_id: str, revision: str | None, *, key: str, cache_dir: Path | None = None
) -> HubModel:
    """Refuse a malformed hub id, one the hub does not have (or not at that revision, or
    gated), or one that cannot be fetched because HF_HUB_OFFLINE is set.

    A model whose config is in the local cache is checked there (the caller may run
    `check_model_folder` on `cached`). Otherwise, online, the hub is asked once with a short
    timeout and no retries. When the model cannot be had from here (offline and not cached,
    or the hub did not answer) `unavailable` says why and what to do: `plan` notes it for a
    plan made for another machine, `run` refuses with it. `cache_dir` defaults to
    huggingface_hub's.
    """
    return check_hub(model_id, revision, Where(key, f"`{key}`"), cache_dir)


def hub_offline() -> bool:
    """HF_HUB_OFFLINE as huggingface_hub read it at import, or as the environment has it now."""
    from huggingface_hub import constants

    value = os.environ.get("HF_HUB_OFFLINE", "").strip().upper()
    return bool(constants.HF_HUB_OFFLINE) or value in constants.ENV_VARS_TRUE_VALUES


def check_hub(
    model_id: str, revision: str | None, where: Where, cache_dir: Path | None
) -> HubModel:
    _check_repo_id(model_id, where)
    from huggingface_hub import constants, try_to_load_from_cache

    # Resolved here, once, for both lookups: scan_cache_dir keeps its own import-time copy.
    cache = Path(cache_dir if cache_dir is not None else constants.HF_HUB_CACHE)
    found = try_to_load_from_cache(model_id, "config.json", cache_dir=cache, revision=revision)
    if isinstance(found, str):  # otherwise None (not cached) or a "known missing" marker
        return HubModel(cached=Path(found).parent)
    if not hub_offline() and _ask_hub(model_id, revision, where):
        return HubModel()
    at = f" at revision {revision}" if revision else ""
    download = f"hf download {model_id}" + (f" --revision {revision}" if revision else "")
    why = (
        "HF_HUB_OFFLINE=1 is set, so it cannot be downloaded"
        if hub_offline()
        else "the hub did not answer from here (set HF_HUB_OFFLINE=1 to use only the cache)"
    )
    return HubModel(
        unavailable=f"{where.subject} is the hub model {model_id}{at}, which is not in the "
        f"local Hugging Face cache ({cache}), and {why}.{_cached_hint(model_id, cache)} "
        f"Download it where the hub is reachable (`{download}`), or point at a local folder "
        f"instead ({_local_fix(where.key)})."
    )


def _ask_hub(model_id: str, revision: str | None, where: Where) -> bool:
    """Whether the hub answered; refuses what it answered no to."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import (
        GatedRepoError,
        HfHubHTTPError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    try:
        HfApi().model_info(model_id, revision=revision, timeout=HUB_TIMEOUT_S)
    except GatedRepoError:
        raise where.error(
            f"is the hub model {model_id}, which is gated: accept its terms on its hub page "
            "and log in (`hf auth login`), or point at a local copy "
            f"({_local_fix(where.key)})."
        ) from None
    except RevisionNotFoundError:
        raise where.error(
            f"is the hub model {model_id}, which has no revision {revision!r}. Fix "
            "model.revision (a branch, tag or commit of that repository)."
        ) from None
    except RepositoryNotFoundError:
        raise where.error(
            f"is {model_id}, which the hub does not have (or it is private: log in with "
            f"`hf auth login`). Check the spelling, or point at a local folder "
            f"({_local_fix(where.key)})."
        ) from None
    except HfHubHTTPError:
        return False  # the hub answered with a server error: as good as unreachable
    except Exception:  # noqa: BLE001 - any transport failure (DNS, proxy, timeout) alike
        return False
    return True


def _check_repo_id(model_id: str, where: Where) -> None:
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(model_id)
    except HFValidationError:
        looks_local = str(model_id).startswith(("/", ".", "~")) or Path(str(model_id)).exists()
        fix = (
            f"For a local folder use {_local_fix(where.key)}."
            if looks_local
            else "Use owner/name or name, e.g. Qwen/Qwen2.5-0.5B-Instruct."
        )
        raise where.error(
            f"is {model_id!r}, which is not a Hugging Face model id (owner/name or name; "
            "letters, digits, '-', '_' and '.'; no '--' or '..'; at most 96 characters). "
            f"{fix}"
        ) from None


def _local_fix(key: str) -> str:
    """The override that points the same slot at a local folder."""
    parts = key.split(".")
    if parts[0] == "stage" and len(parts) > 2:
        return f"stage.{parts[1]}.init.path=/path/to/folder"
    return "model.source=local model.id=/path/to/folder"


def _cached_hint(model_id: str, cache_dir: Path) -> str:
    """' Did you mean ...?' against the model repos in the cache (case-insensitively)."""
    from huggingface_hub import scan_cache_dir
    from huggingface_hub.errors import CacheNotFound, CorruptedCacheException

    try:
        repos = [r.repo_id for r in scan_cache_dir(cache_dir).repos if r.repo_type == "model"]
    except (CacheNotFound, CorruptedCacheException, OSError, ValueError):
        return ""  # a hint only: no cache, or one it cannot read, leaves the message as it is
    if model_id in repos:
        return " The cache holds other revisions of it."
    by_lower = {repo.lower(): repo for repo in repos}
    near = closest(model_id.lower(), by_lower)
    return f" Did you mean `{by_lower[near]}` (in the cache)?" if near else ""
