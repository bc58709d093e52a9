"""What `resolve` yields and `plan` decides on: each stage's inputs made concrete, as data.

Nothing here reads anything: a `Rows` reads its rows (once, on first use) only when the run
asks for them; the planner takes its survey (format, split sizes, longest row) as it is.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

from recipe_engine.config.schema import DataConfig, ModelConfig
from recipe_engine.files import JsonObject
from recipe_engine.hashing import canonical_hash
from recipe_engine.resolve.formats import written_as
from recipe_engine.resolve.held_out import (
    AUTO_MAX_ROWS,
    AUTO_MIN_DATA_ROWS,
    AUTO_MIN_ROWS,
    AUTO_SHARE,
    HeldOut,
)
from recipe_engine.resolve.hub_revisions import HubRevision
from recipe_engine.resolve.inventory import ModelInventory
from recipe_engine.resolve.machine import Machine
from recipe_engine.resolve.sources import InitSource
from recipe_engine.trainers.kind import LabelCounts

if TYPE_CHECKING:
    from recipe_engine.resolve.data import DataSplits


@dataclass(frozen=True)
class TemplateFacts:
    """The chat template of the weights' tokenizer, as far as it can be read here."""

    found: bool | None  # None: cannot be told here (a hub tokenizer not in the local cache)
    support: str  # what it allows for assistant-only loss (plan.trainer_settings: MARKED ...)
    tools: bool | None = None  # renders tool calls (templates.renders_tools); None: not read


SAMPLE_CHARS = 65536  # enough text to fill any max_length the estimate caps at


@dataclass(frozen=True)
class TemplateTokens:
    """What the chat template adds to a row, in tokens (resolve.template_tokens)."""

    fixed: int  # once a row: the conversation's opening, a default system message
    per_message: int  # around each message: role markers, separators


@dataclass(frozen=True)
class SavedTokenizer:
    """A tokenizer saved in a model folder: where, and its files' digests (what a count made
    with it is remembered by), read once per model."""

    folder: str
    files: Mapping[str, str]  # file name -> sha256


@dataclass(frozen=True)
class ModelFiles:
    """config.json and the processor's config, as the memory estimate reads them."""

    config: JsonObject  # the model's config.json, as transformers wrote it
    processor: JsonObject  # its processor's config files, merged (empty: none)
    template: TemplateTokens | None = None  # None: no chat template or tokenizer read here
    tokenizer: SavedTokenizer | None = None  # None: no tokenizer files here


@dataclass
class ModelInputs:
    """A stage's model made concrete: where its weights come from and what they hold."""

    init: InitSource
    entry: ModelConfig  # the model entry the weights descend from (a hub commit pinned)
    inventory: ModelInventory | None  # parameters and modules; None: config unreadable here
    snapshot: ModelInventory | None  # the shipped snapshot's, where `inventory` is None
    files: ModelFiles | None  # None: neither the model's config nor a snapshot at hand
    template: TemplateFacts


# Distinct image sizes a survey keeps exactly; a dataset with more keeps, for each aspect
# ratio (to 1%), its largest image, and of those the largest by pixels. The estimate counts the
# size that gives the most tokens: a Qwen2-VL-style processor's tokens follow the pixels
# (within its limits), an Idefics3-style processor's follow the aspect ratio.
MAX_IMAGE_SIZES = 1024


@dataclass(frozen=True)
class LongestRow:
    """The longest training row as one sequence the model runs (a preference pair's: its
    prompt and the longer answer), for the memory estimate; and the training images' sizes."""

    chars: int = 0  # text characters
    messages: int = 0  # chat messages (plain text: one a turn)
    images: int = 0
    # The training images' distinct (width, height) in pixels (`image_sizes`), sorted.
    image_sizes: tuple[tuple[int, int], ...] = ()
    # The text of the row with the most characters (its pieces, a line each; the first
    # SAMPLE_CHARS of it): what the stage's tokenizer counts (resolve.template_tokens).
    sample: str = ""

    def longest(self, other: LongestRow) -> LongestRow:
        """Each measure the larger of the two rows'; the text of the one with more characters;
        the image sizes of both."""
        return LongestRow(
            max(self.chars, other.chars),
            max(self.messages, other.messages),
            max(self.images, other.images),
            image_sizes((*self.image_sizes, *other.image_sizes)),
            other.sample if other.chars > self.chars else self.sample,
        )

    def to_json(self) -> JsonObject:  # the cache's "lengths" record
        return {
            "chars": self.chars,
            "messages": self.messages,
            "images": self.images,
            "image_sizes": [list(size) for size in self.image_sizes],
            "sample": self.sample,
        }

    @classmethod
    def from_json(cls, record: JsonObject) -> LongestRow:
        sizes = tuple((int(width), int(height)) for width, height in record["image_sizes"])
        return cls(record["chars"], record["messages"], record["images"], sizes, record["sample"])


