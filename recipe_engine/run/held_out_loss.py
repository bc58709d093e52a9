"""The held-out loss of any model, measured as a stage's own trainer measures it.

A training stage records `SFTTrainer.evaluate`'s loss on its held-out rows: TRL tokenizes them,
leaves out of the loss what the stage does not learn (the prompt with completion_only_loss, all
but the assistant's turns with assistant_only_loss) and averages per batch. `compare` measures
the base and every stage on the same rows through the same TRL code with the stage's own loss
settings, so the two numbers differ only where the model differs: compare applies an adapter
to the full-precision base where a QLoRA stage measured on its 4-bit base.

(An own count of "the tokens after the prompt" disagreed with the run wherever a chat template
writes something after the assistant's turn outside its `{% generation %}` block: 4.79 in
compare against 4.39 in the run for a tiny Idefics3 QLoRA stage, the newline after its end of
sequence token counted by one and not the other.)
"""

from __future__ import annotations

import tempfile
from collections.abc import Mapping, Sequence
from typing import Any

from recipe_engine.plan.trainer_settings import choose_loss
from recipe_engine.resolve.converters import TrlRow
from recipe_engine.resolve.data import quietly
from recipe_engine.resolve.row_shapes import LOSS_FLAGS, TRL_COLUMNS, RowShape, row_shape
from recipe_engine.resolve.templates import support_of

# SFTConfig keys that decide which tokens a held-out loss counts and how rows are batched; the
# rest of a stage's settings (optimizer, schedule, checkpoints, launchers) cannot change it.
LOSS_KEYS = (
    "assistant_only_loss",
    "completion_only_loss",
    "loss_type",
    "max_length",
    "truncation_mode",
    "padding_free",
    "pad_to_multiple_of",
    "pad_token",
    "eos_token",
    "chat_template_path",
    "dataset_text_field",
    "dataset_kwargs",
    "remove_unused_columns",
    "per_device_eval_batch_size",
    "bf16",
    "fp16",
)
# SFTConfig's arguments for a held-out loss (LOSS_KEYS), handed to it as they are: TRL's edge.
LossSettings = dict[str, Any]


def loss_settings(trainer: Mapping[str, Any]) -> LossSettings:
    """The stage's SFTConfig arguments that decide its held-out loss."""
    return {key: trainer[key] for key in LOSS_KEYS if key in trainer}


def held_out_loss(
    model: Any, processor: Any, rows: Sequence[Mapping[str, Any]], settings: Mapping[str, Any]
) -> float:
    """`SFTTrainer.evaluate`'s loss of `model` on `rows` (TRL row dicts) with a stage's
    `loss_settings`, on the device the model sits on, in one process (never DataParallel)."""
    import datasets
    from datasets import Dataset

    images, shape = _with_images(rows), row_shape(rows[0])
    # Text rows in their shape's features: messages as written (tool calls), not as Arrow
    # would merge them; image rows as Arrow reads them.
    features = None if images else shape.features(datasets)
    dataset = Dataset.from_list([_trl_row(row, images) for row in rows], features=features)
    settings = _flags_for_rows(settings, shape, processor)
    on_gpu = next(p.device for p in model.parameters()).type == "cuda"
    with quietly():
        return _evaluate(model, processor, dataset, settings, on_gpu)


def _evaluate(
    model: Any, processor: Any, dataset: Any, settings: Mapping[str, Any], on_gpu: bool
) -> float:
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from trl import SFTConfig, SFTTrainer

    # Mixed precision as the stage had it, where it can apply: on a GPU.
    precision = {key: bool(settings.get(key)) and on_gpu for key in ("bf16", "fp16")}
    with tempfile.TemporaryDirectory(prefix="recipe-engine-loss-") as scratch:
        args = SFTConfig(
            output_dir=scratch,
            **{**dict(settings), **precision},
            use_cpu=not on_gpu,
            gradient_checkpointing=False,  # evaluation only: leave the model as it was loaded
            report_to="none",
            disable_tqdm=True,
        )
        _ = args.device  # resolves the device count, then one process uses one device
        args._n_gpu = min(args._n_gpu, 1)
        trainer = SFTTrainer(
            model=model,
            args=args,
            train_dataset=dataset,
            eval_dataset=dataset,
            processing_class=processor,
        )
        for quiet in (PrinterCallback, ProgressCallback):  # compare prints its own table
            trainer.remove_callback(quiet)
        return float(trainer.evaluate()["eval_loss"])


def _flags_for_rows(settings: Mapping[str, Any], shape: RowShape, processor: Any) -> LossSettings:
    """The stage's loss flags, unless the rows are of a kind they cannot apply to (a probe
    file of prompt/completion rows for a stage trained with assistant-only loss, or
    conversations for one trained with completion-only loss: TRL refuses both); then the flags
    the plan would choose for such rows (`choose_loss`)."""
    if not any(settings.get(flag) for flag in LOSS_FLAGS if flag != shape.loss.flag):
        return dict(settings)
    rest = {k: v for k, v in settings.items() if k not in LOSS_FLAGS}
    template = support_of(getattr(processor, "chat_template", None))
    return {**rest, **choose_loss("probes", {}, shape.name, template).flags}


def _with_images(rows: Sequence[Mapping[str, Any]]) -> bool:
    """Text rows carry an empty `images` list in a probe; TRL takes any `images` column for
    vision rows, so it is passed only when a row has an image."""
    return any(row.get("images") for row in rows)


def _trl_row(row: Mapping[str, Any], images: bool) -> TrlRow:
    keep = TRL_COLUMNS if images else TRL_COLUMNS[:-1]
    return {key: row[key] for key in keep if key in row}
