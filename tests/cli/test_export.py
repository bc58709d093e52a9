"""`export`: a committed stage as a folder the stock Auto classes load from anywhere, with its
model card; pushed to a hub (the loopback server, the real `huggingface_hub` client).

One short r3 run (2 steps per stage) is shared by the module. The load checks run in a fresh
Python process whose working folder is elsewhere, after the run's outputs were moved away:
nothing in an export may lean on the store.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from engine_cli import engine
from hub_server import HubServer

from recipe_engine.cli.main import main
from recipe_engine.config.compose import compose_config
from recipe_engine.run.planning import plan_from_config
from recipe_engine.run.recipe import run_recipe

RECIPE = "r3-two-stage"
USER_RECIPES = Path(__file__).resolve().parents[1] / "fixtures" / "recipes"

# Loads every export as the model card says, from the folders alone, and generates.
LOAD_SCRIPT = """
import json, sys
from PIL import Image
from peft import PeftModel
from transformers import AutoModelForImageTextToText, pipeline

merged, full, adapter = sys.argv[1:4]
pipe = pipeline("image-text-to-text", model=merged, device="cpu")
image = Image.new("RGB", (56, 56), (255, 0, 0))
chat = [{"role": "user", "content": [{"type": "image", "image": image},
                                     {"type": "text", "text": "What shape is this?"}]}]
answer = pipe(text=chat, max_new_tokens=4, generate_kwargs={"do_sample": False})
base = AutoModelForImageTextToText.from_pretrained(full)
tuned = PeftModel.from_pretrained(base, adapter)
print(json.dumps({"answer": answer[0]["generated_text"][-1]["content"],
                  "adapter_base": tuned.peft_config["default"].base_model_name_or_path}))
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("export") / "outputs"
    overrides = [
        f"recipe={RECIPE}",
        f"output_root={root}",
        "++stage.vision.train.max_steps=2",
        "++stage.llm.train.max_steps=2",
        "data.max_samples=16",
        "eval.max_samples=4",
    ]
    folder = root / "runs" / RECIPE / "t1"
    run_recipe(plan_from_config(compose_config(overrides)), folder)
    return folder


def export(*args: str) -> int:
    return main(["export", *(str(a) for a in args)])


def test_r3_exports_load_from_another_folder_after_the_outputs_moved(run_dir, tmp_path):
    merged, full, adapter = tmp_path / "merged", tmp_path / "vision", tmp_path / "adapter"
    assert export(run_dir, f"to={merged}") == 0  # the run's final stage: llm, merged
    assert export(f"{run_dir}:vision", f"to={full}") == 0
    assert export(run_dir, "merge=false", f"base={full}", f"to={adapter}") == 0

    record = json.loads((merged / "export.json").read_text())
    assert record["form"] == "merged" and record["stage"] == "llm"
    assert record["check"]["max_abs_logit_diff"] <= record["check"]["tolerance"]
    vision = json.loads((full / "export.json").read_text())
    assert vision["trained_parameters_checked"]["checked"] > 0  # the training arrived
    assert {"model.safetensors", "tokenizer.json", "chat_template.jinja"} <= names(merged)
    assert {"adapter_model.safetensors", "adapter_config.json"} <= names(adapter)
    assert not names(merged) & {"manifest.json", "handoff.json", "COMPLETE"}

    outputs = run_dir.parents[2]
    outputs.rename(outputs.with_name("moved-away"))  # no store behind the exports any more
    store_path = str(outputs)
    for folder in (merged, full, adapter):
        for file in folder.glob("*.json"):
            assert store_path not in file.read_text(), file
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", LOAD_SCRIPT, str(merged), str(full), str(adapter)],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    loaded = json.loads(done.stdout.strip().splitlines()[-1])
    assert isinstance(loaded["answer"], str) and loaded["adapter_base"] == str(full)
    outputs.with_name("moved-away").rename(outputs)


def names(folder: Path) -> set[str]:
    return {p.name for p in folder.iterdir()}


def test_the_model_card_names_the_base_the_lineage_the_scores_and_the_platform(run_dir, tmp_path):
    assert export(run_dir, f"to={tmp_path / 'card'}") == 0
    card = (tmp_path / "card" / "README.md").read_text()
    _, front, body = card.split("---\n", 2)
    meta = yaml.safe_load(front)
    assert meta["base_model"] == "tiny-qwen2-vl" and meta["library_name"] == "transformers"
    assert meta["pipeline_tag"] == "image-text-to-text" and RECIPE in meta["tags"]
    summaries = [json.loads(p.read_text()) for p in [run_dir / "summary.json"]]
    for row in summaries[0]["stages"]:
        assert f"| {row['stage']} | `{row['key'][:12]}` |" in body
    assert "## Scores" in body and "held-out" in body
    assert "torch " in body and "Trained in float32" in body
    assert "AutoModelForImageTextToText.from_pretrained" in body