def image_sizes(sizes: Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """Distinct image sizes (width, height), sorted, at most MAX_IMAGE_SIZES of them."""
    found = sorted(set(sizes))
    if len(found) <= MAX_IMAGE_SIZES:
        return tuple(found)
    by_aspect: dict[int, tuple[int, int]] = {}
    for width, height in found:
        aspect = round(100 * math.log(width / height))
        kept = by_aspect.get(aspect)
        if kept is None or width * height > kept[0] * kept[1]:
            by_aspect[aspect] = (width, height)
    largest = sorted(by_aspect.values(), key=lambda size: size[0] * size[1], reverse=True)
    return tuple(sorted(largest[:MAX_IMAGE_SIZES]))


@dataclass(frozen=True)
class Rows:
    """A stage's rows: identity, format after detection and split sizes, checked row by row.

    Data, not the rows themselves: those are read at most once per process by their content
    key (`splits`, `resolve.reads`): by `resolve` when it has not surveyed this exact data
    before, otherwise by the first step of the run that needs them.
    """

    config: DataConfig
    kind: str  # the model kind the rows are for (vlm | causal_lm)
    seed: int  # an explicit eval_fraction's split depends on it
    identity: str  # of the training rows (`held_out.rows_identity`)
    format: str  # rows as TRL gets them: messages | prompt_completion | vlm
    train_rows: int
    eval_rows: int  # 0: no held-out rows
    held_out: HeldOut = HeldOut.SPLIT  # how the held-out rows were obtained
    # How the rows were read: their format, where a judged row's prompt came from, columns
    # read under another tool's name (`detection.Layout.describe`).
    read_as: str = ""
    labels: LabelCounts | None = None  # the training rows' labels (unpaired feedback only)
    longest: LongestRow = field(default_factory=LongestRow)  # for the memory estimate
    # How prompt/completion text reaches the model: "through the chat template", or as
    # plain text and why (`plan` prints it on the data line); "" for conversations.
    rendering: str = ""
    # Hub data's commit and how it was chosen (the config's revision is that commit).
    hub_revision: HubRevision | None = None

    @property
    def read_key(self) -> str:
        """What the rows are read from and how: their content key, the data settings, the
        model kind and the seed (an explicit eval_fraction's split)."""
        read = {"rows": self.identity, "data": asdict(self.config), "kind": self.kind}
        return canonical_hash({**read, "seed": self.seed})

    def splits(self) -> DataSplits:
        """The rows themselves, read once per process (`resolve.reads`)."""
        from recipe_engine.resolve.data import load_splits
        from recipe_engine.resolve.reads import read_once

        return read_once(
            self.read_key, lambda: load_splits(self.config, kind=self.kind, seed=self.seed)
        )

    @property
    def source(self) -> str:
        """The input format the rows were read as (`data.format`, or what `auto` detected):
        `read_as` opens with its name."""
        return self.read_as.split(" ", 1)[0] if self.read_as else self.config.format

    def describe(self) -> str:
        rows = f"{self.train_rows} train / {self.held_out_text}"
        if self.rendering:  # the rows' own format, then how they reach the model
            return (
                f"{self.origin} ({self._read(written_as(self.format))}, {self.rendering}, {rows})"
            )
        return f"{self.origin} ({self._read(self.format)}, {rows})"

    def _read(self, shape: str) -> str:
        """The rows' shape, after how they were read where that says more (`alpaca as
        messages`, `preference (prompt from `conversations`)`)."""
        if not self.read_as or self.read_as.startswith(written_as(shape)):
            return self.read_as or shape
        return f"{self.read_as} as {shape}"

    @property
    def held_out_text(self) -> str:
        """How many rows are held out, and how where the data did not say so itself."""
        if self.held_out is HeldOut.AUTO:
            return (
                f"{self.eval_rows} held out automatically ({AUTO_SHARE:.0%}, "
                f"{AUTO_MIN_ROWS} to {AUTO_MAX_ROWS} rows, chosen by the rows' content; "
                "data.eval_fraction=0 trains on all)"
            )
        if self.held_out is HeldOut.TOO_FEW:
            return f"none held out (fewer than {AUTO_MIN_DATA_ROWS} rows: too few to spare any)"
        if self.held_out is HeldOut.NONE:
            return "none held out"
        return f"{self.eval_rows} held out"

    @property
    def origin(self) -> str:
        """Where the rows come from, as the user named it."""
        source, path = self.config.source, self.config.path
        if source == "local":
            return f"data file {path}"
        return (
            f"{'hub dataset' if source == 'hub' else 'built-in dataset'} {path or self.config.name}"
        )


@dataclass
class StageInputs:
    """One stage's inputs: its model, and its rows read each way the planner may choose
    (`data`: by `data.chat_template` setting; "" is the setting as written)."""

    name: str
    model: ModelInputs
    data: dict[str, Rows]
    deepspeed: JsonObject | None = None  # the stage's own DeepSpeed config, read
    # The longest row's text in the stage model's tokenizer, without the chat template's
    # tokens (ModelFiles.template); None where the tokenizer is not at hand.
    longest_tokens: int | None = None


@dataclass
class RecipeInputs:
    machine: Machine
    stages: dict[str, StageInputs]
