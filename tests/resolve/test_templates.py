"""recipe_engine.resolve.templates: chat templates read from the saved tokenizer files (a model
folder, or the local hub cache: never downloaded), and what they allow for assistant-only loss,
decided as TRL decides."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from recipe_engine.resolve.templates import (
    MARKED,
    PATCHED,
    UNMARKED,
    UNREAD,
    has_chat_template,
    read_chat_template,
    template_support,
)


def test_template_support_is_read_from_the_saved_files_as_trl_decides(tmp_path: Path) -> None:
    from recipe_engine.resolve.tiny import build_tiny_model

    assert template_support(str(build_tiny_model("tiny-qwen2"))) == MARKED  # tiny: markers
    assert template_support(None) == UNREAD
    assert template_support(str(tmp_path)) == UNREAD  # no tokenizer files
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"chat_template": "{% for m in messages %}{{ m.content }}{% endfor %}"})
    )
    assert template_support(str(tmp_path)) == UNMARKED
    trl = Path(next(iter(importlib.util.find_spec("trl").submodule_search_locations)))
    known = (trl / "chat_templates" / "qwen2_5.jinja").read_text()  # TRL has a training version
    (tmp_path / "chat_template.jinja").write_text(known)
    assert template_support(str(tmp_path)) == PATCHED


def test_a_template_is_read_from_any_file_a_tokenizer_saves_it_in(tmp_path: Path) -> None:
    assert has_chat_template(str(tmp_path)) is False  # a folder without one: known absent
    assert has_chat_template(None) is None and read_chat_template(None) is None
    (tmp_path / "chat_template.json").write_text(
        json.dumps({"chat_template": [{"name": "default", "template": "{{ messages }}"}]})
    )
    assert read_chat_template(str(tmp_path)) == "{{ messages }}"  # the `default` variant
    (tmp_path / "chat_template.jinja").write_text("{% generation %}{{ m }}{% endgeneration %}")
    assert read_chat_template(str(tmp_path)).startswith("{% generation %}")  # read first
    assert has_chat_template(str(tmp_path)) is True and template_support(str(tmp_path)) == MARKED
