"""The shapes data has where it crosses the engine's edge, each named once.

Between the engine's modules, records are typed dataclasses. A mapping stays a mapping only
where its keys are someone else's: a JSON document, a library's keyword arguments, a row of
a user's data or of what TRL takes. Each such edge has one name here, so a signature says
which edge a mapping comes from and what may be assumed of its keys (nothing beyond it).
"""

from __future__ import annotations

from typing import Any, TypeAlias

# A JSON object: a document read from or written to a file (a model's config.json, the
# pins file, a cache record), sent through a pipe to a child process, hashed into a key
# (`hashing.canonical_hash`), or a composed config as plain data (`OmegaConf.to_container`).
# Plain data only; its keys are the document's.
JsonObject: TypeAlias = dict[str, Any]

# Keyword arguments handed unchanged to a library: `SFTConfig(**kwargs)`,
# `LoraConfig(**kwargs)`, `BitsAndBytesConfig(**kwargs)`, a transformers config class,
# `datasets.load_dataset`, submitit's sbatch options. Its keys are the library's.
LibraryKwargs: TypeAlias = dict[str, Any]

# An open section of a recipe, as the user writes it (YAML, the command line), which the
# schema leaves open so that any key can be set: a stage's `data` keys over the recipe's,
# a model's `components` regexes. The engine checks its keys where it reads them.
RecipeSection: TypeAlias = dict[str, Any]

# One row of data: a record as a user's file holds it, or one row as TRL takes it
# (`resolve.row_shapes`: messages, prompt/completion, preference pairs, images).
DataRow: TypeAlias = dict[str, Any]

# A chat message as chat templates and TRL read it: {"role": ..., "content": ...}, the
# content a string or a list of `ContentPart`s.
ChatMessage: TypeAlias = dict[str, Any]

# One part of a message's content: {"type": "text", "text": ...} or {"type": "image", ...}.
ContentPart: TypeAlias = dict[str, Any]
