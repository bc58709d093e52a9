"""Chat templates as the weights' tokenizer saved them: read from a model folder, or from the
local Hugging Face cache for a hub id (never downloaded here), what they allow for
assistant-only loss, decided as TRL decides it, and whether they render tool calls.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import re
from pathlib import Path
from typing import Any

from recipe_engine.files import JsonObject
from recipe_engine.resolve import cache

GENERATION_MARKER = re.compile(r"\{%-?\s*generation\s*-?%\}")
# Where a saved tokenizer or processor keeps its chat template, in the order transformers reads.
TEMPLATE_FILES = (
    "chat_template.jinja",
    "chat_template.json",
    "processor_config.json",
    "tokenizer_config.json",
)
# What the chat template allows for assistant-only loss.
MARKED, PATCHED, UNMARKED, UNREAD = "marked", "patched", "unmarked", "unread"


def template_support(location: str | None, revision: str | None = None) -> str:
    """What the chat template saved at `location` (a folder, or a hub id in the local cache)
    allows for assistant-only loss, decided as TRL decides: markers, or a template TRL knows
    a training version of (trl/chat_templates/<name>_training.jinja)."""
    return support_of(read_chat_template(location, revision))


def has_chat_template(location: str | None, revision: str | None = None) -> bool | None:
    """Whether the tokenizer or processor saved at `location` has a chat template; None when
    that cannot be told here (a hub model whose tokenizer files are not in the local cache)."""
    if read_chat_template(location, revision) is not None:
        return True
    if not location:
        return None
    if Path(location).expanduser().is_dir():
        return False
    read = _template_file(location, "tokenizer_config.json", revision) is not None
    return False if read else None


def read_chat_template(location: str | None, revision: str | None = None) -> str | None:
    if not location:
        return None
    for name in TEMPLATE_FILES:
        path = _template_file(location, name, revision)
        if path is None:
            continue
        try:
            template = _template_in(path)
        except (OSError, ValueError):  # unreadable or not JSON: look at the next file
            continue
        if template:
            return template
    return None


def _template_file(location: str, name: str, revision: str | None) -> Path | None:
    folder = Path(location).expanduser()
    if folder.is_dir():
        return folder / name if (folder / name).is_file() else None
    try:  # a hub id: its files in the local cache, if they are there (never downloaded here)
        from huggingface_hub import try_to_load_from_cache

        cached = try_to_load_from_cache(location, name, revision=revision)
    except Exception:  # a malformed id or cache: the template stays unknown
        return None
    return Path(cached) if isinstance(cached, str) else None


def _template_in(path: Path) -> str | None:
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jinja":
        return text
    template = json.loads(text).get("chat_template")
    if isinstance(template, list):  # named variants: transformers uses `default`
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    return template if isinstance(template, str) else None


@functools.cache
def _templates_trl_patches() -> frozenset[str]:
    """The chat templates TRL replaces with a training version for assistant-only loss."""
    spec = importlib.util.find_spec("trl")  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return frozenset()
    folder = Path(next(iter(spec.submodule_search_locations))) / "chat_templates"
    return frozenset(
        (folder / f"{path.name.removesuffix('_training.jinja')}.jinja").read_text(encoding="utf-8")
        for path in folder.glob("*_training.jinja")
        if (folder / f"{path.name.removesuffix('_training.jinja')}.jinja").is_file()
    )


def support_of(template: str | None) -> str:
    """What a chat template's text allows for assistant-only loss (None: not read)."""
    if template is None:
        return UNREAD
    if GENERATION_MARKER.search(template):
        return MARKED
    return PATCHED if template in _templates_trl_patches() else UNMARKED


# A function's schema: what a chat template that renders `tools` shows of it (its words are
# in no template's own text).
_TOOL = {
    "type": "function",
    "function": {
        "name": "look_up_zq",
        "description": "Looks up zqx.",
        "parameters": {"type": "object", "properties": {"key": {"type": "string"}}},
    },
}


def renders_tools(location: str | None, revision: str | None = None) -> bool | None:
    """Whether the chat template saved at `location` renders what TRL gives it of
    tool-calling rows: the calls and the `tool` turns (TRL's own `supports_tool_calling`) and
    the `tools` schemas. None: no template read here. Remembered by the template's text (it
    loads the tokenizer and imports TRL)."""
    template = read_chat_template(location, revision)
    if template is None:
        return None
    digest = hashlib.sha256(template.encode()).hexdigest()
    found = cache.remembered(
        "tool-templates", {"template": digest}, lambda: _renders_tools(str(location), revision)
    )
    return found["renders"] if found else None


def _renders_tools(location: str, revision: str | None) -> JsonObject | None:
    """{"renders": bool}; None where the tokenizer cannot be loaded here (not kept)."""
    from transformers import AutoTokenizer

    try:  # from the folder, or the local cache: never downloaded here
        tokenizer = AutoTokenizer.from_pretrained(
            location, revision=revision, local_files_only=True
        )
    except (OSError, ValueError):
        return None
    return {"renders": _shows_tools(tokenizer)}


def _shows_tools(tokenizer: Any) -> bool:
    """TRL's verdict on the calls and `tool` turns, and the schemas shown from `tools`."""
    from trl.chat_template_utils import supports_tool_calling

    if not supports_tool_calling(tokenizer):
        return False
    asked = [{"role": "user", "content": "hi"}]
    try:
        shown = tokenizer.apply_chat_template(asked, tools=[_TOOL], tokenize=False)
    except Exception:  # jinja's errors: a template that cannot take `tools`
        return False
    return _TOOL["function"]["description"] in shown