def test_the_default_destination_is_under_outputs_exports_and_a_reexport_replaces_it(run_dir):
    assert export(f"{run_dir}:vision") == 0
    [folder] = (run_dir.parents[2] / "exports").glob(f"{RECIPE}-vision-*-full")
    first = (folder / "export.json").stat().st_mtime_ns
    assert export(f"{run_dir}:vision") == 0  # the engine's own export: replaced
    assert (folder / "export.json").stat().st_mtime_ns != first


def test_an_adapter_on_a_local_base_must_name_where_that_base_will_be(run_dir, tmp_path, capsys):
    assert export(run_dir, "merge=false", f"to={tmp_path / 'a'}") == 2
    error = capsys.readouterr().err
    assert "export RUN_DIR:vision to=DIR" in error and "base=DIR" in error
    assert not (tmp_path / "a").exists()


@pytest.mark.parametrize(
    ("words", "says"),
    [
        (["merg=false"], "Did you mean `merge`"),
        (["merge=maybe"], "use true or false"),
        (["format=onnx"], "use hf or gguf"),
        (["format=gguf"], "convert_hf_to_gguf.py"),
        (["push=true"], "needs `repo=ORG/NAME`"),
        (["base=/nowhere/at/all", "merge=false"], "neither a folder here nor a hub id"),
    ],
)
def test_bad_options_get_one_message_and_write_nothing(run_dir, tmp_path, capsys, words, says):
    to = tmp_path / "out"
    code = export(run_dir, f"to={to}", *words)
    error = capsys.readouterr().err
    assert code == 2 and says in error and error.count("error:") == 1
    assert not to.exists()


def test_a_folder_the_engine_did_not_write_is_never_overwritten(run_dir, tmp_path, capsys):
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep me")
    assert export(run_dir, f"to={mine}") == 2
    assert "was not written by an export" in capsys.readouterr().err
    assert names(mine) == {"notes.txt"}


def test_an_unknown_stage_or_key_is_one_message(run_dir, capsys):
    assert export(f"{run_dir}:vison") == 2
    assert "Did you mean `vision`" in capsys.readouterr().err
    assert export("0123456789ab", f"output_root={run_dir.parents[2]}") == 2
    assert "matches no stage" in capsys.readouterr().err


def export_cli(*words: str, hub: str, token: str, cwd: Path) -> subprocess.CompletedProcess:
    """`python -m recipe_engine export WORDS` against the hub at `hub` with `token`."""
    env = {**os.environ, "HF_HUB_OFFLINE": "0", "HF_ENDPOINT": hub, "HF_TOKEN": token}
    return engine("export", *words, cwd=cwd, env=env, timeout=300)


def test_push_uploads_the_export_to_the_hub_and_it_downloads_whole(run_dir, tmp_path):
    hub = HubServer().start()
    hub.tokens.add("hf_writer")
    to = tmp_path / "pushed"
    words = [f"{run_dir}:vision", f"to={to}", "push=true", "repo=acme/r3-vision"]
    try:
        refused = export_cli(*words, hub=hub.endpoint, token="hf_nobody", cwd=tmp_path)
        assert refused.returncode == 2, refused.stderr[-2000:]
        assert f"The export is in {to}" in refused.stderr and "HF_TOKEN" in refused.stderr
        pushed = export_cli(*words, hub=hub.endpoint, token="hf_writer", cwd=tmp_path)
        assert pushed.returncode == 0, pushed.stderr[-2000:]
        assert "pushed to acme/r3-vision at commit" in pushed.stdout
        repo = hub.repos[("model", "acme/r3-vision")]
        uploaded = repo.snapshots[repo.refs["main"]]
        for file in to.iterdir():
            if not file.name.startswith("."):
                assert uploaded[file.name] == file.read_bytes(), file.name
        assert "POST /api/models/acme/r3-vision/commit/main" in hub.requests
    finally:
        hub.stop()


def test_a_run_ending_in_an_evaluation_exports_its_last_trained_stage(tmp_path, capsys):
    """`export RUN_DIR` skips a final evaluate-only stage (it holds no weights); naming that
    stage is one message."""
    root = tmp_path / "outputs"
    overrides = [
        "recipe=user-with-eval",
        f"output_root={root}",
        "++stage.vision.train.max_steps=1",
        "++stage.llm.train.max_steps=1",
        "data.max_samples=8",
        "eval.max_samples=2",
    ]
    config = compose_config(overrides, extra_dirs=[str(USER_RECIPES)])
    run = root / "runs" / "user-with-eval" / "t1"
    run_recipe(plan_from_config(config), run)
    assert export(run, f"to={tmp_path / 'final'}") == 0
    assert json.loads((tmp_path / "final" / "export.json").read_text())["stage"] == "llm"
    assert export(f"{run}:eval", f"to={tmp_path / 'eval'}") == 2
    assert "only evaluates" in capsys.readouterr().err
    assert not (tmp_path / "eval").exists()
