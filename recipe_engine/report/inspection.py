"""`python -m recipe_engine inspect TARGET [TARGET] [key=value ...]`: what a model holds, per part.

Per component (vision_tower, projector, language_model, embeddings, lm_head, other): parameter
count, stored dtypes, devices, trainable share, bitsandbytes-quantized modules and LoRA
adapters. A loaded checkpoint has requires_grad=True everywhere (PEFT adapters: False), so for a
stage output the share the stage *trained* comes from its manifest and is shown next to what the
loaded model reports. With two targets both are shown side by side, then what differs.

This module reads the verb's words and the records a target names (run summaries, manifests,
config.json) and renders; `run.inspecting` loads and measures the model.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from recipe_engine.config.choices import ModelKind, ModelSource
from recipe_engine.config.schema import ModelConfig
from recipe_engine.errors import RecipeError, did_you_mean, unknown_key
from recipe_engine.resolve.model_files import adapter_base_location, check_stage_weights
from recipe_engine.run.inspecting import DTYPES, Inspection, InspectOptions, Row, Target
from recipe_engine.store.records import ADAPTER, MANIFEST_FILE, SUMMARY_FILE, Manifest, RunSummary
from recipe_engine.tables import text_table

USAGE = """\
usage: recipe-engine inspect TARGET [TARGET] [key=value ...]

