"""Resolve a recipe: every stage's model and rows made concrete, in the order stages train.

`resolve_recipe` reads as the list of what a recipe needs from the world: the machine, the
store's hub pins, then per stage its model (source, inventory, files, chat template) and its
rows (each way the planner may read them). Every read happens here, and every cache is keyed
by what was read, so `plan` decides on plain data.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recipe_engine.config.schema import DataConfig, EngineConfig, ModelConfig, StageConfig
from recipe_engine.errors import RecipeError, unknown_key
from recipe_engine.files import JsonObject
from recipe_engine.hashing import canonical_hash
from recipe_engine.resolve import cache, templates
from recipe_engine.resolve import data as rows_data
from recipe_engine.resolve.data import chat_template_setting, data_identity
from recipe_engine.resolve.formats import format_taking, is_plain_text
from recipe_engine.resolve.held_out import HeldOut, rows_identity
from recipe_engine.resolve.hub_revisions import HubRevision, HubRevisions
from recipe_engine.resolve.inputs import (
    SAMPLE_CHARS,
    LongestRow,
    ModelFiles,
    ModelInputs,
    RecipeInputs,
    Rows,
    StageInputs,
    TemplateFacts,
    image_sizes,
)
from recipe_engine.resolve.inventory import ModelInventory, model_inventory
from recipe_engine.resolve.machine import Machine, detect_machine
from recipe_engine.resolve.models import model_location
from recipe_engine.resolve.reads import read_once
from recipe_engine.resolve.row_shapes import SHAPES
from recipe_engine.resolve.sources import PARENT, InitSource, model_source, parent_source
from recipe_engine.resolve.template_tokens import longest_tokens, saved_tokenizer, template_tokens
from recipe_engine.trainers import TRAINERS
from recipe_engine.trainers.kind import LabelCounts

SNAPSHOTS = Path(__file__).parent / "model_snapshots"
PROCESSOR_FILES = ("preprocessor_config.json", "processor_config.json")


def resolve_recipe(
    cfg: EngineConfig, parents: Mapping[str, str | None], machine: Machine | None = None
) -> RecipeInputs:
    """The inputs of every stage, `parents` in training order (a child after its parent)."""
    revisions = HubRevisions.of_store(cfg.output_root)  # read only: `run` pins
    surveyed: dict[str, Rows] = {}
    stages: dict[str, StageInputs] = {}
    for name, parent in parents.items():
        stage = cfg.stage[name]
        if parent is None:
            model = _root_model(name, stage, cfg.model, revisions)
        else:
            model = dataclasses.replace(stages[parent].model, init=parent_source(parent))
        data = _format_for_trainer(stage_data(name, cfg.data, stage.data), stage.trainer)
        data = _held_out_setting(data, _evaluates(cfg))
        data, revision = _at_commit(data, revisions)
        rows = _rows_each_way(data, model, cfg.seed, surveyed)
        model = _renders_tools(model, rows[""])
        rows = {way: dataclasses.replace(read, hub_revision=revision) for way, read in rows.items()}
        tokens = longest_tokens(model.files, next(iter(rows.values())).longest)
        stages[name] = StageInputs(name, model, rows, deepspeed_config(name, stage.train), tokens)
    return RecipeInputs(machine or detect_machine(), stages)


def stage_data(name: str, recipe_data: DataConfig, keys: Mapping[str, Any] | None) -> DataConfig:
    """The recipe's data with the stage's own `data` keys in place of the recipe's."""
    fields = {f.name for f in dataclasses.fields(DataConfig)}
    for key in keys or {}:
        if key not in fields:
            raise unknown_key(f"stage.{name}.data.{key}", fields, "a stage's data (data keys)")
    return dataclasses.replace(recipe_data, **(keys or {}))


def _format_for_trainer(data: DataConfig, trainer: str) -> DataConfig:
    """The data read in the one format that holds a named trainer's rows, where `auto` would
    never detect them (prompts: `formats.format_taking`); other data as it is."""
    if data.format != "auto" or trainer not in TRAINERS:
        return data
    taken = format_taking(TRAINERS[trainer].rows)
    return dataclasses.replace(data, format=taken) if taken else data


def _evaluates(cfg: EngineConfig) -> bool:
    """Whether the recipe asks held-out rows: its stages are evaluated after training, or it
    has an evaluation stage (which measures a trained stage on the rows that stage held out
    of the same data, so that stage must not train on them)."""
    return cfg.eval.enabled or any(s.evaluate_only for s in cfg.stage.values())


