"""ms-swift's pretraining rows (`data.format: swift_pretrain`, or found by `auto`): one
`response` text a row, no query (swift.readthedocs.io, Custom Dataset: pretraining
`{"response": "..."}`). They are continued-pretraining text, read as TRL's language modeling
rows are (`language_modeling`: the loss on the whole text, evaluated by held-out loss alone).

`response` is also ms-swift's name for a completion, so it states this format only alone: beside
a `query` (or any other format's column) the rows are what that column says (prompt/completion
pairs keep detecting as they did), and beside a `text` column nothing tells which is the text.
"""

from __future__ import annotations

from recipe_engine.resolve.data_format import DataFormat
from recipe_engine.resolve.row_shapes import TEXTS

FORMAT = DataFormat(
    "swift_pretrain",
    ("text",),
    (("response",),),
    "`response` alone (ms-swift's pretraining text)",
    TEXTS,
    aliases={"text": ("response",)},
    alone=True,
    doc_columns="`response` alone (ms-swift's pretraining rows; detected where no other "
    "format's column is there)",
    doc_trl="`text`, as `language_modeling` rows: the loss covers the whole text; evaluated by "
    "held-out loss only",
)
