"""Recipe -> validated stage graph, topological order and stage fingerprints.

Pure functions over plain data: no torch, no transformers, no file reads. A stage's
fingerprint hashes everything that determines its weights, so equal fingerprints mean the
same weights and a stored stage can be reused instead of retrained.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from recipe_engine.capabilities import InputRef
from recipe_engine.errors import RecipeError, did_you_mean
from recipe_engine.hashing import canonical_hash
from recipe_engine.trainers import known_capabilities

# Enters every key. Raised when what a stage trains to changes for the same settings (how
# policies, random draws or kernels apply), so that no key made before names another result:
# the store keeps those stages (`runs` lists them), and a run trains the new keys. 2: the
# salts and special cases that kept older keys unchanged went (2026-11-28).
KEY_VERSION = 2

# Trainer settings that change logging, saving or evaluation but not the trained weights.
NON_WEIGHT_TRAIN_KEYS = frozenset(
    {
        "output_dir",
        "logging_dir",
        "logging_steps",
        "logging_strategy",
        "logging_first_step",
        "logging_nan_inf_filter",  # what the logged loss averages over, not what is trained
        "log_on_each_node",
        "report_to",
        "run_name",
        "project",  # trackers' settings (Trackio's project and Space)
        "trackio_space_id",
        "trackio_bucket_id",
        "trackio_static_space_id",
        "skip_memory_metrics",
        "save_steps",
        "save_strategy",
        "save_total_limit",
        "save_only_model",
        "save_on_each_node",
        "disable_tqdm",
        "eval_steps",
        "eval_strategy",
        "per_device_eval_batch_size",
        "eval_accumulation_steps",
        "dataloader_num_workers",
        "dataloader_pin_memory",
        "push_to_hub",
        "hub_model_id",
        "hub_strategy",
        "hub_token",
        "hub_private_repo",
        "hub_always_push",
        "hub_revision",
        "overwrite_output_dir",
        "resume_from_checkpoint",
        "log_level",
        "log_level_replica",
        "include_num_input_tokens_seen",
        "load_best_model_at_end",
        "metric_for_best_model",
        "greater_is_better",
        "prediction_loss_only",
    }
)
NON_WEIGHT_STAGE_KEYS = frozenset({"template", "description"})


@dataclass(frozen=True)
class StageGraph:
    order: tuple[str, ...]  # topological: every stage after the stages it loads
    parents: Mapping[str, str | None]
    # Other stages whose weights a stage loads besides its start, by the role its kind's
    # capability gives them (`capabilities.Capability.inputs`): stage -> role -> stage.
    extra: Mapping[str, Mapping[str, str]] = field(default_factory=dict)

    def children(self, name: str) -> list[str]:
        return [s for s in self.order if self.parents[s] == name]

    def ancestors(self, name: str) -> list[str]:
        chain: list[str] = []
        parent = self.parents[name]
        while parent is not None:
            chain.append(parent)
            parent = self.parents[parent]
        return chain

    def root_of(self, name: str) -> str:
        chain = self.ancestors(name)
        return chain[-1] if chain else name

    def inputs(self, name: str) -> list[str]:
        """The stages whose weights `name` loads: its parent, then its other inputs."""
        parent = [self.parents[name]] if self.parents[name] is not None else []
        return [*parent, *self.extra.get(name, {}).values()]

    def loaded_by(self, name: str) -> list[str]:
        """The stages that load `name`'s weights: its children and those it is an input of."""
        return [s for s in self.order if name in self.inputs(s)]

    def needs(self, name: str) -> list[str]:
        """Every stage `name` needs trained first (its inputs, theirs ...), in graph order."""
        found, todo = set(), self.inputs(name)
        while todo:
            stage = todo.pop()
            if stage not in found:
                found.add(stage)
                todo += self.inputs(stage)
        return [s for s in self.order if s in found]


def build_graph(stages: Mapping[str, Mapping[str, Any]], targets: Sequence[str] = ()) -> StageGraph:
    """Validate the stage edges and order them. Fan-out (one parent, many children) is allowed;
    the other stages a stage's capabilities load (a teacher) are inputs too, ordered before
    it."""
    if not stages:
        raise RecipeError(
            "The recipe has no stages. Add at least one under `stage:` "
            "(e.g. `stage.llm` from the llm-lora template).",
            key="stage",
        )
    parents: dict[str, str | None] = {}
    extra: dict[str, dict[str, InputRef]] = {}
    for name, stage in stages.items():
        init = stage.get("init") or {}
        sources = [k for k in ("from_stage", "model", "path") if init.get(k)]
        if len(sources) > 1:
            raise RecipeError(
                f"`stage.{name}.init` sets {' and '.join(sources)}; a stage starts from exactly "
                "one of from_stage, model or path. Remove all but one.",
                key=f"stage.{name}.init",
            )
        parent = init.get("from_stage")
        if parent is not None and parent not in stages:
            raise RecipeError(
                f"`stage.{name}.init.from_stage` names `{parent}`, which is not a stage of "
                f"this recipe.{did_you_mean(parent, stages)} Stages: {', '.join(stages)}. "
                f"Either keep stage `{parent}` (drop the override that removed it), or start "
                f"`{name}` from elsewhere: stage.{name}.init.from_stage=null (the recipe's model), "
                f"with stage.{name}.init.path=<folder> for a stage output you have.",
                key=f"stage.{name}.init.from_stage",
            )
        parents[name] = parent
        extra[name] = _extra_inputs(name, stage, stages)
    order = _topological_order(parents, extra)
    roles = {name: {role: ref.stage for role, ref in refs.items()} for name, refs in extra.items()}
    graph = StageGraph(order=tuple(order), parents=parents, extra=roles)
    _check_reachable(graph, targets)
    return graph


