"""Run a recipe: stages in order, each load -> policies -> guard -> train -> store.

`hydra_entry` is the Hydra application (run folders, multirun); `run_recipe` is the recipe
read top to bottom; `run_stage` is one stage.
"""

from __future__ import annotations

import logging
import os
import sys
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig

from recipe_engine import dag
from recipe_engine.config import CONFIG_DIR, CONFIG_NAME, to_plain
from recipe_engine.errors import EXIT_USER_ERROR, RecipeError
from recipe_engine.hardware import is_main_process, parse_gpus
from recipe_engine.planning import RecipePlan, StagePlan, plan_from_config
from recipe_engine.schema import register_configs
from recipe_engine.store import Store, write_json

log = logging.getLogger("recipe_engine")


@dataclass
class StageResult:
    name: str
    status: str  # trained | evaluated | cached
    output: Path
    manifest: dict[str, Any] = field(default_factory=dict)


def hydra_entry() -> None:
    """Hydra's entry point with the engine's config folder (reads sys.argv)."""
    register_configs()
    app = hydra.main(config_path=str(CONFIG_DIR), config_name=CONFIG_NAME, version_base="1.3")(
        _hydra_task
    )
    app()


def _hydra_task(cfg: DictConfig) -> None:
    from hydra.core.hydra_config import HydraConfig

    from recipe_engine.gpu_pool import job_pool, lease_gpu

    hydra_cfg = HydraConfig.get()
    run_dir = Path(hydra_cfg.runtime.output_dir)
    pool = job_pool(
        parse_gpus(cfg.gpus), cfg.parallel, hydra_cfg.runtime.choices.get("hydra/launcher")
    )
    try:
        if pool is None:
            run_recipe(cfg, run_dir)
            return
        with lease_gpu(pool, Path(cfg.output_root) / "locks") as gpu:
            cfg.gpus = [gpu]  # this job's GPU; CUDA has not started in this process yet
            os.environ["CUDA_VISIBLE_DEVICES"] = str(gpu)
            run_recipe(cfg, run_dir)
    except RecipeError as error:
        print(f"error: {error}", file=sys.stderr)
        sys.exit(EXIT_USER_ERROR)


# Plans made while validating the command line, by config hash: the Hydra task reuses them.
PLANNED: dict[str, RecipePlan] = {}


def remember(plan: RecipePlan) -> RecipePlan:
    PLANNED[dag.canonical_hash(plan.config)] = plan
    return plan


def run_recipe(cfg: DictConfig, run_dir: Path) -> list[StageResult]:
    plain = to_plain(cfg)
    plan = PLANNED.get(dag.canonical_hash(plain)) or plan_from_config(plain)
    store = Store(cfg.output_root)
    results = [
        _run_or_reuse(plan, plan.stages[name], store, force=name in cfg.force, fresh=cfg.fresh)
        for name in stages_to_run(plan, store)
    ]
    if is_main_process():
        print(summarise(plan, results, run_dir))
        report(cfg, results, run_dir)
    return results


def stages_to_run(plan: RecipePlan, store: Store) -> list[str]:
    """Stages of this run in order: `only` narrows them, but never to a stage whose parent
    has no stored output (the error names what to run first)."""
    only = set(plan.config.get("only") or [])
    if not only:
        return list(plan.graph.order)
    for name in plan.graph.order:
        if name in only:
            continue
        needed_by = sorted(w for w in only if name in plan.graph.ancestors(w))
        if needed_by and not store.is_complete(plan.stages[name].fingerprint):
            raise RecipeError(
                f"`only` skips stage `{name}`, but it has no stored output and "
                f"{', '.join(needed_by)} start(s) from it. Run it first: only=[{name}] "
                "(or drop `only`).",
                key="only",
            )
    # Skipped stages still appear when stored, so the summary maps every stage to its output.
    return [
        n for n in plan.graph.order if n in only or store.is_complete(plan.stages[n].fingerprint)
    ]


def will_train(plan: RecipePlan, store: Store) -> list[str]:
    """Stages this run would train (not cached, or forced)."""
    force = set(plan.config.get("force") or [])
    return [
        n
        for n in stages_to_run(plan, store)
        if n in force or not store.is_complete(plan.stages[n].fingerprint)
    ]


