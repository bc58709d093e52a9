"""A plan made from inputs written by hand: no model, no rows, no torch. This is how a new
decision is unit-tested: say what `resolve` would have read, and check what `plan` decides."""

from __future__ import annotations

import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import sys
    from recipe_engine.config.compose import compose_config, to_engine_config
    from recipe_engine.plan.planner import check_recipe, plan_recipe
    from recipe_engine.resolve.inputs import (
        ModelInputs, RecipeInputs, Rows, StageInputs, TemplateFacts,
    )
    from recipe_engine.resolve.inventory import LINEAR, OTHER, ModelInventory, Module, Parameter
    from recipe_engine.resolve.machine import Machine
    from recipe_engine.resolve.sources import InitSource

    cfg = to_engine_config(compose_config(["recipe=text-lora"]))
    names = ["model.embed_tokens", *(f"model.layers.0.{p}" for p in ("q_proj", "v_proj")),
             "lm_head"]
    inventory = ModelInventory(
        "llama",
        tuple(Parameter(f"{n}.weight", 64 * 16, i) for i, n in enumerate(names)),
        tuple(Module(n, OTHER if "embed" in n else LINEAR, "Linear", 16, 64, 1024)
              for n in names),
    )
    init = InitSource("tiny", "a model written by hand", "/nowhere", identity={"hand": 1})
    model = ModelInputs(init, cfg.model, inventory, None, None, TemplateFacts(True, "marked"))
    rows = Rows(cfg.data, "causal_lm", 0, "rows-by-hand", "messages", 10, 2)
    graph = check_recipe(cfg)
    machine = Machine((), False, None, 1, 0, 0, "python")
    inputs = RecipeInputs(machine, {"llm": StageInputs("llm", model, {"": rows})})
    stage = plan_recipe(cfg, graph, inputs).stages["llm"]
    print(stage.policy.lora.targets, stage.trainer["assistant_only_loss"], stage.placement.device)
    print("torch imported:", "torch" in sys.modules)
    """
)


def test_a_plan_is_decided_from_inputs_alone_without_torch():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    targets, torch_line = done.stdout.strip().splitlines()
    assert targets == "['model.layers.0.q_proj', 'model.layers.0.v_proj'] True cpu"
    assert torch_line == "torch imported: False"