def _extra_inputs(
    name: str, stage: Mapping[str, Any], stages: Mapping[str, Any]
) -> dict[str, InputRef]:
    """The other stages the stage's capabilities load (its teacher), each a stage of this
    recipe."""
    refs = {
        role: ref for cap in known_capabilities() for role, ref in cap.inputs(name, stage).items()
    }
    for role, ref in refs.items():
        if ref.stage not in stages:
            raise RecipeError(
                f"`{ref.key}` names `{ref.stage}`, which is not a stage of this recipe."
                f"{did_you_mean(ref.stage, stages)} Stages: {', '.join(stages)}. Name the stage "
                f"whose weights `{name}` loads as its {role} ({ref.key}=<stage>), or add that "
                "stage.",
                key=ref.key,
            )
    return refs


def _topological_order(
    parents: Mapping[str, str | None], extra: Mapping[str, Mapping[str, InputRef]]
) -> list[str]:
    """Every stage after its parent and its other inputs; otherwise in declaration order (a
    stage's inputs first), which keeps the output stable."""
    order: list[str] = []
    state: dict[str, str] = {}  # "visiting" | "done"

    def visit(node: str, path: list[str]) -> None:
        if state.get(node) == "done":
            return
        if state.get(node) == "visiting":
            raise _cycle([*path[path.index(node) :], node], extra)
        state[node] = "visiting"
        for needed in (parents[node], *(ref.stage for ref in extra[node].values())):
            if needed is not None:
                visit(needed, [*path, node])
        state[node] = "done"
        order.append(node)

    for start in parents:
        visit(start, [])
    return order


def _cycle(cycle: list[str], extra: Mapping[str, Mapping[str, InputRef]]) -> RecipeError:
    """A cycle of stages (each loading the next): the first one's edge is the one to cut."""
    node, loaded = cycle[0], cycle[1]
    via = next((ref for ref in extra[node].values() if ref.stage == loaded), None)
    key = via.key if via else f"stage.{node}.init.from_stage"
    fix = (
        f"Point `{via.key}` at a stage that does not load `{node}`."
        if via
        else f"Point `stage.{node}.init` at a model or path instead of a stage."
    )
    return RecipeError(f"The stages form a cycle: {' -> '.join(reversed(cycle))}. {fix}", key=key)


def _check_reachable(graph: StageGraph, targets: Sequence[str]) -> None:
    for target in targets:
        if target not in graph.parents:
            raise RecipeError(
                f"`recipe.targets` names `{target}`, which is not a stage."
                f"{did_you_mean(target, graph.parents)} Stages: {', '.join(graph.order)}.",
                key="recipe.targets",
            )
    if not targets:
        return
    needed = set(targets)
    for target in targets:
        needed.update(graph.needs(target))
    unreachable = [s for s in graph.order if s not in needed]
    if unreachable:
        raise RecipeError(
            f"Stage(s) {', '.join(unreachable)} feed no target in `recipe.targets` "
            f"({', '.join(targets)}), so their training would be wasted. Add them to "
            "recipe.targets or remove them.",
            key="recipe.targets",
        )


def _weight_settings(stage: Mapping[str, Any]) -> dict[str, object]:
    """The part of a stage's config that determines its weights, as the key hashes it."""
    settings = {k: v for k, v in stage.items() if k not in NON_WEIGHT_STAGE_KEYS}
    settings["train"] = {
        k: v for k, v in (stage.get("train") or {}).items() if k not in NON_WEIGHT_TRAIN_KEYS
    }
    settings.pop("init", None)  # the source enters the fingerprint as an identity below
    settings.pop("data", None)
    return settings


def fingerprints(
    graph: StageGraph,
    stages: Mapping[str, Mapping[str, Any]],
    *,
    source_identity: Mapping[str, Any],
    data_identity: Mapping[str, str],
    seed: int,
) -> dict[str, str]:
    """Each stage's fingerprint: its weight-relevant settings, data, seed and source.

    `source_identity[name]` identifies where a root stage starts (model entry or path and
    what is in it); a child's source is its parent's fingerprint. Output folders, logging
    and placement are deliberately left out: they do not change what is learned.
    """
    result: dict[str, str] = {}
    for name in graph.order:
        parent = graph.parents[name]
        result[name] = fingerprint(
            stages[name],
            data=data_identity[name],
            seed=seed,
            parent=result[parent] if parent else None,
            init=source_identity[name],
        )
    return result


def fingerprint(
    stage: Mapping[str, Any], *, data: str, seed: int, parent: str | None, init: object
) -> str:
    """One stage's fingerprint (`fingerprints`): its source is its parent's key, or for a root
    stage the identity of where it starts (`init`)."""
    return canonical_hash(
        {
            "key_version": KEY_VERSION,
            "settings": _weight_settings(stage),
            "data": data,
            "seed": seed,
            "source": {"parent": parent} if parent else {"init": init},
        }
    )


def short(fingerprint: str) -> str:
    return fingerprint[:12]