def report(cfg: DictConfig, results: list[StageResult], run_dir: Path) -> None:
    """The loss plot, and the base-vs-stages comparison when something was trained."""
    from recipe_engine.plots import write_loss_plot

    plot = write_loss_plot(run_dir, [(r.name, r.output / "metrics.jsonl") for r in results])
    print(f"loss plot: {plot}")
    if not (results and cfg.eval.enabled and cfg.eval.compare):
        return
    if all(r.status == "cached" for r in results):
        print(f"all stages cached; to compare them: python -m recipe_engine compare run={run_dir}")
        return
    from omegaconf import OmegaConf

    from recipe_engine.compare import compare_run

    settings = OmegaConf.to_container(cfg.eval)
    compared = compare_run(run_dir, settings=settings, seed=cfg.seed)
    print(compared["table"])
    print(f"compare report: {compared['report']}")


def _run_or_reuse(
    plan: RecipePlan, stage: StagePlan, store: Store, *, force: bool, fresh: bool
) -> StageResult:
    # A concurrent job training the same stage finishes first. Ranks of one job train together,
    # so only rank 0 takes the lock.
    lock = store.lock(stage.fingerprint) if is_main_process() else nullcontext()
    with lock:
        if store.is_complete(stage.fingerprint) and not force:
            log.info("stage %s: cached at %s", stage.name, store.entry(stage.fingerprint))
            return StageResult(
                stage.name,
                "cached",
                store.entry(stage.fingerprint),
                store.manifest(stage.fingerprint),
            )
        from recipe_engine.execution import evaluate_stage, train_stage

        if stage.settings.get("evaluate_only"):
            evaluate_stage(plan, stage, store)
            status = "evaluated"
        else:
            train_stage(plan, stage, store, fresh=fresh or force)
            status = "trained"
        entry = store.entry(stage.fingerprint)
        return StageResult(stage.name, status, entry, store.manifest(stage.fingerprint))


def summarise(plan: RecipePlan, results: list[StageResult], run_dir: Path) -> str:
    """Write the run summary (JSON) and return the table printed at the end of a run."""
    run_dir.mkdir(parents=True, exist_ok=True)
    rows = [_summary_row(plan, result) for result in results]
    write_json(run_dir / "summary.json", {"recipe": plan.recipe, "stages": rows})
    lines = [f"recipe {plan.recipe}: run folder {run_dir}", *_table(rows)]
    metrics = [r.manifest.get("metrics", {}) for r in results]
    base = next((m["base_accuracy"] for m in metrics if m.get("base_accuracy") is not None), None)
    final = metrics[-1].get("eval_accuracy") if metrics else None
    if base is not None and final is not None:
        lines.append(
            f"held-out exact match: base {base:.0%} -> final stage `{results[-1].name}` {final:.0%}"
        )
    return "\n".join(lines)


def _summary_row(plan: RecipePlan, result: StageResult) -> dict[str, Any]:
    metrics = result.manifest.get("metrics", {})
    losses = metrics.get("train_losses") or []
    return {
        "stage": result.name,
        "status": result.status,
        "key": dag.short(plan.stages[result.name].fingerprint),
        "init": plan.stages[result.name].source,
        "trained": ", ".join(result.manifest.get("trained_components", [])) or "-",
        "steps": metrics.get("steps", "-"),
        "loss": f"{losses[0]:.3f} -> {losses[-1]:.3f}" if losses else "-",
        "eval": eval_text(metrics),
        "time_s": round(result.manifest.get("timings", {}).get("total_s", 0.0), 1),
        "output": str(result.output),
    }


def _table(rows: list[dict[str, Any]]) -> list[str]:
    if not rows:
        return []
    widths = {h: max(len(h), *(len(str(r[h])) for r in rows)) for h in rows[0]}
    return [
        "  ".join(h.ljust(w) for h, w in widths.items()),
        *("  ".join(str(r[h]).ljust(w) for h, w in widths.items()) for r in rows),
    ]


def eval_text(metrics: dict[str, Any]) -> str:
    """ "acc 96%, loss 0.037" from a stage's metrics, "-" when it has none."""
    parts = []
    if metrics.get("eval_accuracy") is not None:
        parts.append(f"acc {metrics['eval_accuracy']:.0%}")
    if metrics.get("eval_loss") is not None:
        parts.append(f"loss {metrics['eval_loss']:.3f}")
    return ", ".join(parts) or "-"
