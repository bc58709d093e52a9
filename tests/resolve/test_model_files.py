"""`plan.model_files`: a model folder or hub id that cannot load is refused before any weights load.

Each refusal class gets one test that checks the message names the key, the path or file, and
a fix. The fixtures are the engine's tiny models (copied, then damaged) and folders written by
transformers and PEFT themselves, so "valid" means what those libraries write.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from huggingface_hub import constants

from recipe_engine.errors import RecipeError
from recipe_engine.resolve.hub_models import check_hub_model
from recipe_engine.resolve.model_files import check_model_folder
from recipe_engine.resolve.tiny import build_tiny_model

KEY = "stage.llm.init.path"


def refused(path: Path, *, kind: str = "causal_lm", key: str = KEY, **flags: bool) -> str:
    """The refusal message, after checking it names the key and the folder."""
    with pytest.raises(RecipeError) as info:
        check_model_folder(path, kind=kind, key=key, **flags)
    message = str(info.value)
    assert info.value.key == key
    assert f"`{key}`" in message and str(path) in message, message
    return message


def copy_tiny(name: str, into: Path) -> Path:
    folder = into / name
    shutil.copytree(build_tiny_model(name), folder)
    folder.chmod(0o755)
    return folder


@pytest.fixture
def qwen2(tmp_path: Path) -> Path:
    return copy_tiny("tiny-qwen2", tmp_path)


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A sharded save_pretrained folder and a PEFT adapter on a local base, built once."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    root = tmp_path_factory.mktemp("saved")
    base = copy_tiny("tiny-qwen2", root)
    model = AutoModelForCausalLM.from_pretrained(str(base))
    model.save_pretrained(root / "sharded", max_shard_size="200KB")
    lora = get_peft_model(model, LoraConfig(r=2, target_modules=["q_proj", "v_proj"]))
    lora.save_pretrained(root / "adapter")
    return {"base": base, "sharded": root / "sharded", "adapter": root / "adapter"}


def edit_json(path: Path, **changes: object) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


# --------------------------------------------------------------------------- valid folders


def test_tiny_causal_lm_and_vlm_folders_pass(tmp_path: Path) -> None:
    check_model_folder(build_tiny_model("tiny-qwen2"), kind="causal_lm", key=KEY)
    check_model_folder(build_tiny_model("tiny-llava"), kind="vlm", key=KEY)
    check_model_folder(build_tiny_model("tiny-qwen2-vl"), kind="vlm", key=KEY)


def test_sharded_folder_and_peft_adapter_pass(saved: dict[str, Path]) -> None:
    assert (saved["sharded"] / "model.safetensors.index.json").is_file()
    check_model_folder(saved["sharded"], kind="causal_lm", key=KEY)
    adapter = json.loads((saved["adapter"] / "adapter_config.json").read_text())
    assert Path(adapter["base_model_name_or_path"]) == saved["base"]
    check_model_folder(saved["adapter"], kind="causal_lm", key=KEY)


def test_trainer_state_beside_safetensors_weights_is_not_mistaken_for_pickle_weights(
    qwen2: Path,
) -> None:
    for name in ("optimizer.pt", "rng_state.pth", "training_args.bin"):
        (qwen2 / name).write_bytes(b"pickled trainer state")
    check_model_folder(qwen2, kind="causal_lm", key=KEY)


# --------------------------------------------------------------------------- folder shape


def test_missing_path_and_file_path_are_refused(qwen2: Path) -> None:
    assert "does not exist" in refused(qwen2.parent / "nope")
    message = refused(qwen2 / "model.safetensors")
    assert "is a file" in message and f"e.g. {qwen2}" in message


def test_empty_folder(tmp_path: Path) -> None:
    assert "empty" in refused(tmp_path)


def test_data_folder_is_named_as_data(tmp_path: Path) -> None:
    (tmp_path / "train.jsonl").write_text('{"messages": []}\n')
    (tmp_path / "dataset_info.json").write_text("{}")
    message = refused(tmp_path)
    assert "data folder" in message and "train.jsonl" in message and "`data.path`" in message


def test_folder_of_checkpoints_points_at_the_latest(tmp_path: Path) -> None:
    for step in (200, 1000):
        (tmp_path / f"checkpoint-{step}").mkdir()
        (tmp_path / f"checkpoint-{step}" / "config.json").write_text("{}")
    message = refused(tmp_path)
    assert "no config.json" in message and f"e.g. {tmp_path / 'checkpoint-1000'}" in message


def test_folder_without_config(qwen2: Path) -> None:
    (qwen2 / "config.json").unlink()
    assert "no config.json" in refused(qwen2)


# --------------------------------------------------------------------------- config.json


def test_config_that_is_not_json(qwen2: Path) -> None:
    (qwen2 / "config.json").write_text('{"model_type": "qwen2",')
    message = refused(qwen2)
    assert "config.json is not valid JSON" in message and "Re-download" in message


def test_config_without_model_type(qwen2: Path) -> None:
    edit_json(qwen2 / "config.json", model_type=None)
    message = refused(qwen2)
    assert "no `model_type`" in message and "save_pretrained" in message


def test_unknown_model_type_suggests_the_known_one(qwen2: Path) -> None:
    edit_json(qwen2 / "config.json", model_type="qwen2vl")
    message = refused(qwen2, kind="vlm")
    assert "Did you mean `qwen2_vl`?" in message and "upgrade transformers" in message


def test_remote_code_needs_trust_remote_code(qwen2: Path) -> None:
    auto_map = {"AutoModelForCausalLM": "modeling_x.XForCausalLM"}
    edit_json(qwen2 / "config.json", model_type="x_model", auto_map=auto_map)
    message = refused(qwen2)
    assert "`model.trust_remote_code=true` only if you trust" in message
    # Trusted, the checkpoint's code decides the classes: the kind is not compared.
    check_model_folder(qwen2, kind="vlm", key=KEY, trust_remote_code=True)


def test_auto_map_with_a_known_model_type_loads_without_remote_code(qwen2: Path) -> None:
    # transformers ignores auto_map for a model_type it knows when trust_remote_code is off.
    edit_json(qwen2 / "config.json", auto_map={"AutoModelForCausalLM": "modeling_x.X"})
    check_model_folder(qwen2, kind="causal_lm", key=KEY)


def test_vlm_where_a_causal_lm_is_trained(tmp_path: Path) -> None:
    folder = copy_tiny("tiny-qwen2-vl", tmp_path)
    message = refused(folder, kind="causal_lm")
    assert "is a vision-language model (model_type qwen2_vl)" in message
    assert "trains a causal LM" in message and "model.kind=vlm" in message


def test_causal_lm_where_a_vlm_is_trained(qwen2: Path) -> None:
    message = refused(qwen2, kind="vlm", key="model.id")
    assert "is a causal LM (model_type qwen2)" in message and "model.kind=causal_lm" in message


def test_model_type_of_neither_kind(qwen2: Path) -> None:
    edit_json(qwen2 / "config.json", model_type="t5")
    assert "neither a causal LM nor a vision-language model" in refused(qwen2)


# --------------------------------------------------------------------------- weights


def test_config_only_no_weights(qwen2: Path) -> None:
    (qwen2 / "model.safetensors").unlink()
    message = refused(qwen2)
    assert "config only, no weights" in message and "Copy the weights" in message


def test_weights_under_a_name_from_pretrained_never_loads(qwen2: Path) -> None:
    (qwen2 / "model.safetensors").rename(qwen2 / "consolidated.safetensors")
    message = refused(qwen2)
    assert "consolidated.safetensors" in message and "save_pretrained" in message


def test_pickle_only_weights_need_allow_pickle(qwen2: Path) -> None:
    (qwen2 / "model.safetensors").unlink()
    (qwen2 / "pytorch_model.bin").write_bytes(b"never unpickled by the check")
    message = refused(qwen2)
    assert "pytorch_model.bin" in message and "arbitrary code" in message
    assert "`model.allow_pickle=true`" in message and "safetensors" in message
    check_model_folder(qwen2, kind="causal_lm", key=KEY, allow_pickle=True)


def test_sharded_index_with_a_missing_shard(saved: dict[str, Path], tmp_path: Path) -> None:
    folder = tmp_path / "sharded"
    shutil.copytree(saved["sharded"], folder)
    shard = sorted(folder.glob("model-*.safetensors"))[-1]
    shard.unlink()
    message = refused(folder)
    assert "model.safetensors.index.json" in message and shard.name in message
    assert "missing" in message and "Re-download" in message


@pytest.mark.parametrize(
    "damage",
    [
        pytest.param(lambda data: data[: len(data) * 2 // 3], id="truncated"),
        pytest.param(lambda data: data[:5], id="truncated-header"),
        pytest.param(lambda data: b"<html>404 Not Found</html>" + data, id="garbage"),
        pytest.param(lambda data: b"", id="empty"),
    ],
)
def test_damaged_or_truncated_safetensors(qwen2: Path, damage) -> None:
    weights = qwen2 / "model.safetensors"
    weights.write_bytes(damage(weights.read_bytes()))
    message = refused(qwen2)
    assert "model.safetensors is damaged or truncated" in message and "Re-download" in message


def test_damaged_shard_is_named(saved: dict[str, Path], tmp_path: Path) -> None:
    folder = tmp_path / "sharded"
    shutil.copytree(saved["sharded"], folder)
    shard = sorted(folder.glob("model-*.safetensors"))[0]
    shard.write_bytes(shard.read_bytes()[:-100])
    assert f"{shard.name} is damaged or truncated" in refused(folder)


# --------------------------------------------------------------------------- adapters


def copy_adapter(saved: dict[str, Path], tmp_path: Path) -> Path:
    folder = tmp_path / "adapter"
    shutil.copytree(saved["adapter"], folder)
    return folder


def test_adapter_without_base_model(saved: dict[str, Path], tmp_path: Path) -> None:
    folder = copy_adapter(saved, tmp_path)
    edit_json(folder / "adapter_config.json", base_model_name_or_path=None)
    message = refused(folder)
    assert "base_model_name_or_path" in message and "Re-save the adapter" in message


def test_adapter_without_weights(saved: dict[str, Path], tmp_path: Path) -> None:
    folder = copy_adapter(saved, tmp_path)
    (folder / "adapter_model.safetensors").unlink()
    assert "without adapter weights (adapter_model.safetensors)" in refused(folder)
    (folder / "adapter_model.bin").write_bytes(b"pickle")
    assert "`model.allow_pickle=true`" in refused(folder)


def test_adapter_with_truncated_weights(saved: dict[str, Path], tmp_path: Path) -> None:
    folder = copy_adapter(saved, tmp_path)
    weights = folder / "adapter_model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-8])
    assert "adapter_model.safetensors is damaged or truncated" in refused(folder)


def test_adapter_whose_local_base_cannot_load(saved: dict[str, Path], tmp_path: Path) -> None:
    base = copy_tiny("tiny-qwen2", tmp_path)
    (base / "model.safetensors").unlink()
    folder = copy_adapter(saved, tmp_path)
    edit_json(folder / "adapter_config.json", base_model_name_or_path=str(base))
    message = refused(folder)
    assert f"its base model (adapter_config.json) is {base}" in message
    assert "config only, no weights" in message


def test_adapter_whose_base_folder_is_gone(saved: dict[str, Path], tmp_path: Path) -> None:
    folder = copy_adapter(saved, tmp_path)
    edit_json(folder / "adapter_config.json", base_model_name_or_path="/elsewhere/base")
    message = refused(folder)
    assert "/elsewhere/base" in message and "not a folder on this machine" in message


def test_adapter_whose_hub_base_is_not_cached_offline(
    saved: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    go_offline(monkeypatch, tmp_path / "hub")
    folder = copy_adapter(saved, tmp_path)
    edit_json(folder / "adapter_config.json", base_model_name_or_path="Qwen/Qwen2.5-0.5B")
    assert "Qwen/Qwen2.5-0.5B, which is not in the local Hugging Face cache" in refused(folder)


# --------------------------------------------------------------------------- hub ids


def go_offline(monkeypatch: pytest.MonkeyPatch, cache: Path) -> None:
    # huggingface_hub read the environment at import: patch its constants as well.
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))


def cache_repo(cache: Path, repo_id: str, files: Path | None = None) -> Path:
    """A hub cache entry laid out as huggingface_hub writes it (blobs, refs, snapshots)."""
    repo = cache / f"models--{repo_id.replace('/', '--')}"
    commit = "0123456789abcdef0123456789abcdef01234567"
    snapshot = repo / "snapshots" / commit
    for folder in (repo / "refs", repo / "blobs", snapshot):
        folder.mkdir(parents=True)
    (repo / "refs" / "main").write_text(commit)
    sources = sorted(files.iterdir()) if files else []
    for index, source in enumerate(sources or [None]):
        blob = repo / "blobs" / f"{index:040d}"
        blob.write_bytes(source.read_bytes() if source else b"{}")
        (snapshot / (source.name if source else "config.json")).symlink_to(blob)
    return snapshot


def test_offline_hub_model_missing_from_the_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path / "hub"
    go_offline(monkeypatch, cache)
    cache_repo(cache, "Qwen/Qwen2.5-0.5B-Instruct")
    message = check_hub_model("qwen/qwen2.5-0.5b-instruc", None, key="model.id").unavailable
    assert message.startswith("`model.id` is the hub model")
    assert "not in the local Hugging Face cache" in message and "HF_HUB_OFFLINE=1" in message
    assert "Did you mean `Qwen/Qwen2.5-0.5B-Instruct`" in message
    assert "`hf download qwen/qwen2.5-0.5b-instruc`" in message
    assert "model.source=local model.id=/path/to/folder" in message


def test_offline_stage_init_model_suggests_the_stage_path_and_tolerates_no_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    go_offline(monkeypatch, tmp_path / "no-cache-here")
    message = check_hub_model("Qwen/Qwen2-VL-2B", "v1", key="stage.vision.init.model").unavailable
    assert "Qwen/Qwen2-VL-2B at revision v1" in message and "--revision v1" in message
    assert "stage.vision.init.path=/path/to/folder" in message and "Did you mean" not in message


def test_offline_cached_model_returns_its_snapshot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    go_offline(monkeypatch, tmp_path / "elsewhere")
    cache = tmp_path / "hub"
    snapshot = cache_repo(cache, "Qwen/Qwen2.5-0.5B", files=build_tiny_model("tiny-qwen2"))
    found = check_hub_model("Qwen/Qwen2.5-0.5B", None, key="model.id", cache_dir=cache)
    assert found.cached == snapshot
    check_model_folder(found.cached, kind="causal_lm", key="model.id")  # what loads offline


@pytest.mark.parametrize("model_id", ["Qwen//x", "Qwen/Qwen 2", "a/b/c", "-x", "x--y", "/data/m"])
def test_malformed_hub_ids(model_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # refused online too
    with pytest.raises(RecipeError) as info:
        check_hub_model(model_id, None, key="model.id")
    message = str(info.value)
    assert info.value.key == "model.id" and f"`model.id` is {model_id!r}" in message
    assert "not a Hugging Face model id" in message
    if model_id.startswith("/"):
        assert "model.source=local model.id=/path/to/folder" in message
