"""Hub model ids checked before any weight is read: a valid id the hub has (or the local cache,
offline), at the asked revision, not gated; else why it cannot be had from here.

Nothing here imports huggingface_hub at import time: it is imported inside the functions.
"""

from __future__ import annotations

import errno
import json
import os
from dataclasses import dataclass
from pathlib import Path

from recipe_engine.errors import RecipeError, StageFailed, closest

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
    # otherwise None (not cached) or a "known missing" marker
    snapshot = Path(found).parent if isinstance(found, str) else None
    if snapshot is not None and holds_weights(snapshot):
        return HubModel(cached=snapshot)
    if not hub_offline() and ask_hub(model_id, revision, where, kind="model"):
        _fetch_what_plan_reads(model_id, revision, cache)
        return HubModel()  # the weights the cache lacks, the load downloads
    at = f" at revision {revision}" if revision else ""
    download = f"hf download {model_id}" + (f" --revision {revision}" if revision else "")
    why = (
        "HF_HUB_OFFLINE=1 is set, so it cannot be downloaded"
        if hub_offline()
        else "the hub did not answer from here (set HF_HUB_OFFLINE=1 to use only the cache)"
    )
    held = (
        "which the local Hugging Face cache holds only in part (a config, no weights)"
        if snapshot is not None
        else "which is not in the local Hugging Face cache"
    )
    return HubModel(
        unavailable=f"{where.subject} is the hub model {model_id}{at}, {held} ({cache}), and "
        f"{why}.{_cached_hint(model_id, cache)} Download it where the hub is reachable "
        f"(`{download}`), or point at a local folder instead ({_local_fix(where.key)})."
    )


# The small files a plan decides from (architecture, chat template, image processor): with them
# cached, a plan made before the first download decides as one made after it, so both give
# the stage one key. Weights are left to the load.
PLANNING_FILES = (
    "config.json",
    "generation_config.json",
    "tokenizer_config.json",
    "chat_template.jinja",
    "chat_template.json",
    "preprocessor_config.json",
    "processor_config.json",
)


def _fetch_what_plan_reads(model_id: str, revision: str | None, cache: Path) -> None:
    from huggingface_hub import snapshot_download

    try:
        snapshot_download(
            model_id,
            revision=revision,
            allow_patterns=list(PLANNING_FILES),
            cache_dir=cache,
            etag_timeout=HUB_TIMEOUT_S,
        )
    except Exception:  # noqa: BLE001 - the hub just answered; a failure now shows at load
        pass


def holds_weights(snapshot: Path) -> bool:
    """Whether a cached snapshot has every weight file a load reads. The cache fills file by
    file: a config read while planning leaves a snapshot that holds only that."""
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if (snapshot / index).is_file():
            try:
                shards = set(json.loads((snapshot / index).read_text())["weight_map"].values())
            except (OSError, ValueError, KeyError, TypeError, AttributeError):
                return True  # a damaged index: the folder check says what is wrong with it
            return all((snapshot / str(shard)).is_file() for shard in shards)
    names = ("model.safetensors", "pytorch_model.bin", "adapter_model.safetensors")
    return any((snapshot / name).is_file() for name in names)


def ask_hub(repo_id: str, revision: str | None, where: Where, *, kind: str) -> bool:
    """Whether the hub answered for a model or dataset repository; refuses what it answered
    no to: a repository it does not have, a revision it does not have or cannot read, and a
    gated one whose files this machine may not download (the hub answers a gated
    repository's info, and refuses its files: the first one is asked for, as a download
    would)."""
    from huggingface_hub import HfApi, get_hf_file_metadata, hf_hub_url
    from huggingface_hub.errors import HfHubHTTPError

    try:
        info = HfApi().repo_info(repo_id, repo_type=kind, revision=revision, timeout=HUB_TIMEOUT_S)
        first = next((s.rfilename for s in info.siblings or []), None)
        if info.gated and first is not None:
            url = hf_hub_url(repo_id, first, repo_type=kind, revision=info.sha)
            get_hf_file_metadata(url=url, timeout=HUB_TIMEOUT_S)
    except HfHubHTTPError as error:
        refusal = _refusal(error, Asked(repo_id, kind, revision), where)
        if refusal is not None:
            raise refusal from None
        return False  # the hub answered with a server error: as good as unreachable
    except Exception:  # noqa: BLE001 - any transport failure (DNS, proxy, timeout) alike
        return False
    return True