TARGET is one of
  STORE_DIR        a stage output (outputs/store/<key>/): full weights, or a PEFT adapter
                   (its base is loaded from the manifest's base_location)
  RUN_DIR:STAGE    a run folder (outputs/runs/<recipe>/<time>/) and one of its stages,
                   e.g. outputs/runs/r3-two-stage/2025-01-01_12-00-00:llm
  FOLDER           a save_pretrained folder (config.json + weights) or a PEFT adapter folder
  MODEL            a model entry (tiny-qwen2-vl, qwen2-vl-7b, ...): built from its config on
                   the meta device, no weights read (hub entries need the hub or its cache)

options (both targets; prefix a. or b. for one only, e.g. b.load_in_4bit=true)
  load_in_4bit=true | load_in_8bit=true   quantize on load as a stage would (language model only;
                                          needs real weights, so a model entry loads them)
  dtype=float32|bfloat16|float16          load dtype (default: the stage's / model entry's)
  weights=true                            load a model entry's weights instead of the meta model
  device=cpu|cuda                         where weights load (default cpu: no GPU memory used)

Two targets print side by side, then the differences."""

OPTIONS = ("load_in_4bit", "load_in_8bit", "dtype", "weights", "device")
_TRUE = {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}


# --------------------------------------------------------------------------- CLI


def parse_args(words: Sequence[str]) -> tuple[list[str], list[InspectOptions]]:
    """(targets, per-target options) from the words after `inspect`."""
    targets = [w for w in words if "=" not in w]
    if not 1 <= len(targets) <= 2:
        got = f"{len(targets)} ({', '.join(targets)})" if targets else "none"
        raise RecipeError(f"`inspect` takes one or two targets, got {got}.\n{USAGE}")
    # The words as InspectOptions' keyword arguments: for both targets, for A, for B.
    shared: dict[str, str | bool] = {}
    own: list[dict[str, str | bool]] = [{}, {}]
    for word in words:
        if "=" not in word:
            continue
        key, value = word.split("=", 1)
        key = key.lstrip("+~")  # Hydra-style prefixes mean nothing here
        which = shared
        if key[:2] in ("a.", "b."):
            which, key = own[key[0] == "b"], key[2:]
            if len(targets) == 1 and which is own[1]:
                raise RecipeError(f"`{word}` names the second target, but there is only one.")
        which[key] = _option(key, value)
    options = [InspectOptions(**{**shared, **own[i]}) for i in range(len(targets))]
    for opts in options:
        if opts.load_in_4bit and opts.load_in_8bit:
            raise RecipeError("Choose one of load_in_4bit=true and load_in_8bit=true, not both.")
    return targets, options


def _option(key: str, value: str) -> str | bool:
    if key not in OPTIONS:
        raise unknown_key(key, OPTIONS, "`inspect` options")
    if key == "dtype":
        if value not in DTYPES:
            raise RecipeError(f"`dtype={value}`: use one of {', '.join(DTYPES)}.", key="dtype")
        return value
    if key == "device":
        if value not in ("cpu", "cuda"):
            raise RecipeError(f"`device={value}`: use cpu or cuda.", key="device")
        return value
    if value.lower() not in _TRUE:
        raise RecipeError(f"`{key}={value}`: use true or false.", key=key)
    return _TRUE[value.lower()]


# --------------------------------------------------------------------------- resolution


def resolve_target(text: str, *, extra_dirs: Sequence[str] = ()) -> Target:
    """A TARGET word -> Target; RecipeError naming the problem for anything unusable."""
    path = Path(text).expanduser()
    if path.exists():
        if not path.is_dir():
            raise RecipeError(f"{text} is a file; inspect takes a folder or a model entry name.")
        if (path / SUMMARY_FILE).is_file():
            return _run_stage(path, None, text)
        return _folder_target(path, text)
    run, sep, stage = text.rpartition(":")
    if sep and run and Path(run).expanduser().is_dir():
        return _run_stage(Path(run).expanduser(), stage, text)
    from recipe_engine.config.compose import available

    entries = available("model") + [
        name for d in extra_dirs for name in available("model", Path(d))
    ]
    if text in entries:
        from recipe_engine.config.compose import compose_config, to_engine_config

        composed = compose_config([f"model={text}"], extra_dirs=extra_dirs)
        return Target(text, "entry", None, to_engine_config(composed).model)
    looks_like_path = "/" in text or text.startswith((".", "~"))
    what = "path does not exist" if looks_like_path else "not a folder nor a model entry"
    raise RecipeError(
        f"Cannot inspect `{text}`: {what}.{did_you_mean(text, entries)} Model entries: "
        f"{', '.join(sorted(entries))}; or give a stage output, a save_pretrained folder or "
        "RUN_DIR:STAGE."
    )


def _run_stage(run_dir: Path, stage: str | None, label: str) -> Target:
    if not (run_dir / SUMMARY_FILE).is_file():
        raise RecipeError(
            f"{run_dir} is not a run folder (no summary.json). RUN_DIR:STAGE takes a folder "
            "under outputs/runs/<recipe>/; for a stage output pass outputs/store/<key> itself."
        )
    rows = RunSummary.load(run_dir).stages
    names = [row.stage for row in rows]
    if stage is None:
        if len(names) != 1:
            raise RecipeError(
                f"{run_dir} is a run folder with stages {', '.join(names)}: name one, e.g. "
                f"{run_dir}:{names[-1] if names else 'STAGE'}."
            )
        stage = names[0]
    if stage not in names:
        raise RecipeError(
            f"Run {run_dir} has no stage `{stage}`.{did_you_mean(stage, names)} "
            f"Stages: {', '.join(names) or 'none'}."
        )
    output = rows[names.index(stage)].output_path(run_dir)
    if not output.is_dir():
        raise RecipeError(
            f"Stage `{stage}` of {run_dir} points at {output}, which no longer exists (outputs "
            "cleaned?). Rerun the recipe to recreate it."
        )
    return _folder_target(output, label)


def _folder_target(path: Path, label: str) -> Target:
    if (path / MANIFEST_FILE).exists():
        manifest = Manifest.load(path)
        fmt = manifest.format
        needed = "adapter_config.json" if fmt == ADAPTER else "config.json"
        if not (path / needed).is_file():
            raise RecipeError(
                f"{path} is a {fmt} stage output without {needed}: it is corrupt or incomplete. "
                "Rerun the stage with force=[STAGE]."
            )
        base = manifest.loadable_base(path.parent)
        model = manifest.model
        on_the_hub = model.source == "hub" and base == model.id
        if fmt == ADAPTER and not on_the_hub and not (base and Path(base).is_dir()):
            raise RecipeError(
                f"{path} is a LoRA adapter on {base}, which no longer "
                "exists, so the adapter cannot be applied. Rerun its parent stage (or the recipe)."
            )
        retrain = f"Retrain the stage: rerun its recipe with force=[{manifest.stage}]."
        check_stage_weights(path, f"Stage `{manifest.stage}`'s output", retrain)
        kind = "adapter" if fmt == ADAPTER else "stage"
        return Target(label, kind, path, model, manifest)
    if (path / "config.json").is_file():
        return Target(label, "folder", path, _local_entry(path, path))
    if (path / "adapter_config.json").is_file():
        try:
            base = json.loads((path / "adapter_config.json").read_text())["base_model_name_or_path"]
        except (ValueError, KeyError) as error:
            raise RecipeError(f"{path}/adapter_config.json is unreadable ({error}).") from None
        # A base the engine names relative to the store (`./<key>`) resolves beside the adapter.
        base = adapter_base_location(path, base)
        return Target(label, "adapter", path, _local_entry(Path(base), path))
    raise RecipeError(
        f"{path} is not a model folder: no config.json (nor adapter_config.json, manifest.json "
        "or summary.json). Point at a folder save_pretrained or a stage wrote."
    )


def _local_entry(location: Path, folder: Path) -> ModelConfig:
    """A model entry for a folder found on disk: its kind follows its config's model type."""
    config_file = location / "config.json"
    # an adapter's base may be a hub id
    source = ModelSource.local if location.is_dir() else ModelSource.hub
    classes: list[str] = []
    if config_file.is_file():
        try:
            classes = json.loads(config_file.read_text()).get("architectures") or []
        except ValueError as error:
            raise RecipeError(f"{config_file} is not valid JSON ({error}): corrupt.") from None
    causal = any(str(c).endswith("ForCausalLM") for c in classes)
    kind = ModelKind.causal_lm if causal else ModelKind.vlm
    return ModelConfig(name=folder.name, source=source, id=str(location), kind=kind)


# --------------------------------------------------------------------------- rendering


def _row_order(a: Inspection, b: Inspection) -> list[str]:
    """Both inspections' rows, in report order, "total" last."""
    names = dict.fromkeys(n for n in (*a.rows, *b.rows) if n != "total")
    return [*names, "total"]


COLUMNS = ("params", "trained by stage", "requires_grad", "dtypes", "devices", "quantized", "LoRA")


def cells(row: Row) -> dict[str, str]:
    """A row as the strings the tables show (also what two models are compared on)."""

    def share(n: int | None, of: int | None) -> str:
        if n is None or not of:
            return "-" if n is None else f"{n:,}"
        return f"{n:,} ({100.0 * n / of:.1f}%)"

    lora = ", ".join(
        [f"{len(row.lora)} modules"] * bool(row.lora) + ["modules_to_save"] * bool(row.saved)
    )
    return {
        "params": f"{row.params:,}",
        "trained by stage": share(row.stage_trainable, row.stage_params),
        "requires_grad": share(row.requires_grad, row.params),
        "dtypes": ", ".join(f"{k} {v:,}" for k, v in sorted(row.dtypes.items())) or "-",
        "devices": ", ".join(row.devices) or "-",
        "quantized": f"{len(row.quantized)} modules" if row.quantized else "-",
        "LoRA": lora or "-",
    }


def _table(rows: list[list[str]]) -> list[str]:
    return [line.rstrip() for line in text_table(rows[1:], header=rows[0])]


def render(result: Inspection) -> str:
    """One model: a line per component, then the quantized / LoRA module details."""
    lines = [f"inspect {result.label}", *(f"  {d}" for d in result.description)]
    lines.append(f"  architecture: {result.architecture}")
    lines.append(
        "  `trained by stage` is the stage manifest's record; `requires_grad` is the model as "
        "loaded here"
    )
    table = [["component", *COLUMNS]]
    for component, row in result.rows.items():
        table.append([component, *cells(row).values()])
    lines += ["", *_table(table), ""]
    lines += _details(result)
    return "\n".join(lines).rstrip()


def _details(result: Inspection) -> list[str]:
    lines = []
    for component, row in result.rows.items():
        if component == "total":
            continue
        if row.quantized:
            examples = ", ".join(row.quantized[:3])
            lines.append(f"quantized in {component}: {len(row.quantized)}, e.g. {examples}")
        if row.lora:
            lines.append(f"LoRA in {component}: {len(row.lora)}, e.g. {', '.join(row.lora[:3])}")
        if row.saved:
            lines.append(
                f"trained in full (modules_to_save) in {component}: {', '.join(row.saved)}"
            )
    if result.adapters:
        lines.append(f"LoRA adapters: {', '.join(result.adapters)}")
    if not any(r.quantized for r in result.rows.values()):
        lines.append("no quantized modules")
    if not result.adapters:
        lines.append("no LoRA adapters")
    return lines


def differences(a: Inspection, b: Inspection) -> list[tuple[str, str, str, str]]:
    """(component, column, A, B) for every cell that differs."""
    out = []
    empty = cells(Row(params=0))
    for component in _row_order(a, b):
        left = cells(a.rows[component]) if component in a.rows else empty
        right = cells(b.rows[component]) if component in b.rows else empty
        for column in COLUMNS:
            if left[column] != right[column]:
                out.append((component, column, left[column], right[column]))
    return out


def render_pair(a: Inspection, b: Inspection) -> str:
    """Two models: A and B per component and column, then the differences."""
    lines = []
    for tag, result in (("A", a), ("B", b)):
        lines.append(f"{tag}: {result.label}  ({result.architecture})")
        lines += [f"   {d}" for d in result.description]
    table = [["component", "column", "A", "B", ""]]
    for component in _row_order(a, b):
        left = cells(a.rows.get(component, Row()))
        right = cells(b.rows.get(component, Row()))
        # Columns empty on both sides (no stage record, no LoRA...) would only add noise.
        shown = [c for c in COLUMNS if (left[c], right[c]) != ("-", "-")]
        for i, column in enumerate(shown):
            mark = "*" if left[column] != right[column] else ""
            table.append([component if i == 0 else "", column, left[column], right[column], mark])
    lines += ["", *_table(table), ""]
    found = differences(a, b)
    if found:
        lines.append(f"differences ({len(found)}, marked *):")
        lines += [f"  {comp} {col}: {left} -> {right}" for comp, col, left, right in found]
    else:
        lines.append("no differences")
    for tag, result in (("A", a), ("B", b)):
        lines += ["", f"{tag} details:", *(f"  {d}" for d in _details(result))]
    return "\n".join(lines)