def _held_out_setting(data: DataConfig, evaluated: bool) -> DataConfig:
    """The data with the automatic hold-out turned off (`data.eval_fraction=0`) where no
    evaluation asks held-out rows: then every row trains, and the stage's manifest says so
    (`compare` reads that record)."""
    if data.eval_fraction is None and not evaluated:
        return dataclasses.replace(data, eval_fraction=0.0)
    return data


def _at_commit(data: DataConfig, revisions: HubRevisions) -> tuple[DataConfig, HubRevision | None]:
    """Hub data at the commit its revision resolves to (given, pinned or resolved now), which
    the rows are read at and the key hashes; other data as it is."""
    if data.source != "hub" or not data.path:
        return data, None
    revision = revisions.resolve(str(data.path), data.revision, kind="dataset")
    if revision is None:  # neither the hub nor the cache knows: reading it says why
        return data, None
    return dataclasses.replace(data, revision=revision.commit), revision


def deepspeed_config(name: str, train: Mapping[str, Any]) -> JsonObject | None:
    """The stage's own DeepSpeed config: a mapping in `train.deepspeed`, or the JSON file it
    names (None: the engine's default)."""
    config = train.get("deepspeed")
    if not isinstance(config, str):
        return dict(config) if config else None
    try:
        return json.loads(Path(config).expanduser().read_text())
    except (OSError, ValueError) as error:
        raise RecipeError(
            f"`stage.{name}.train.deepspeed` is {config}, which is not a readable DeepSpeed "
            f"JSON config ({error}). Point it at one, or drop it for the default ZeRO-2.",
            key=f"stage.{name}.train.deepspeed",
        ) from None


# --------------------------------------------------------------------------- the model


def _root_model(
    name: str, stage: StageConfig, recipe_model: ModelConfig, revisions: HubRevisions
) -> ModelInputs:
    init, entry = model_source(name, stage, recipe_model, revisions)
    inventory = None if init.unavailable else _inventory(entry, init)
    snapshot = _snapshot_inventory(entry) if inventory is None else None
    return ModelInputs(
        init=init,
        entry=entry,
        inventory=inventory,
        snapshot=snapshot,
        files=_model_files(entry, init),
        template=_template(init, entry),
    )


def _inventory(model: ModelConfig, init: InitSource) -> ModelInventory | None:
    """The model's parameters and modules from its config on the meta device (remembered per
    config.json content); None when its config cannot be read here."""
    config = _config_file(model, init)
    if config is None:  # a hub config not cached, or an adapter folder: read each time
        return model_inventory(model, init.location)
    inputs = {"config": cache.file_digest(config), "kind": model.kind}

    def read() -> JsonObject | None:
        found = model_inventory(model, init.location)
        return found.to_dict() if found else None

    recorded = cache.remembered("inventory", inputs, read)
    return ModelInventory.from_dict(recorded) if recorded else None


def _config_file(model: ModelConfig, init: InitSource) -> Path | None:
    if model.source == "hub" and not model.gguf_file:
        return _hub_cached(model, "config.json")
    config = Path(init.location or model_location(model)) / "config.json"
    return config if config.is_file() else None


def _snapshot_inventory(model: ModelConfig) -> ModelInventory | None:
    """The shipped snapshot's inventory of a hub model whose own config is out of reach."""
    folder = snapshot_folder(model.id)
    if folder is None:
        return None
    local = dataclasses.replace(model, source="local", id=str(folder), gguf_file=None)
    try:
        return _inventory(local, InitSource("local", "snapshot", str(folder)))
    except RecipeError:
        return None


def snapshot_folder(model_id: str) -> Path | None:
    """The shipped config snapshot of a hub model id (`org/name` -> `org--name/`)."""
    folder = SNAPSHOTS / model_id.replace("/", "--")
    return folder if (folder / "config.json").is_file() else None


def _model_files(model: ModelConfig, init: InitSource) -> ModelFiles | None:
    """(config.json, processor config) of the model: its folder, the hub cache, or the
    engine's snapshot; None when none of them has it."""
    folder = _model_folder(model, init)
    if folder is None or not (folder / "config.json").is_file():
        return None
    config = json.loads((folder / "config.json").read_text())
    tokenizer = saved_tokenizer(folder)
    template = template_tokens(tokenizer) if tokenizer else None
    return ModelFiles(config, processor_config(folder, model), template, tokenizer)


