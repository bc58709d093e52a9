"""A stage's longest row in its own tokenizer's tokens, for the memory estimate
(plan.memory_inputs): the row's text as the tokenizer counts it, and what the chat template
adds around it.

A template can add far more than role markers: Qwen2's opens every conversation without a
system message with "You are a helpful assistant." (measured: text-lora's longest row is 31
tokens where four characters a token and five a message guessed 14, and the estimate was
half the measured peak). The tokenizer renders two short conversations, one and two exchanges
long, and their token counts give the template's fixed part and its part per message. A row
with a system message of its own is counted with the default's tokens as well: over the
truth, never under it. The result is remembered by the template's text and the tokenizer's
files.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from recipe_engine.files import JsonObject
from recipe_engine.resolve import cache
from recipe_engine.resolve.inputs import LongestRow, ModelFiles, SavedTokenizer, TemplateTokens
from recipe_engine.resolve.templates import read_chat_template

# Two short contents: their own tokens are counted and taken out, the template's stay.
EXCHANGE = ({"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"})
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model")


def saved_tokenizer(folder: Path) -> SavedTokenizer | None:
    """The tokenizer saved in `folder`, its files read once; None where it holds none."""
    files = {name: cache.file_digest(folder / name) for name in TOKENIZER_FILES
             if (folder / name).is_file()}  # fmt: skip
    return SavedTokenizer(str(folder), files) if files else None


def template_tokens(tokenizer: SavedTokenizer) -> TemplateTokens | None:
    """The chat template's tokens around the rows of the model whose tokenizer this is; None
    where its folder has no chat template or the tokenizer does not load here."""
    template = read_chat_template(tokenizer.folder)
    if template is None:
        return None
    inputs = {"template": _digest(template), "tokenizer": dict(tokenizer.files)}
    folder = Path(tokenizer.folder)
    recorded = cache.remembered("template-tokens", inputs, lambda: _measured(folder, template))
    return TemplateTokens(**recorded) if recorded else None


def longest_tokens(files: ModelFiles | None, longest: LongestRow) -> int | None:
    """The longest row's text in the tokenizer of `files`, its whole length scaled from the
    sample it keeps; None where no tokenizer is at hand or the row has no text."""
    if files is None or files.tokenizer is None or not longest.sample:
        return None
    folder = Path(files.tokenizer.folder)
    inputs = {"sample": _digest(longest.sample), "tokenizer": dict(files.tokenizer.files)}

    def count() -> JsonObject | None:
        tokenizer = _tokenizer(folder)
        if tokenizer is None:
            return None
        return {"tokens": len(tokenizer(longest.sample, add_special_tokens=False)["input_ids"])}

    recorded = cache.remembered("row-tokens", inputs, count)
    if recorded is None:
        return None
    return round(recorded["tokens"] * max(longest.chars, 1) / max(len(longest.sample), 1))


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def _tokenizer(folder: Path) -> Any:
    """The tokenizer saved in `folder`, or None where it does not load here: the estimate
    then guesses, and the model's own check (resolve.model_files) says what is wrong with
    the files, in one message."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(folder, local_files_only=True)
    except Exception:  # damaged files raise anything (KeyError, JSONDecodeError, ...)
        return None


def _measured(folder: Path, template: str) -> JsonObject | None:
    tokenizer = _tokenizer(folder)
    if tokenizer is None:
        return None

    def tokens(messages: list[dict[str, str]]) -> int:
        text = tokenizer.apply_chat_template(messages, chat_template=template, tokenize=False)
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    content = sum(len(tokenizer(m["content"], add_special_tokens=False)["input_ids"])
                  for m in EXCHANGE)  # fmt: skip
    try:
        once, twice = tokens(list(EXCHANGE)), tokens(list(EXCHANGE) * 2)
    except Exception:  # a template that needs what two plain exchanges lack (tools, images)
        return None
    per_message = max((twice - once - content) / len(EXCHANGE), 0.0)
    fixed = max(once - content - per_message * len(EXCHANGE), 0.0)
    return {"fixed": round(fixed), "per_message": round(per_message)}
