"""Content parts in every spelling users bring, read as one of two kinds: text, or an image.

The spellings (each documented by a tool users come from):

- ``{"type": "text", "text": ...}``: TRL, transformers, OpenAI's chat format
- ``{"type": "text", "value": ...}``: LLaMA-Factory's content-part JSON lines
- ``{"type": "image"}``: TRL and transformers; the image is the row's next in ``images``
- ``{"type": "image", "image" | "url" | "path": SOURCE}``: transformers' chat templates
- ``{"type": "image_url", "image_url": {"url": SOURCE}}`` or ``"image_url": SOURCE``: OpenAI's
  chat format (ms-swift reads it too)
- ``{"type": "image_url", "value": SOURCE}``: LLaMA-Factory's content-part JSON lines
- ``<img>SOURCE</img>`` inside a turn's text: Qwen-VL's inline tags (its own fine-tuning files,
  ms-swift's Qwen-VL rows), read by the formats that declare them (`DataFormat.image_tags`):
  `tagged_parts` splits such text into text and image parts, each image where its tag stood

A SOURCE is a path (relative to the data file), a ``file://`` URL or a ``data:`` URI. A remote
URL is refused: the engine trains offline, and what a URL serves can change under the same key.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlparse

TEXT, IMAGE = "text", "image"
# Where each spelling keeps an image's source, in the order they are looked for.
_IMAGE_SOURCE_KEYS = ("image", "url", "path", "value")
PARTS_EXAMPLE = '[{"type": "image"}, {"type": "text", "text": "..."}]'
# Qwen-VL's inline image tag, its source between the tags (a newline in it kept); the same
# pattern in Python's `re` and in Arrow's RE2 (`survey` looks for tags column by column).
IMAGE_TAG = "(?s)<img>(.*?)</img>"
IMAGE_TAG_EXAMPLE = "Picture 1: <img>pictures/1.png</img>\\nWhat is this?"


@dataclass(frozen=True)
class Part:
    """One content part: text, or an image (`source` None: the row's next `images` entry)."""

    kind: str  # TEXT | IMAGE
    text: str = ""
    source: str | None = None


class BadPart(ValueError):
    """A part that is neither text nor an image in any known spelling (the message says how
    it differs)."""


def read_part(part: Any) -> Part:
    """`part` in whichever spelling it is written."""
    given = {k: v for k, v in part.items() if v is not None} if isinstance(part, Mapping) else {}
    kind = given.get("type")
    if kind == TEXT:
        text = given.get("text", given.get("value"))
        if not isinstance(text, str) or not text.strip():
            raise BadPart("a text part with empty or non-string `text`")
        return Part(TEXT, text=text)
    if kind == IMAGE:
        source = next((given[k] for k in _IMAGE_SOURCE_KEYS if k in given), None)
        return Part(IMAGE, source=_source_text(source))
    if kind == "image_url":
        source = given.get("image_url", given.get("value", given.get("url")))
        if isinstance(source, Mapping):
            source = source.get("url")
        if source is None:
            raise BadPart("an `image_url` part without a URL (`image_url.url` or `value`)")
        return Part(IMAGE, source=_source_text(source))
    raise BadPart(
        f"a content part that is not text or an image: {part!r} (known: type text, image, "
        "image_url)"
    )


def tagged_parts(text: str) -> list[Part] | None:
    """`text` with Qwen-VL's `<img>SOURCE</img>` tags as content parts, in order: the text
    between tags as text parts (stripped; blank ones dropped, as around `<image>` marks), each
    tag as an image part naming its source (as written but for the spaces around it; "" for an
    empty tag). None where the text has no tag."""
    pieces = re.split(IMAGE_TAG, text)
    if len(pieces) == 1:
        return None
    parts: list[Part] = []
    for k, piece in enumerate(pieces):
        if k % 2:  # re.split puts each tag's source between the texts around it
            parts.append(Part(IMAGE, source=piece.strip()))
        elif piece.strip():
            parts.append(Part(TEXT, text=piece.strip()))
    return parts


def _source_text(source: Any) -> str | None:
    if source is None or (isinstance(source, str) and source):
        return source
    raise BadPart(f"an image part whose source is {type(source).__name__}, not a path or URL")


# --------------------------------------------------------------------------- image sources


@dataclass(frozen=True)
class ImageSource:
    """Where an image's bytes are: a local path (`path`) or inline (`data`)."""

    path: str | None = None
    data: bytes | None = None


class RemoteImage(ValueError):
    """An image named by a URL the engine will not fetch."""


def image_source(source: str) -> ImageSource:
    """A source as written in a row (a path, a ``file://`` URL, a ``data:`` URI)."""
    scheme = urlparse(source).scheme.lower()
    if source.startswith("data:"):
        return ImageSource(data=_data_uri(source))
    if scheme == "file":
        return ImageSource(path=unquote(urlparse(source).path))
    if len(scheme) > 1:  # a one-letter scheme is a Windows drive (C:\...)
        raise RemoteImage(
            f"the image `{_shorten(source)}` is a remote URL: the engine trains offline, and "
            "what a URL serves can change under the same stage key"
        )
    return ImageSource(path=source)


def _data_uri(source: str) -> bytes:
    header, _, payload = source.partition(",")
    if not header.endswith(";base64"):
        raise ValueError("a data: URI image must be base64 (data:image/png;base64,...)")
    try:
        return base64.b64decode(payload, validate=True)
    except binascii.Error as error:
        raise ValueError(f"a data: URI image whose base64 does not decode ({error})") from None


def _shorten(text: str, limit: int = 80) -> str:
    return text if len(text) <= limit else f"{text[: limit - 3]}..."
