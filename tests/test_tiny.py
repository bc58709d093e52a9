"""Tiny offline models and generated datasets: build, load with plain Auto* classes, reuse."""

from __future__ import annotations

import json
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from PIL import Image
from safetensors.torch import load_file
from transformers import (
    AutoModelForCausalLM,
    AutoModelForImageTextToText,
    AutoProcessor,
    AutoTokenizer,
)

from recipe_engine.errors import RecipeError
from recipe_engine.files import default_cache_dir
from recipe_engine.resolve import tiny  # its datasets and models modules are patched
from recipe_engine.resolve.tiny import (
    COLOURS,
    SHAPES,
    SHAPES_IMAGE_SIZE,
    SHAPES_QUESTION,
    TINY_DATASETS,
    TINY_MODELS,
    build_dataset,
    build_tiny_model,
)
from recipe_engine.resolve.tiny.build import VERSION

VLMS = ("tiny-qwen2-vl", "tiny-qwen2.5-vl", "tiny-llava", "tiny-idefics3")
TEXT_MODELS = ("tiny-llama", "tiny-qwen2")


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache for the module: every artefact is built once and shared by the tests."""
    return tmp_path_factory.mktemp("tiny-cache")


def _rows(folder: Path, split: str) -> list[dict]:
    lines = (folder / f"{split}.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines]


def test_public_names() -> None:
    assert TINY_MODELS == (
        "tiny-qwen2-vl",
        "tiny-qwen2.5-vl",
        "tiny-llava",
        "tiny-idefics3",
        "tiny-llama",
        "tiny-qwen2",
        "tiny-qwen2-large",
    )
    assert TINY_DATASETS == {
        "shapes": "vlm",
        "arithmetic": "messages",
        "shapes-preference": "preference",
        "arithmetic-preference": "preference",
        "arithmetic-feedback": "unpaired",
        "arithmetic-prompts": "prompts",
        "shapes-prompts": "prompts",
    }


def test_default_cache_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("RECIPE_ENGINE_CACHE", str(tmp_path))
    assert default_cache_dir() == tmp_path
    monkeypatch.delenv("RECIPE_ENGINE_CACHE")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "recipe-engine"
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # invalid by the XDG spec: ignored
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "recipe-engine"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "recipe-engine"
    # Never inside the package or the checkout (an installed package may be read-only).
    repo_root = Path(__file__).resolve().parent.parent
    assert not default_cache_dir().is_relative_to(repo_root)


def test_concurrent_builders_build_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    builds: list[int] = []

    def slow(folder: Path) -> None:  # slow enough that the second builder arrives mid-build
        builds.append(1)
        time.sleep(0.3)
        (folder / "train.jsonl").write_text("{}\n")

    monkeypatch.setattr(tiny.datasets, "_build_arithmetic", slow)
    with ThreadPoolExecutor(2) as pool:
        folders = list(pool.map(lambda _: build_dataset("arithmetic", tmp_path), range(2)))
    assert folders[0] == folders[1] and (folders[0] / "train.jsonl").is_file()
    assert len(builds) == 1  # the second waited on the lock, then found the folder complete
    assert [p.name for p in (tmp_path / "data").iterdir()] == [folders[0].name]


@pytest.mark.parametrize("name", VLMS)
def test_vlm_loads_trains_and_generates(cache: Path, name: str) -> None:
    folder = build_tiny_model(name, cache)
    assert folder == cache / "models" / f"{name}-{VERSION}"
    for file in ("config.json", "model.safetensors", "generation_config.json"):
        assert (folder / file).is_file()
    processor = AutoProcessor.from_pretrained(folder)
    model = AutoModelForImageTextToText.from_pretrained(folder)
    assert all(p.dtype == torch.float32 for p in model.parameters())
    assert model.config.get_text_config().vocab_size == len(processor.tokenizer)
    assert model.config.image_token_id == processor.tokenizer.convert_tokens_to_ids(
        processor.image_token
    )

    data = build_dataset("shapes", cache)
    row = _rows(data, "train")[0]
    image = Image.open(data / row["images"][0])
    text = processor.apply_chat_template(row["messages"], tokenize=False)
    inputs = processor(text=[text], images=[image], return_tensors="pt")
    loss = model(**inputs, labels=inputs["input_ids"]).loss
    assert torch.isfinite(loss)
    loss.backward()  # gradients must reach the vision tower, not only the language model
    vision_grads = [p.grad for n, p in model.named_parameters() if "vision" in n or "visual" in n]
    assert vision_grads and any(g is not None and g.abs().sum() > 0 for g in vision_grads)

    prompt = processor.apply_chat_template(
        row["messages"][:1], tokenize=False, add_generation_prompt=True
    )
    inputs = processor(text=[prompt], images=[image], return_tensors="pt")
    out = model.generate(**inputs, max_new_tokens=3, do_sample=False)
    assert out.shape[1] > inputs["input_ids"].shape[1]


def test_qwen2_vl_ids_and_template(cache: Path) -> None:
    folder = build_tiny_model("tiny-qwen2-vl", cache)
    processor = AutoProcessor.from_pretrained(folder)
    tok = processor.tokenizer
    config = json.loads((folder / "config.json").read_text())
    for key, token in (
        ("image_token_id", "<|image_pad|>"),
        ("video_token_id", "<|video_pad|>"),
        ("vision_start_token_id", "<|vision_start|>"),
        ("vision_end_token_id", "<|vision_end|>"),
    ):
        assert config[key] == tok.convert_tokens_to_ids(token), key
    assert tok.pad_token == "<|endoftext|>"
    assert tok.eos_token == "<|im_end|>"
    text_cfg = config["text_config"]
    head_dim = text_cfg["hidden_size"] // text_cfg["num_attention_heads"]
    assert sum(text_cfg["rope_parameters"]["mrope_section"]) == head_dim // 2

    messages = _rows(build_dataset("shapes", cache), "train")[0]["messages"]
    text = processor.apply_chat_template(messages, tokenize=False)
    assert "<|vision_start|><|image_pad|><|vision_end|>What is in the picture?" in text
    answer = messages[1]["content"][0]["text"]
    assert text.endswith(f"<|im_start|>assistant\n{answer}<|im_end|>\n")
    # A shapes image becomes a handful of merged vision tokens: one per 2x2 block of 14 px patches.
    image = Image.new("RGB", (SHAPES_IMAGE_SIZE, SHAPES_IMAGE_SIZE))
    inputs = processor(text=[text], images=[image], return_tensors="pt")
    merged = (SHAPES_IMAGE_SIZE // 28) ** 2
    assert (inputs["input_ids"] == config["image_token_id"]).sum() == merged


@pytest.mark.parametrize("name", TEXT_MODELS)
def test_text_model_loads_trains_and_generates(cache: Path, name: str) -> None:
    folder = build_tiny_model(name, cache)
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForCausalLM.from_pretrained(folder)
    assert model.config.vocab_size == len(tok)
    if name == "tiny-llama":
        assert tok.pad_token is None  # deliberate: the engine's pad -> EOS fallback is tested
    else:
        assert tok.pad_token == "<|endoftext|>"

    row = _rows(build_dataset("arithmetic", cache), "train")[0]
    enc = tok.apply_chat_template(
        row["messages"],
        tokenize=True,
        return_dict=True,
        return_tensors="pt",
        return_assistant_tokens_mask=True,
    )
    ids = enc["input_ids"]
    loss = model(input_ids=ids, labels=ids).loss
    assert torch.isfinite(loss)
    # {% generation %} markers make the answer (and end of turn) the assistant span.
    mask = torch.as_tensor(enc["assistant_masks"]).bool().reshape(-1)
    assistant_text = tok.decode(ids[0][mask])
    assert assistant_text.startswith(row["messages"][1]["content"])
    assert tok.eos_token in assistant_text

    prompt = tok.apply_chat_template(
        row["messages"][:1], add_generation_prompt=True, return_tensors="pt", return_dict=True
    )
    out = model.generate(**prompt, max_new_tokens=3, do_sample=False)
    assert out.shape[1] > prompt["input_ids"].shape[1]


@pytest.mark.parametrize("name", TINY_MODELS)
def test_dataset_words_are_compact_tokens(cache: Path, name: str) -> None:
    folder = build_tiny_model(name, cache)
    tok = AutoTokenizer.from_pretrained(folder)
    for word in [*COLOURS, *SHAPES]:
        assert len(tok.encode(word, add_special_tokens=False)) == 1, word
        assert len(tok.encode(f" {word}", add_special_tokens=False)) == 1, word
    assert len(tok.encode("7", add_special_tokens=False)) == 1


def test_models_are_deterministic(cache: Path) -> None:
    """This module's fresh builds equal the ones `make install` built into the user's cache in
    another process: same name, same weights (pre-training included) and tokenizer, whatever
    thread count each process had (torch's default there, one here: tests/conftest.py)."""
    for name in TINY_MODELS:
        here, installed = build_tiny_model(name, cache), build_tiny_model(name)
        first = load_file(here / "model.safetensors")
        second = load_file(installed / "model.safetensors")
        assert first.keys() == second.keys()
        for key, tensor in first.items():
            assert tensor.dtype == torch.float32
            assert torch.equal(tensor, second[key]), (name, key)
        tok_a = (here / "tokenizer.json").read_bytes()
        assert tok_a == (installed / "tokenizer.json").read_bytes()


def test_build_is_reused_not_redone(cache: Path) -> None:
    folder = build_tiny_model("tiny-llama", cache)
    weights = folder / "model.safetensors"
    before = weights.stat().st_mtime_ns
    assert build_tiny_model("tiny-llama", cache) == folder
    assert weights.stat().st_mtime_ns == before
    data = build_dataset("arithmetic", cache)
    before = (data / "train.jsonl").stat().st_mtime_ns
    assert build_dataset("arithmetic", cache) == data
    assert (data / "train.jsonl").stat().st_mtime_ns == before
    # No temporary build folders are left beside the results.
    leftovers = [p.name for p in (cache / "models").iterdir() if p.name.startswith(".")]
    assert leftovers == []


def test_a_model_is_built_on_one_thread_and_the_callers_count_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[int] = []

    def build(folder: Path) -> None:
        seen.append(torch.get_num_threads())
        (folder / "config.json").write_text("{}")

    monkeypatch.setattr(tiny.models, "_build_llama", build)
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        build_tiny_model("tiny-llama", tmp_path)
        assert seen == [1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


def test_failed_build_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:

    def boom(folder: Path) -> None:
        (folder / "partial.txt").write_text("half done")
        raise RuntimeError("killed")

    monkeypatch.setattr(tiny.datasets, "_build_arithmetic", boom)
    with pytest.raises(RuntimeError):
        build_dataset("arithmetic", tmp_path)
    assert list((tmp_path / "data").iterdir()) == []


def test_shapes_dataset(cache: Path) -> None:
    folder = build_dataset("shapes", cache)
    classes = {f"{c} {s}" for c in COLOURS for s in SHAPES}
    assert len(classes) == 12
    for split, expected in (("train", 960), ("eval", 96)):
        rows = _rows(folder, split)
        assert len(rows) == expected
        answers = Counter(r["messages"][1]["content"][0]["text"] for r in rows)
        assert set(answers) == classes
        for row in rows:
            (image,) = row["images"]
            assert (folder / image).is_file()
            user = row["messages"][0]
            assert user["role"] == "user"
            assert user["content"][0] == {"type": "image"}
            assert user["content"][1] == {"type": "text", "text": "What is in the picture?"}
    with Image.open(folder / _rows(folder, "eval")[0]["images"][0]) as img:
        assert img.mode == "RGB" and img.size == (SHAPES_IMAGE_SIZE, SHAPES_IMAGE_SIZE)
    train_images = {r["images"][0] for r in _rows(folder, "train")}
    eval_images = {r["images"][0] for r in _rows(folder, "eval")}
    assert not train_images & eval_images


def test_arithmetic_dataset(cache: Path) -> None:
    folder = build_dataset("arithmetic", cache)
    for split, expected in (("train", 800), ("eval", 64)):
        rows = _rows(folder, split)
        assert len(rows) == expected
        for row in rows:
            user, assistant = row["messages"]
            assert user["role"] == "user" and assistant["role"] == "assistant"
            question = user["content"].removeprefix("What is ").removesuffix("?")
            a, op, b = question.split()
            expected_answer = int(a) + int(b) if op == "+" else int(a) - int(b)
            assert assistant["content"] == str(expected_answer)


def test_arithmetic_feedback_labels_the_sentence_true_and_a_bare_or_near_miss_false(
    cache: Path,
) -> None:
    """KTO's rows: the right answer in a sentence desirable; the bare answer SFT teaches or a
    sentence off by one or two undesirable; labels in turn, so every batch holds both."""
    folder = build_dataset("arithmetic-feedback", cache)
    for split, expected in (("train", 400), ("eval", 64)):
        rows = _rows(folder, split)
        assert len(rows) == expected
        assert [row["label"] for row in rows] == [i % 2 == 0 for i in range(expected)]
        styles = set()
        for row in rows:
            a, op, b = row["prompt"].removeprefix("What is ").removesuffix("?").split()
            answer = int(a) + int(b) if op == "+" else int(a) - int(b)
            said = row["completion"].removeprefix("It is ").removesuffix(".")
            sentence = said != row["completion"]
            if row["label"]:
                assert sentence and int(said) == answer, row
            else:
                assert (not sentence and int(said) == answer) or 1 <= abs(int(said) - answer) <= 2
                assert int(said) >= 0
                styles.add(sentence)
        assert styles == {True, False}  # bare answers and near misses both among the false


def test_prompt_datasets_hold_questions_and_their_answers_for_a_reward(cache: Path) -> None:
    """GRPO's rows: the arithmetic question with its answer, the shapes picture and question
    with its colour and shape, each answer in an `answer` column an exact-match reward reads."""
    folder = build_dataset("arithmetic-prompts", cache)
    for split, expected in (("train", 256), ("eval", 64)):
        rows = _rows(folder, split)
        assert len(rows) == expected and all(set(row) == {"prompt", "answer"} for row in rows)
        for row in rows:
            a, op, b = row["prompt"].removeprefix("What is ").removesuffix("?").split()
            assert row["answer"] == str(int(a) + int(b) if op == "+" else int(a) - int(b))
    folder = build_dataset("shapes-prompts", cache)
    for split, expected in (("train", 96), ("eval", 48)):
        rows = _rows(folder, split)
        assert len(rows) == expected
        for row in rows:
            colour, shape = row["answer"].split()
            assert colour in COLOURS and shape in SHAPES and row["prompt"] == SHAPES_QUESTION
            assert (folder / row["images"][0]).is_file()


def test_datasets_are_deterministic(cache: Path, tmp_path: Path) -> None:
    for name in TINY_DATASETS:
        a, b = build_dataset(name, cache), build_dataset(name, tmp_path)
        for split in ("train", "eval"):
            assert (a / f"{split}.jsonl").read_bytes() == (b / f"{split}.jsonl").read_bytes()
    first = _rows(build_dataset("shapes", cache), "train")[0]["images"][0]
    pixels_a = Image.open(build_dataset("shapes", cache) / first).tobytes()
    pixels_b = Image.open(build_dataset("shapes", tmp_path) / first).tobytes()
    assert pixels_a == pixels_b


def test_unknown_names_suggest_the_closest() -> None:
    with pytest.raises(RecipeError, match="Did you mean `tiny-qwen2-vl`"):
        build_tiny_model("tiny-qwen2vl")
    with pytest.raises(RecipeError, match="Did you mean `shapes`"):
        build_dataset("shape")
    with pytest.raises(RecipeError, match="tiny-llava"):
        build_tiny_model("gpt-5")
