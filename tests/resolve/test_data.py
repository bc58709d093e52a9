"""recipe_engine.resolve.data: the typed settings checked once, splits (held-out fraction,
sample cap), the built-in source, what a text-only stage refuses, the data identity."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from data_kit import chat, data, error, load, make_images, vlm_row, write_jsonl

from recipe_engine.errors import RecipeError
from recipe_engine.resolve.data import data_config, data_identity, load_splits


def test_jsonl_messages(tmp_path: Path) -> None:
    splits = load(write_jsonl(tmp_path / "d.jsonl", [chat(0), chat(1)]))
    assert splits.format == "messages"
    assert splits.eval is None
    assert splits.train.column_names == ["messages"]
    assert splits.train[1]["messages"] == chat(1)["messages"]
    assert len(splits.identity) == 64


def test_eval_fraction_is_deterministic(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [chat(i) for i in range(20)])
    a, b = load(path, eval_fraction=0.25, seed=1), load(path, eval_fraction=0.25, seed=1)
    assert (len(a.train), len(a.eval)) == (15, 5)
    assert a.eval.to_list() == b.eval.to_list() and a.train.to_list() == b.train.to_list()
    every = {json.dumps(r) for r in a.train.to_list() + a.eval.to_list()}
    assert len(every) == 20  # a partition: nothing lost or duplicated
    other = load(path, eval_fraction=0.25, seed=2)
    assert other.eval.to_list() != a.eval.to_list()


def test_max_samples_caps_train_only(tmp_path: Path) -> None:
    write_jsonl(tmp_path / "train.jsonl", [chat(i) for i in range(10)])
    write_jsonl(tmp_path / "eval.jsonl", [chat(i) for i in range(4)])
    splits = load(tmp_path, max_samples=3)
    assert [r["messages"][1]["content"] for r in splits.train] == ["q0", "q1", "q2"]
    assert len(splits.eval) == 4


def test_tiny_source_uses_built_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    write_jsonl(tmp_path / "train.jsonl", [chat(0)])
    write_jsonl(tmp_path / "eval.jsonl", [chat(1)])
    from recipe_engine.resolve import tiny

    monkeypatch.setattr(tiny, "build_dataset", lambda name: tmp_path)
    splits = load_splits(data(source="tiny", path="arithmetic"), kind="causal_lm")
    assert (len(splits.train), len(splits.eval)) == (1, 1)


def test_a_file_given_to_the_tiny_source_says_to_set_source_local() -> None:
    with pytest.raises(RecipeError) as info:
        load_splits(data(source="tiny", path="my/train.jsonl"), kind="causal_lm")
    assert "not a built-in dataset" in str(info.value) and "data.source=local" in str(info.value)


def test_causal_lm_rejects_vlm_rows(tmp_path: Path) -> None:
    make_images(tmp_path)
    path = write_jsonl(tmp_path / "d.jsonl", [vlm_row(["img/a.png"])])
    assert "text-only model" in error(path, kind="causal_lm")


def test_vlm_kind_accepts_text_rows(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [chat(0)])
    splits = load(path, kind="vlm")
    assert splits.format == "messages"
    assert splits.train[0]["messages"] == chat(0)["messages"]


@pytest.mark.parametrize(
    ("key", "value"),
    [("format", "chatml"), ("source", "s3"), ("eval_fraction", 1.5), ("max_samples", 0)],
)
def test_bad_settings(tmp_path: Path, key: str, value: Any) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [chat(0)])
    with pytest.raises(RecipeError) as info:
        load(path, **{key: value})
    assert info.value.key == f"data.{key}"


def test_unknown_column_name(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "d.jsonl", [chat(0)])
    with pytest.raises(RecipeError) as info:
        load(path, columns={"mesages": "x"})
    assert "Did you mean `messages`?" in str(info.value)


def test_identity_tracks_bytes_and_settings(tmp_path: Path) -> None:
    make_images(tmp_path)
    write_jsonl(tmp_path / "train.jsonl", [chat(0)])
    cfg = data(path=str(tmp_path))
    first = data_identity(cfg)
    assert data_identity(cfg) == first
    assert data_identity(dataclasses.replace(cfg, max_samples=5)) != first
    assert data_identity(dataclasses.replace(cfg, columns={"messages": "m"})) != first

    image = tmp_path / "img" / "a.png"
    original = image.read_bytes()
    image.write_bytes(original[:-1] + bytes([original[-1] ^ 1]))
    assert data_identity(cfg) != first
    image.write_bytes(original)
    assert data_identity(cfg) == first

    single = data(path=str(tmp_path / "train.jsonl"))
    before = data_identity(single)
    write_jsonl(tmp_path / "train.jsonl", [chat(1)])
    assert data_identity(single) != before


def test_identity_for_hub_and_tiny_needs_no_files() -> None:
    hub = data(source="hub", path="org/set")
    assert data_identity(hub) != data_identity(data(source="hub", path="org/other"))
    assert data_identity(data(source="tiny", path="shapes")) != data_identity(
        data(source="tiny", path="arithmetic")
    )


def test_identities_change_only_when_the_rows_read_change() -> None:
    """Stage keys hash the data identity: pinned, so that it changes only on purpose (the typed
    settings hash as the mappings did; reader 2 reads a system column, Alpaca's history and
    `<image>` marks in role/content turns, which the first reader ignored; reader 3 reads
    Qwen-VL's `<img>` tags as images, which reader 2 read as words)."""
    assert data_identity(data(source="hub", path="org/set")) == (
        "8fe8a6faa45dfa9c915439208a8611fb7a28cd4ac175bea643787b0a1bae78e4"
    )
    pairs = data(source="hub", path="org/set", chat_template="True", max_samples=4)
    assert data_identity(dataclasses.replace(pairs, columns={"prompt": "q"})) == (
        "0282329bb0b6be8391576751854afd745289ecd4029476ee1b60a3e9d6ca8f1d"
    )


@pytest.mark.parametrize(
    ("name", "kind", "digest"),
    [
        ("arithmetic", "causal_lm", "2d62c429b6e66d85"),
        ("arithmetic-preference", "causal_lm", "b86d20b46c027ce6"),
        ("shapes", "vlm", "7cc3e718aeee16e6"),
        ("shapes-preference", "vlm", "ab3eba9b4f1d57d4"),
    ],
)
def test_the_built_in_rows_read_as_they_always_did(name: str, kind: str, digest: str) -> None:
    """Built-in data keeps the identity it had (no reader version): its TRL rows, every one,
    must be the rows its stored stages trained on."""
    splits = load_splits(data(source="tiny", path=name), kind=kind)
    h = hashlib.sha256()
    for split in (splits.train, splits.eval):
        for row in split.with_format(None):
            h.update(json.dumps(row, sort_keys=True, default=_image_size).encode())
    assert h.hexdigest()[:16] == digest


def _image_size(image: Any) -> str:
    return str(getattr(image, "size", image))


def test_only_typed_settings_are_taken() -> None:
    with pytest.raises(TypeError, match="DataConfig"):
        data_identity({"source": "hub", "path": "org/set"})  # type: ignore[arg-type]
    recorded = {**dataclasses.asdict(data(path="x.jsonl")), "retired_key": 1}
    assert data_config(recorded) == data(path="x.jsonl")  # a manifest's record, typed again


def test_module_import_is_light() -> None:
    code = (
        "import sys, recipe_engine.resolve.data as d\n"
        "d.data_identity(d.DataConfig('x', source='hub', path='x'))\n"
        "print(sorted(m for m in ('torch', 'datasets', 'pyarrow', 'PIL') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "[]"
