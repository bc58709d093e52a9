"""How a stage's rows reach the model, and what the trainer and evaluation need of them.

Pure: `resolve` surveyed the rows each way the planner may read them (`StageInputs.data`);
this module picks one and says why on the data line of `plan`.
"""

from __future__ import annotations

import dataclasses

from recipe_engine.config.schema import StageConfig
from recipe_engine.errors import RecipeError
from recipe_engine.resolve.data import chat_template_setting
from recipe_engine.resolve.formats import is_plain_text
from recipe_engine.resolve.held_out import AUTO_MIN_DATA_ROWS, HeldOut
from recipe_engine.resolve.inputs import Rows, StageInputs
from recipe_engine.resolve.row_shapes import SHAPES


def rows_through_template(inputs: StageInputs, shared: dict[tuple[str, str], Rows]) -> Rows:
    """Plain-text rows (prompt/completion, preference pairs) as TRL's conversational rows where
    the model has a chat template (`data.chat_template`), so that training, evaluation and
    `compare` ask an instruct model as it was made to be asked; the data line of `plan` says
    which, and why. Conversations go through the template anyway; image rows are
    conversational already."""
    rows = inputs.data[""]
    _check_template_renders(inputs, rows)
    setting = chat_template_setting(rows.config)
    written = inputs.data.get("auto", rows)  # as written, where `true` read them otherwise
    # Rows that are conversations as written (a `history` of turns makes them so) are read as
    # written whatever the setting: the same rows, the same key.
    if not is_plain_text(written.format):
        return inputs.data["auto"] if setting == "true" else rows  # moot for these rows
    if setting == "false":
        return _rendered(rows, "as plain text (data.chat_template=false)", shared)
    found, model = inputs.model.template.found, inputs.model.entry
    if setting == "true" and found is False:
        raise RecipeError(
            f"data.chat_template=true, but the tokenizer of `{model.name}` has no chat "
            "template to put the prompt/completion rows through. Use data.chat_template=auto "
            "(plain text for such a model) or a model with a chat template.",
            key="data.chat_template",
        )
    if setting == "auto" and not found:
        why = "has no chat template" if found is False else "chat template cannot be read here"
        # Recorded as decided (the key stays: `false` is not hashed), so that `compare` asks
        # probes as these rows were asked.
        plain = dataclasses.replace(rows.config, chat_template="false")
        rows = dataclasses.replace(rows, config=plain)
        return _rendered(rows, f"as plain text: the model's tokenizer {why}", shared)
    if setting == "auto":  # the same rows, read as conversations: another data identity
        rows = inputs.data["true"]
    return _rendered(rows, "through the chat template", shared)


def _check_template_renders(inputs: StageInputs, rows: Rows) -> None:
    """Rows that call tools reach the model through its chat template, which TRL hands the
    `tools` and the tool turns: one that does not render them would train on conversations
    with the calls left out (`resolve.templates.renders_tools` rendered a sample)."""
    template, model = inputs.model.template, inputs.model.entry
    if not SHAPES[rows.format].tools or template.tools is not False and template.found is not False:
        return
    why = "has none" if template.found is False else "does not render them"
    raise RecipeError(
        f"The data ({rows.describe()}) calls tools (`tools` schemas, assistant turns with "
        f"`tool_calls`, `tool` turns), but the chat template of `{model.name}` {why}: TRL "
        "hands them to the template, so the calls would not reach training. Use a model whose "
        "chat template supports tools (Qwen2.5's: model=qwen2.5-0.5b), or save one with the "
        "model's tokenizer (chat_template.jinja in its folder).",
        key="model",
    )


def _rendered(rows: Rows, rendering: str, shared: dict[tuple[str, str], Rows]) -> Rows:
    """`rows` with how they reach the model, shared by the stages that read them so (a run
    reads them once)."""
    key = (rows.identity, f"{rows.kind}: {rendering}")
    return shared.setdefault(key, dataclasses.replace(rows, rendering=rendering))


def check_held_out_rows(name: str, stage: StageConfig, rows: Rows, evaluation: bool) -> list[str]:
    """An evaluation stage must have held-out rows to ask; a stage evaluated after training
    (`evaluation`: eval.enabled) whose data holds none out trains on every row, unevaluated,
    and the notes `plan` prints say why. An evaluation stage asks its rows for answers: rows
    that ask nothing (language-modeling text) are refused it."""
    if stage.evaluate_only and SHAPES[rows.format].asked is None:
        raise RecipeError(
            f"Evaluation stage `{name}` asks its held-out rows for answers (exact match), but "
            f"its data ({rows.describe()}) is language-modeling text, which asks no question. "
            f"Give stage.{name}.data rows with questions and answers, or drop the stage (a "
            "stage trained on text reports its held-out loss).",
            key=f"stage.{name}.data",
        )
    if rows.eval_rows or not (evaluation or stage.evaluate_only):
        return []
    if rows.held_out is HeldOut.TOO_FEW:
        why = (
            f"its data ({rows.origin}) has fewer than {AUTO_MIN_DATA_ROWS} rows, too few to "
            "hold any out automatically"
        )
        fix = "hold some out anyway with data.eval_fraction=0.25, or point data.eval_split at "
        key = "data.eval_split"
    else:
        why = f"its data ({rows.origin}) holds no rows out (data.eval_fraction=0)"
        fix = "drop data.eval_fraction to hold rows out automatically, or point data.eval_split at "
        key = "data.eval_fraction"
    fix += "a split your data has"
    if stage.evaluate_only:
        raise RecipeError(
            f"Evaluation stage `{name}` needs a held-out split, but {why}. To evaluate, {fix}.",
            key=key,
        )
    return [f"not evaluated: {why}, so every row trains (to evaluate, {fix})"]
