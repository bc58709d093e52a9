"""Hub models and datasets at a commit: a hub init or hub data is planned, keyed and loaded
at an exact revision.

A hub id names a repository whose branches move. Keyed by its id alone, a stage trained from
it would be reused after upstream changed, as if nothing had. So `plan` resolves the revision
a model entry (`model.revision`) or hub data (`data.revision`) asks for (null = the default
branch, a branch or a tag) to the commit it points at now, and the stage key, the plan, the
run's `from_pretrained` / `load_dataset` and the manifest all carry that commit.

The first `run` of a repository without a revision records the commit it used in the store's
pins file (`<output_root>/store/hub-revisions.json`, by kind: models, datasets); later plans of
that store use the pinned commit even when the branch has moved, so a rerun reuses what was
trained. A revision the user names is theirs: a commit is used as given, a branch or tag is
followed (resolved at every plan, never pinned) - that is how a user asks for another revision
than the pinned one.

Resolution asks the hub once with a short timeout, or, offline or unanswered, reads the local
Hugging Face cache (`models--owner--name/refs/<branch>`, which holds the commit). A model
neither cached nor reachable stays unresolved, as before: `plan` notes it, `run` refuses it.
`plan` only reads the pins file; `run` writes it (atomically, under a lock).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from recipe_engine.errors import RecipeError
from recipe_engine.files import JsonObject, atomic_write_json, file_lock
from recipe_engine.resolve import hub_models

PINS_FILE = "hub-revisions.json"
PINS_VERSION = 2  # 1: models only
KINDS = ("model", "dataset")  # huggingface_hub's repo_type, and the pins file's sections
# A full commit hash, as the hub and the cache's snapshot folders name commits.
COMMIT = re.compile(r"[0-9a-f]{40}")
# Where a commit came from: named by the user, pinned by an earlier run, resolved now.
GIVEN, PINNED, HUB, CACHE = "given", "pinned", "hub", "cache"


@dataclass(frozen=True)
class HubRevision:
    """The commit a hub repository is planned at, and how the plan came to it."""

    repo_id: str
    requested: str | None  # model.revision / data.revision as written (None: default branch)
    commit: str
    origin: str  # GIVEN | PINNED | HUB | CACHE
    pinned: str | None = None  # when a run pinned it (ISO 8601, UTC); PINNED only
    kind: str = "model"  # "model" | "dataset"

    @property
    def needs_pin(self) -> bool:
        """A default branch resolved now: the run records it for later plans."""
        return self.requested is None and self.origin in (HUB, CACHE)

    def describe(self) -> str:
        """As `plan` prints it: the short commit and why it is this one."""
        short = self.commit[:12]
        if self.origin == GIVEN:
            return f"{short} (model.revision)"
        if self.origin == PINNED:
            key = "model.revision" if self.kind == "model" else "data.revision"
            return f"{short} (pinned {str(self.pinned)[:10]}; {key}=<branch> for another)"
        ref = self.requested or "default branch"
        where = "the hub" if self.origin == HUB else "the local cache"
        pin = "; `run` pins it" if self.needs_pin else ""
        return f"{short} ({ref}, resolved now from {where}{pin})"


def pins_path(output_root: str | Path) -> Path:
    """The pins file of the store under `output_root` (the folder store.Store uses)."""
    return Path(output_root).resolve() / "store" / PINS_FILE


class HubRevisions:
    """One plan's view of hub revisions: the store's pins, and each repository resolved once."""

    def __init__(self, pins: Pins | None = None) -> None:
        self.pins = pins or {kind: {} for kind in KINDS}
        self._resolved: dict[tuple[str, str, str | None], HubRevision | None] = {}

    @classmethod
    def of_store(cls, output_root: str | Path) -> HubRevisions:
        return cls(read_pins(pins_path(output_root)))

    def resolve(
        self, repo_id: str, requested: str | None, kind: str = "model"
    ) -> HubRevision | None:
        """The commit to plan `repo_id` at; None when neither the hub nor the cache knows."""
        if requested is not None and COMMIT.fullmatch(requested):
            return HubRevision(repo_id, requested, requested, GIVEN, kind=kind)
        pin = self.pins[kind].get(repo_id) if requested is None else None
        if pin is not None:
            return HubRevision(repo_id, None, pin.commit, PINNED, pin.pinned, kind)
        key = (kind, repo_id, requested)
        if key not in self._resolved:
            self._resolved[key] = _resolve_now(repo_id, requested, kind)
        return self._resolved[key]


# --------------------------------------------------------------------------- resolving


def _resolve_now(repo_id: str, requested: str | None, kind: str) -> HubRevision | None:
    if not _valid_id(repo_id):
        return None  # hub_models.check_hub_model (data: check_hub_data) refuses it
    if not hub_models.hub_offline():
        commit = _hub_commit(repo_id, requested, kind)
        if commit is not None:
            return HubRevision(repo_id, requested, commit, HUB, kind=kind)
    commit = cached_commit(repo_id, requested, kind=kind)
    return HubRevision(repo_id, requested, commit, CACHE, kind=kind) if commit else None


def _valid_id(repo_id: str) -> bool:
    from huggingface_hub.errors import HFValidationError
    from huggingface_hub.utils import validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError:
        return False
    return True


def _hub_commit(repo_id: str, requested: str | None, kind: str) -> str | None:
    """The commit the hub says `requested` points at; None when it did not answer."""
    from huggingface_hub import HfApi

    try:
        info = HfApi().repo_info(
            repo_id, repo_type=kind, revision=requested, timeout=hub_models.HUB_TIMEOUT_S
        )
    except Exception:  # noqa: BLE001 - refusals are check_hub_model's; the cache decides now
        return None
    commit = getattr(info, "sha", None)
    return commit if isinstance(commit, str) and COMMIT.fullmatch(commit) else None


def cached_commit(
    repo_id: str, requested: str | None, cache_dir: Path | None = None, *, kind: str = "model"
) -> str | None:
    """The commit the local cache records for a branch or tag (refs/<name>), as
    huggingface_hub itself resolves a revision offline."""
    from huggingface_hub import constants
    from huggingface_hub.file_download import repo_folder_name

    cache = Path(cache_dir if cache_dir is not None else constants.HF_HUB_CACHE)
    ref = cache / repo_folder_name(repo_id=repo_id, repo_type=kind) / "refs"
    try:
        commit = (ref / (requested or constants.DEFAULT_REVISION)).read_text().strip()
    except (OSError, UnicodeDecodeError):
        return None
    return commit if COMMIT.fullmatch(commit) else None


# --------------------------------------------------------------------------- the pins file


@dataclass(frozen=True)
class Pin:
    """The commit a run pinned a repository at, and when (ISO 8601, UTC)."""

    commit: str
    pinned: str


# kind -> repository id -> its pin
Pins = dict[str, dict[str, Pin]]


def read_pins(path: Path) -> Pins:
    """Pinned commits by kind and repository id; none when the store has no pins file yet."""
    if not path.is_file():
        return {kind: {} for kind in KINDS}
    try:
        document = json.loads(path.read_text())
        pins = {kind: _section(document.get(f"{kind}s", {})) for kind in KINDS}
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
        pins = None
    if pins is None or not all(
        COMMIT.fullmatch(str(pin.commit)) for section in pins.values() for pin in section.values()
    ):
        raise RecipeError(
            f"{path} is not a valid hub revisions file (JSON: models / datasets -> commit, "
            "pinned). Fix it, or delete it to pin every hub repository again at its current "
            "commit.",
            key="output_root",
        )
    return pins


def _section(entries: JsonObject) -> dict[str, Pin]:
    return {str(k): Pin(v["commit"], v["pinned"]) for k, v in entries.items()}


def pin_revisions(output_root: str | Path, revisions: Iterable[HubRevision]) -> list[HubRevision]:
    """Record the commits a run uses for repositories without a revision; the first pin of a
    repository stays (concurrent runs, sweep jobs). Returns the pins added."""
    wanted = {(r.kind, r.repo_id): r for r in revisions if r.needs_pin}
    if not wanted:
        return []
    path = pins_path(output_root)
    with file_lock(path.parent / "locks" / f"{PINS_FILE}.lock"):
        pins = read_pins(path)  # again, under the lock: another job may have pinned since
        added = [r for (kind, repo_id), r in wanted.items() if repo_id not in pins[kind]]
        if added:
            now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
            for r in added:
                pins[r.kind][r.repo_id] = Pin(r.commit, now)
            atomic_write_json(path, _pins_document(pins))
    return added


def _pins_document(pins: Pins) -> JsonObject:
    sections = {
        f"{kind}s": {
            repo_id: {"commit": pin.commit, "pinned": pin.pinned}
            for repo_id, pin in sorted(pins[kind].items())
        }
        for kind in KINDS
    }
    return {"version": PINS_VERSION, **sections}
