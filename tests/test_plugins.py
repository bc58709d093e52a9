"""Plug-ins from a user's own package, through Python entry points (`recipe_engine.plugins`):
tests/fixtures/plugins/recipe-plugin-demo is such a package (a trainer kind: TRL's
OnlineDPOTrainer; a data format: quiz files; a reward: the quiz's key; a launcher: one stage a
process), installed by pip into a folder of its own that the engine's processes get on their
PYTHONPATH, as a user's virtualenv would have it. Nothing under recipe_engine/ names it.

- `--help` and `plan` list them; a recipe trains with the kind, the format and the reward, and
  the web view shows its stage; the launcher runs the same recipe to the same keys;
- each is keyed by its own code's content (an edited plug-in is a new key, as an edited reward
  is);
- one that breaks its group's protocol is one message naming it, exit 2.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from engine_cli import CHECKOUT_PATH, engine, manifests, stored_stages
from starlette.testclient import TestClient

from recipe_engine.ui.app import create_app
from recipe_engine.ui.server import LOOPBACK

FIXTURES = Path(__file__).parent / "fixtures" / "plugins"
PACKAGE = FIXTURES / "recipe-plugin-demo"
RECIPES = ["--config-dir", str(FIXTURES / "recipes"), "recipe=quiz-online-dpo"]
SHORT = ["stage.llm.train.max_steps=3", "eval.max_samples=4"]


def install(package: Path, into: Path) -> dict[str, str]:
    """`package` installed into a folder of its own (as pip installs a user's package); the
    environment of a process that has it."""
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation",
         "--target", str(into), str(package)],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    shutil.rmtree(package / "build", ignore_errors=True)
    return {**os.environ, "PYTHONPATH": f"{into}{os.pathsep}{CHECKOUT_PATH}"}


def quiz(folder: Path) -> None:
    rows = [{"quiz": f"What is {a} + {b}?", "key": str(a + b)} for a in range(6) for b in range(6)]
    (folder / "quiz.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


@pytest.fixture(scope="module")
def demo(tmp_path_factory) -> dict[str, str]:
    return install(PACKAGE, tmp_path_factory.mktemp("site"))


@pytest.fixture(scope="module")
def trained(demo, tmp_path_factory) -> Path:
    """The recipe trained with the plug-ins' kind, format and reward."""
    cwd = tmp_path_factory.mktemp("quiz")
    quiz(cwd)
    done = engine(*RECIPES, *SHORT, "output_root=out", cwd=cwd, env=demo, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return cwd / "out"


def test_help_and_plan_list_the_installed_plug_ins(demo, tmp_path):
    shown = engine("--help", cwd=tmp_path, env=demo)
    line = next(line for line in shown.stdout.splitlines() if line.startswith("plug-ins:"))
    for group, name in [("trainers", "online_dpo"), ("rewards", "quiz_key"),
                        ("formats", "quiz"), ("launchers", "one_by_one")]:  # fmt: skip
        assert f"{group} {name} (recipe-plugin-demo 0.1.0)" in line
    quiz(tmp_path)
    planned = engine("plan", *RECIPES, cwd=tmp_path, env=demo)
    assert planned.returncode == 0, planned.stderr[-3000:]
    assert "plug-ins: formats quiz (recipe-plugin-demo 0.1.0); launchers one_by_one" in (
        planned.stdout
    )  # by group, as --help lists them
    assert "; trainers online_dpo (recipe-plugin-demo 0.1.0)" in planned.stdout
    assert "note: trainer `online_dpo` from plug-in recipe-plugin-demo 0.1.0" in planned.stdout
    assert "note: format `quiz` from plug-in recipe-plugin-demo 0.1.0" in planned.stdout
    assert "quiz (`quiz` as prompt) as prompts" in planned.stdout  # found by `auto`
    assert "rewards: quiz_key x1" in planned.stdout
    without = engine("--help", cwd=tmp_path)
    assert "plug-ins:" not in without.stdout  # none installed: no line


def test_a_recipe_trains_with_the_plug_ins_kind_format_and_reward_and_the_view_shows_it(trained):
    stored = manifests(trained)
    assert sorted(stored) == ["llm", "quiz"]
    assert stored["quiz"]["config"]["trainer"] == "online_dpo"
    assert stored["quiz"]["metrics"]["steps"] == 4
    metrics = trained / "store" / stored["quiz"]["fingerprint"][:20] / "metrics.jsonl"
    logged = [json.loads(line) for line in metrics.read_text().splitlines()]
    # The reward's scores of the answers, and DPO's on the pairs they made (TRL's names).
    steps = [record for record in logged if "loss" in record]
    assert len(steps) == 4
    assert all("objective/scores" in step and "rewards/accuracies" in step for step in steps)
    [run] = (trained / "runs" / "quiz-online-dpo").iterdir()
    path = run.relative_to(trained).as_posix()
    with TestClient(create_app(trained, LOOPBACK), base_url="http://127.0.0.1") as client:
        graph, page = client.get(f"/run/{path}"), client.get(f"/run/{path}/stage/quiz")
    assert f'<a href="/run/{path}/stage/quiz" class="node state-committed"' in graph.text
    assert page.status_code == 200 and "training loss" in page.text
    assert "reward accuracy (training batches)" in page.text  # the judged answers' curve


def test_the_plug_ins_launcher_runs_the_recipe_to_the_same_keys(demo, trained, tmp_path):
    quiz(tmp_path)
    done = engine(*RECIPES, *SHORT, "launcher=one_by_one", "output_root=out", cwd=tmp_path,
                  env=demo, timeout=900)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "stage quiz: completed in a process of its own" in done.stdout
    keys = {name: m["fingerprint"] for name, m in manifests(tmp_path / "out").items()}
    assert keys == {name: m["fingerprint"] for name, m in manifests(trained).items()}


def test_an_edited_plug_in_is_a_new_key(demo, tmp_path):
    quiz(tmp_path)
    before = engine("plan", *RECIPES, cwd=tmp_path, env=demo)
    edited = tmp_path / "edited"
    shutil.copytree(PACKAGE, edited)
    kinds = edited / "recipe_plugin_demo" / "kinds.py"
    kinds.write_text(kinds.read_text().replace("MAX_NEW_TOKENS = 64", "MAX_NEW_TOKENS = 32"))
    after = engine("plan", *RECIPES, cwd=tmp_path, env=install(edited, tmp_path / "site"))
    keys = [dict(re.findall(r"stage (\w+)  key (\w+)", done.stdout)) for done in (before, after)]
    assert keys[0]["llm"] == keys[1]["llm"]  # the engine's own kind: unchanged
    assert keys[0]["quiz"] != keys[1]["quiz"]


def test_a_plug_in_that_breaks_its_protocol_is_one_message(tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(PACKAGE, broken)
    toml = broken / "pyproject.toml"
    toml.write_text(
        toml.read_text().replace("recipe_plugin_demo.kinds:KIND", "recipe_plugin_demo.quiz:FORMAT")
    )
    done = engine("plan", "recipe=text-lora", cwd=tmp_path, env=install(broken, tmp_path / "site"))
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert line.startswith(
        "error: The plug-in `recipe_plugin_demo.quiz:FORMAT` (entry point `online_dpo` in "
        "group `recipe_engine.trainers` of recipe-plugin-demo"
    )
    assert (
        "is a DataFormat, not a TrainerKind" in line and "pip uninstall recipe-plugin-demo" in line
    )
    assert stored_stages(tmp_path) == []
