"""What a trainer kind adds to a stage beyond learning from its rows: a model it learns from
(a teacher), a frozen reference, code of the user's (rewards). Each capability is one module
behind `Capability`; a kind lists the ones it has (`TrainerKind.capabilities`), and the layers
ask a stage's capabilities, never whether it has a particular one:

- `sections`: the stage's config sections it owns (`teacher`, `rewards`): its declarations;
- `check_config`: those checked before anything is read: set where the kind has the
  capability, and only there;
- `inputs`: other stages whose weights it loads, by role: the graph's edges (ordered first,
  drawn by `plan` and the web view, waited for by a scheduler);
- `plan`: what `plan` decides with it, on the stage as planned so far (`StageFacts`): keys it
  sets among `train`, refusals, notes, what enters the stage key, the user's code a node must
  find, frozen models on the memory estimate, and what `run` loads (`Load`);
- `curves`: which of a stage's logged metrics the web view draws for it;
- `code_from_elsewhere`: whether a setting of its sections, given where only code from one
  folder may run (the web view's overrides), would run code from elsewhere.

A kind's behaviour that is its own (its batches, its loss, its checks) stays a method of its
`TrainerKind`. Pure: plain data in and out, nothing heavy imported.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True)
class Vocabulary:
    """A model's tokenizer as read without loading it: the digests of its vocabulary files
    and its config's `vocab_size`."""

    size: int | None
    files: Mapping[str, str]  # file name -> sha256 (empty: its tokenizer was not read)


@dataclass(frozen=True)
class InputStage:
    """Another stage a stage loads, planned before it."""

    name: str
    fingerprint: str
    params: int  # its parameters as the stage holds them (0: its config was not readable)
    evaluate_only: bool
    vocabulary: Vocabulary | None


@dataclass(frozen=True)
class LabelCounts:
    """How many training rows of unpaired feedback are labelled desirable (true) and
    undesirable (false)."""

    desirable: int
    undesirable: int


@dataclass(frozen=True)
class StageFacts:
    """A stage as `plan` has decided it so far, as plain data: what a kind's checks and a
    capability's plan read."""

    name: str
    train: Mapping[str, Any]  # the stage's `train` keys (its settings class's fields)
    train_rows: int
    world_size: int  # 0: not placed yet (a capability plans before placement)
    rows: str  # the stage's rows as `plan` names them
    labels: LabelCounts | None = None  # unpaired feedback's labels; None: rows without labels
    device: str = "cpu"  # where the stage trains (placement): cuda | cpu | mps; "": not yet
    config: Mapping[str, Any] = field(default_factory=dict)  # its settings, as the recipe's keys
    images: bool = False  # its rows carry images
    lora: bool = False  # it trains an adapter
    params: int = 0  # its model's parameters (0: its config was not readable)
    # Its first `n` training rows, as its trainer gets them: read when asked (`plan` reads
    # rows only where something needs them).
    sample: Callable[[int], Sequence[Mapping[str, Any]]] = lambda n: ()
    vocabulary: Vocabulary | None = None
    inputs: Mapping[str, InputStage] = field(default_factory=dict)  # by role


@dataclass(frozen=True)
class StageCode:
    """Code of the user's a stage runs, keyed by its content (a reward's module): a node that
    runs the stage must find the same."""

    key: str  # `stage.<name>.rewards[i]`
    target: str  # `package.module:function` or `file.py:function`
    digest: str  # sha256 of its module's source, as planned


class Loadable(Protocol):
    """A function of the user's or the engine's a stage's trainer calls, loaded in `run`."""

    def load(self) -> Any: ...


# What `run` loads for a capability and hands the trainer, by the trainer's argument name.
@dataclass(frozen=True)
class FromStage:
    """Another stage's committed weights, frozen (an adapter merged into its base first; an
    evaluation stage's model as it evaluated it)."""

    argument: str
    stage: str
    role: str  # what the stage is to the one that loads it ("teacher")


@dataclass(frozen=True)
class StartingWeights:
    """The stage's starting weights loaded again, frozen: a full fine-tune's reference."""

    argument: str


@dataclass(frozen=True)
class Functions:
    """Functions loaded by content (`Loadable`), handed as one list."""

    argument: str
    functions: tuple[Loadable, ...]


@dataclass(frozen=True)
class NamedStart:
    """The trainer reloads a model itself by the name in the policy's config: that name is the
    folder the stage's starting weights were loaded from (never a hub name)."""


@dataclass(frozen=True)
class DisabledAdapter:
    """The trainer's reference is the policy with its adapter disabled: checked on the built
    trainer (no second model)."""


Load = FromStage | StartingWeights | Functions | NamedStart | DisabledAdapter


@dataclass(frozen=True)
class FrozenModel:
    """A model held frozen beside the policy during training, on the memory estimate."""

    label: str  # "teacher model", "reference copy"
    params: int
    same_storage: bool = False  # stored as the policy's weights are (quantized alike)


@dataclass(frozen=True)
class CapabilityPlan:
    """What a capability decides for one stage."""

    train: Mapping[str, Any] = field(default_factory=dict)  # keys it sets among `train`
    notes: tuple[str, ...] = ()
    key: Mapping[str, Any] = field(default_factory=dict)  # JSON the stage key hashes
    code: tuple[StageCode, ...] = ()
    frozen: tuple[FrozenModel, ...] = ()
    loads: tuple[Load, ...] = ()
    planned: tuple[Any, ...] = ()  # what it keeps on the plan for `run` (the rewards)


NOTHING = CapabilityPlan()


@dataclass(frozen=True)
class InputRef:
    """An input stage a capability names, with the key that names it (for refusals)."""

    stage: str
    key: str


class Capability(Protocol):
    """One thing a kind adds to a stage (see the module's docstring)."""

    name: str
    sections: tuple[str, ...]  # the stage config sections it owns

    def check_config(
        self, stage: str, config: Mapping[str, Any], kind: str, having: Sequence[str]
    ) -> None:
        """Its sections of `config` (the stage's settings as plain data) checked alone: set
        where the stage's kind (`kind`: its name, or `auto`) is one of `having`, the kinds
        with this capability, and only there (an evaluation stage has none)."""

    def inputs(self, stage: str, config: Mapping[str, Any]) -> dict[str, InputRef]:
        """Other stages whose weights it loads, by role."""

    def plan(self, facts: StageFacts) -> CapabilityPlan:
        """What it decides for the stage (RecipeError: what it refuses)."""

    def curves(self, logged: Sequence[str]) -> list[tuple[str, str]]:
        """Of a stage's logged metric keys, the ones the web view draws for it, each with its
        label (label, key)."""

    def code_from_elsewhere(self, setting: str, value: Any, root: Path) -> str | None:
        """Why `setting` (a key under one of its sections: `fn`, `0.fn`), set to `value`
        where only code under `root` may run, would run code from elsewhere; None when it
        would not."""
