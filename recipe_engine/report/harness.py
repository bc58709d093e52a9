"""`compare tasks=[...]`'s second table: each model's lm-evaluation-harness scores (measured and
recorded by `evaluate.harness`), one row per model, task and metric, labelled with the harness
version and the first 12 hex digits of the task's config hash, printed under the probes' metrics and
written into compare.md.
"""

from __future__ import annotations

from recipe_engine.store.scores import HarnessResult, HarnessScored
from recipe_engine.tables import markdown_table, text_table

HASH_CHARS = 12  # the hash as shown; the records hold all 64 hex digits
HEADER = ["model", "task", "metric", "score", "n", "harness", "task hash", "note"]


def harness_rows(result: HarnessResult) -> list[list[str]]:
    """One row per model, task and metric, in the order the models were measured."""
    return [
        [
            score.model,
            score.task,
            score.metric,
            "-" if score.value is None else f"{score.value:.4f}",
            str(score.n),
            f"lm_eval {result.version}",
            score.task_hash[:HASH_CHARS] or "-",
            score.note,
        ]
        for score in result.scores
    ]


def harness_table(result: HarnessResult) -> str:
    """The plain-text table compare prints under its metrics (no note column when no row has
    one)."""
    rows, header = harness_rows(result), HEADER
    if not any(row[-1] for row in rows):
        rows, header = [row[:-1] for row in rows], HEADER[:-1]
    return "\n".join(text_table(rows, header=header))


def harness_section(scored: HarnessScored) -> list[str]:
    """compare.md's section: the table and what its columns mean."""
    result, settings = scored.result, scored.result.settings
    limit = "all" if settings.limit is None else str(settings.limit)
    chat = ", ".join(f"{m}={'yes' if used else 'no'}" for m, used in result.chat_template.items())
    return [
        "## lm-evaluation-harness",
        "",
        f"Tasks: {', '.join(settings.tasks)}; lm_eval {result.version}; greedy, at most {limit} "
        f"documents per task, batch size {settings.batch_size}; chat template applied: {chat}.",
        "",
        *markdown_table(harness_rows(result), header=HEADER),
        "",
        "Scores are the harness' own (`<metric>,<filter>`), on the same models as the table "
        "above (the full-precision base, adapters applied to it). `task hash`: the first "
        f"{HASH_CHARS} hex digits of the sha256 of the task's resolved config (prompt, "
        "metric, filters, generation settings; local data files by the sha256 of their "
        "content): rows with the same hash and harness version are comparable across runs. "
        f"All rows and full hashes: {scored.csv.name}, {scored.json.name}.",
    ]


__all__ = ["harness_rows", "harness_section", "harness_table"]
