"""Preference pairs and `data.chat_template`: text pairs are read both ways and the planner
picks one by the model's chat template, as it does for prompt/completion text; conversational
pairs go through the template whatever the setting (`resolver._rows_each_way`,
`plan.rows.rows_through_template`, on real files)."""

from __future__ import annotations

from pathlib import Path

import pytest
from data_kit import data, write_jsonl

from recipe_engine.config.schema import ModelConfig
from recipe_engine.errors import RecipeError
from recipe_engine.plan.rows import rows_through_template
from recipe_engine.resolve.inputs import ModelInputs, Rows, StageInputs, TemplateFacts
from recipe_engine.resolve.resolver import _rows_each_way
from recipe_engine.resolve.sources import InitSource

TEXT_PAIRS = [{"prompt": f"{i} + 1?", "chosen": str(i + 1), "rejected": str(i)} for i in range(4)]
CHAT_PAIRS = [
    {
        "prompt": [{"role": "user", "content": f"{i} + 1?"}],
        "chosen": [{"role": "assistant", "content": str(i + 1)}],
        "rejected": str(i),
    }
    for i in range(4)
]


@pytest.fixture(autouse=True)
def _own_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECIPE_ENGINE_CACHE", str(tmp_path / "cache"))


def picked(path: Path, setting: str, template: bool | None) -> Rows:
    """The rows the planner reads for a model whose tokenizer has a chat template or not."""
    model = ModelInputs(
        init=InitSource("local", "a local model", location="unused"),
        entry=ModelConfig(name="m", source="local", id="unused", kind="causal_lm"),
        inventory=None,
        snapshot=None,
        files=None,
        template=TemplateFacts(found=template, support=""),
    )
    config = data(path=str(path), chat_template=setting)
    ways = _rows_each_way(config, model, 0, {})
    return rows_through_template(StageInputs("s", model, ways), {})


@pytest.mark.parametrize(
    ("setting", "template", "expected"),
    [
        ("auto", True, ("chat_preference", "through the chat template")),
        ("true", True, ("chat_preference", "through the chat template")),
        (
            "auto",
            False,
            ("preference", "as plain text: the model's tokenizer has no chat template"),
        ),
        ("false", True, ("preference", "as plain text (data.chat_template=false)")),
    ],
)
def test_text_pairs_follow_the_chat_template_as_prompt_completion_rows_do(
    tmp_path: Path, setting: str, template: bool, expected: tuple[str, str]
) -> None:
    path = write_jsonl(tmp_path / "pairs.jsonl", TEXT_PAIRS)
    rows = picked(path, setting, template)
    assert (rows.format, rows.rendering) == expected
    first = rows.splits().train[0]
    if rows.format == "chat_preference":
        assert first["prompt"] == [{"role": "user", "content": "0 + 1?"}]
    else:
        assert first == TEXT_PAIRS[0]


def test_text_pairs_insisting_on_a_template_the_model_lacks_are_refused(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "pairs.jsonl", TEXT_PAIRS)
    with pytest.raises(RecipeError) as refused:
        picked(path, "true", False)
    assert refused.value.key == "data.chat_template"
    assert "has no chat template" in str(refused.value)


@pytest.mark.parametrize("setting", ["auto", "true", "false"])
@pytest.mark.parametrize("template", [True, False])
def test_conversational_pairs_are_conversations_whatever_the_setting(
    tmp_path: Path, setting: str, template: bool
) -> None:
    path = write_jsonl(tmp_path / "chat.jsonl", CHAT_PAIRS)
    rows = picked(path, setting, template)
    assert (rows.format, rows.rendering) == ("chat_preference", "")  # the setting is moot
    assert rows.splits().train[0]["rejected"] == [{"role": "assistant", "content": "0"}]