def processor_config(folder: Path, model: ModelConfig) -> JsonObject:
    """The processor's config as from_pretrained builds it: its files merged (an image
    processor's settings nested in processor_config.json read as its own), then the model
    entry's `processor` settings over them (what the kwargs of from_pretrained do)."""
    processor: JsonObject = {}
    for name in PROCESSOR_FILES:
        if (folder / name).is_file():
            data = json.loads((folder / name).read_text())
            processor = {**data.get("image_processor", {}), **data, **processor}
    return {**processor, **model.processor}


def _model_folder(model: ModelConfig, init: InitSource) -> Path | None:
    if model.source in ("tiny", "local"):
        try:
            return Path(init.location or model_location(model))
        except RecipeError:
            return None
    cached = _hub_cached(model, "config.json")
    return cached.parent if cached is not None else snapshot_folder(model.id)


def _hub_cached(model: ModelConfig, name: str) -> Path | None:
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(model.id, name, revision=model.revision)
    return Path(found) if isinstance(found, str) else None


def _template(init: InitSource, model: ModelConfig) -> TemplateFacts:
    """The chat template of the weights' tokenizer (a stage's output keeps its base's
    processor, so a child reads the model entry's)."""
    location = init.location if init.kind != PARENT else _entry_location(model)
    return TemplateFacts(
        found=templates.has_chat_template(location, model.revision),
        support=templates.template_support(location, model.revision),
    )


def _renders_tools(model: ModelInputs, rows: Rows) -> ModelInputs:
    """The model with whether its chat template renders tool calls, read where the rows call
    tools (transformers renders a sample: not imported for other rows)."""
    if not SHAPES[rows.format].tools:
        return model
    init, entry = model.init, model.entry
    location = init.location if init.kind != PARENT else _entry_location(entry)
    tools = templates.renders_tools(location, entry.revision)
    return dataclasses.replace(model, template=dataclasses.replace(model.template, tools=tools))


def _entry_location(model: ModelConfig) -> str | None:
    try:
        return model_location(model)
    except RecipeError:  # a GGUF file that cannot be had here: `run` refuses it
        return None


# --------------------------------------------------------------------------- the rows


def _rows_each_way(
    data: DataConfig, model: ModelInputs, seed: int, surveyed: dict[str, Rows]
) -> dict[str, Rows]:
    """The rows as written, and read the other way where the planner may choose it: plain-text
    rows (prompt/completion, preference pairs) through the chat template (`auto` with a
    template at hand), and rows read with `chat_template=true` read as `auto` too (as written:
    `plan.rows` tells by them whether the setting chose anything)."""
    kind = model.entry.kind
    given = survey(data, kind, seed, surveyed)
    setting = chat_template_setting(data)
    ways = {"": given}
    if setting == "auto" and is_plain_text(given.format) and model.template.found:
        ways["true"] = survey(dataclasses.replace(data, chat_template="true"), kind, seed, surveyed)
    if setting == "true":
        ways["auto"] = survey(dataclasses.replace(data, chat_template="auto"), kind, seed, surveyed)
    return ways


@dataclass(frozen=True)
class SurveyedRows:
    """What checking every row of a dataset found (the cache's "rows" record)."""

    format: str
    train_rows: int
    eval_rows: int
    held_out: HeldOut
    read_as: str
    labels: LabelCounts | None

    def to_json(self) -> JsonObject:
        labels = self.labels
        return {
            "format": self.format,
            "train_rows": self.train_rows,
            "eval_rows": self.eval_rows,
            "held_out": self.held_out.value,
            "read_as": self.read_as,
            "labels": [labels.desirable, labels.undesirable] if labels else None,
        }

    @classmethod
    def from_json(cls, record: JsonObject) -> SurveyedRows:
        labels = record["labels"]
        return cls(
            record["format"],
            record["train_rows"],
            record["eval_rows"],
            HeldOut(record["held_out"]),
            record["read_as"],
            LabelCounts(*labels) if labels else None,
        )


