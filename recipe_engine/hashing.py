"""One hash for everything keyed by content: stage keys, cache records, config matches."""

from __future__ import annotations

import hashlib
import json
from typing import Any


def canonical_hash(value: Any) -> str:
    """sha256 of a canonical JSON form: independent of key order and YAML formatting."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()