@dataclass(frozen=True)
class Asked:
    """What the hub was asked about: a repository of a kind, at a revision."""

    repo_id: str
    kind: str  # "model" | "dataset"
    revision: str | None


def _refusal(error: Exception, asked: Asked, where: Where) -> RecipeError | None:
    """What the hub's answer means for the user, or None when it is not a refusal (a server
    error, a failure in transit)."""
    from huggingface_hub.errors import (
        BadRequestError,
        GatedRepoError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    local, revision = _local_fix(where.key), asked.revision
    name = f"hub {asked.kind} {asked.repo_id}"
    revision_key = f"{'data' if asked.kind == 'dataset' else 'model'}.revision"
    if isinstance(error, GatedRepoError):
        return where.error(
            f"is the {name}, which is gated: accept its terms on its hub page and log in "
            f"(`hf auth login`, or HF_TOKEN), or point at a local copy ({local})."
        )
    if isinstance(error, RevisionNotFoundError):
        return where.error(
            f"is the {name}, which has no revision {revision!r}. Fix {revision_key} (a branch, "
            "tag or commit of that repository)."
        )
    if isinstance(error, RepositoryNotFoundError):
        return where.error(
            f"is the {name}, which the hub does not have (or it is private: log in with "
            f"`hf auth login`). Check the spelling, or point at a local copy ({local})."
        )
    if isinstance(error, BadRequestError):
        said = str(error).splitlines()[-1].strip()
        return where.error(
            f"is the {name} at revision {revision!r}, which the hub cannot read ({said}). Fix "
            f"{revision_key}: a branch, tag or commit of that repository."
        )
    return None


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
    if "data" in parts:
        data = ".".join(parts[: parts.index("data") + 1])
        return f"{data}.source=local {data}.path=<file or folder>"
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


# --------------------------------------------------------------------------- downloads

# The files from_pretrained and the processor read (weights under the names from_pretrained
# looks for); a repository's other files (ONNX, GGUF, original checkpoints) stay on the hub.
LOADED_FILES = ("*.json", "*.jinja", "*.txt", "*.model", "*.tiktoken", "model*.safetensors")
ADAPTER_FILES = ("adapter_model.safetensors",)
PICKLE_FILES = ("pytorch_model*.bin", "adapter_model.bin")


def download_model(model_id: str, revision: str | None, *, allow_pickle: bool) -> None:
    """Every file a load of `model_id` reads, into the local Hugging Face cache, before it is
    read: a download that fails part-way is one message (StageFailed) instead of a loader's
    guess. huggingface_hub resumes a dropped connection itself (a Range request from where it
    stopped, a few times); a file reaches the cache only once whole, and a partial one is
    deleted, so nothing half-downloaded is ever loaded."""
    from huggingface_hub import constants, snapshot_download

    patterns = [*LOADED_FILES, *ADAPTER_FILES, *(PICKLE_FILES if allow_pickle else ())]
    try:
        snapshot_download(model_id, revision=revision, allow_patterns=patterns)
    except Exception as error:  # noqa: BLE001 - whatever stopped it, the fix is the same
        raise StageFailed(
            _download_failure(f"hub model {model_id}", revision, error, constants.HF_HUB_CACHE)
        ) from error


def _download_failure(name: str, revision: str | None, error: Exception, cache: str) -> str:
    at = f" at {revision[:12]}" if revision else ""
    if isinstance(error, OSError) and error.errno in (errno.ENOSPC, errno.EDQUOT):
        return (
            f"downloading {name}{at} into {cache} stopped: no space left on that disk. Free "
            "space there (or point HF_HOME at a disk with room) and rerun: the files already "
            "whole are kept, no partial one is. Nothing was trained or committed."
        )
    cause = str(error).strip().splitlines()[0] if str(error).strip() else ""
    return (
        f"downloading {name}{at} failed ({type(error).__name__}: {cause}), after "
        f"huggingface_hub's own resumed attempts. The files already whole are kept in {cache}, "
        "no partial one is: rerun when the hub is reachable. Nothing was trained or committed."
    )