def survey(config: DataConfig, kind: str, seed: int, surveyed: dict[str, Rows]) -> Rows:
    """A dataset's rows, checked row by row (once per exact data) and described.

    Stages reading the same rows share one `Rows`, so a run reads them once.
    """
    identity = data_identity(config)
    inputs = _survey_inputs(identity, kind, config.eval_fraction, seed)
    if canonical_hash(inputs) in surveyed:
        return surveyed[canonical_hash(inputs)]
    read: list[Any] = []

    def splits() -> Any:
        if not read:
            read.append(rows_data.load_splits(config, kind=kind, seed=seed))
        return read[0]

    def check() -> SurveyedRows:
        found = splits()
        return SurveyedRows(
            format=found.format,
            train_rows=len(found.train),
            eval_rows=len(found.eval) if found.eval is not None else 0,
            held_out=found.held_out,
            read_as=found.source_format,
            labels=_label_counts(found.train),
        )

    # Hub data may change upstream under the same name: checked every time.
    if config.source == "hub":
        checked, longest = check(), _longest(splits)
    else:
        recorded = cache.remembered("rows", inputs, lambda: check().to_json())
        checked = SurveyedRows.from_json(recorded) if recorded else check()
        lengths = cache.remembered("lengths", inputs, lambda: _longest(splits).to_json())
        longest = LongestRow.from_json(lengths) if lengths else _longest(splits)
    rows = Rows(
        config,
        kind,
        seed,
        rows_identity(identity, checked.held_out),
        checked.format,
        checked.train_rows,
        checked.eval_rows,
        held_out=checked.held_out,
        read_as=checked.read_as,
        labels=checked.labels,
        longest=longest,
    )
    if read:  # read once: the run's steps take them from here
        read_once(rows.read_key, lambda: read[0])
    surveyed[canonical_hash(inputs)] = rows
    return rows


def _survey_inputs(identity: str, kind: str, eval_fraction: float | None, seed: int) -> JsonObject:
    """What a survey of rows is remembered by: the data's identity (automatic and
    `eval_fraction=0` share it) with the hold-out setting, and the seed only where an
    explicit `eval_fraction` draws with it (automatic rows are chosen by their content, so
    every seed of an experiment reads them from one record)."""
    inputs = {"identity": identity, "kind": kind, "eval_fraction": eval_fraction}
    return {**inputs, "seed": seed} if eval_fraction else inputs


def _label_counts(train: Any) -> LabelCounts | None:
    """The training rows of unpaired feedback by label; None for other rows."""
    if "label" not in train.column_names:
        return None
    desirable = sum(bool(label) for label in train["label"])
    return LabelCounts(desirable, len(train) - desirable)


def _longest(splits: Any) -> LongestRow:
    """The longest training row: text characters, messages and images; and the training
    images' sizes."""
    longest, sizes = LongestRow(), set()
    for row in splits().train:
        longest = longest.longest(_row_counts(row))
        sizes.update(_image_sizes(row))
    return dataclasses.replace(longest, image_sizes=image_sizes(sizes))


def _image_sizes(row: Mapping[str, Any]) -> list[tuple[int, int]]:
    """The (width, height) of the row's images (PIL images, as `datasets` decodes them)."""
    sizes = [getattr(image, "size", None) for image in row.get("images") or []]
    return [(int(width), int(height)) for width, height in filter(None, sizes)]


def _row_counts(row: Mapping[str, Any]) -> LongestRow:
    """The row's sizes as one sequence the model runs: a preference pair's is its prompt and
    the longer answer (the trainer runs each answer after the prompt)."""
    if "chosen" in row and "rejected" in row:
        shorter = min(("rejected", "chosen"), key=lambda key: _text_length(row[key]))
        row = {key: value for key, value in row.items() if key != shorter}
    texts, messages, listed, placed = [], 0, 0, 0
    for key, value in row.items():
        if key == "images":
            listed += len(value or [])
            continue
        for text, is_message, image in _walk(value):
            texts += [text] if text else []
            messages += is_message
            placed += image
    if not messages:  # plain text: a turn each
        messages = sum(1 for key in ("prompt", "completion", "chosen", "rejected") if key in row)
    chars, sample = sum(map(len, texts)), "\n".join(texts)[:SAMPLE_CHARS]
    # An image part in a message marks where one of the row's `images` goes: the same image.
    return LongestRow(chars, messages, max(listed, placed), sample=sample)


def _text_length(value: Any) -> int:
    return sum(len(text) for text, _, _ in _walk(value))


def _walk(value: Any) -> list[tuple[str, int, int]]:
    """(text, is-a-message, is-an-image) for every piece inside a row's field."""
    if isinstance(value, str):
        return [(value, 0, 0)]
    if isinstance(value, Mapping):
        if value.get("type") == "image":
            return [("", 0, 1)]
        found = [("", 1 if "role" in value else 0, 0)]
        for key in ("content", "text"):
            if key in value and value[key] is not None:
                found += _walk(value[key])
        return found
    if isinstance(value, list | tuple):
        return [piece for item in value for piece in _walk(item)]
    return []
