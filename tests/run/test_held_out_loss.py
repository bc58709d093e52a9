"""recipe_engine.run.held_out_loss: a stage's loss flags on probe rows of another kind are
replaced by the flags the plan would choose for those rows (the format registry's `Loss`)."""

from __future__ import annotations

from types import SimpleNamespace

from recipe_engine.resolve.row_shapes import row_shape
from recipe_engine.run.held_out_loss import _flags_for_rows

PAIR = {"prompt": "2+2?", "completion": "4", "images": []}
CONVERSATION = {
    "messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}],
    "images": [],
}
UNMARKED = SimpleNamespace(chat_template="{% for m in messages %}{{ m.content }}{% endfor %}")


def test_flags_that_fit_the_rows_are_kept() -> None:
    settings = {"completion_only_loss": True, "max_length": 64}
    assert _flags_for_rows(settings, row_shape(PAIR), UNMARKED) == settings
    kept = {"assistant_only_loss": False}
    assert _flags_for_rows(kept, row_shape(PAIR), UNMARKED) == kept  # off: nothing to refuse


def test_flags_the_rows_cannot_take_become_the_plans_choice_for_them() -> None:
    stage = {"assistant_only_loss": True, "max_length": 64}
    assert _flags_for_rows(stage, row_shape(PAIR), UNMARKED) == {
        "max_length": 64,
        "completion_only_loss": True,
    }
    pairs = {"completion_only_loss": True}
    # Conversations under a template without markers: the loss on the whole conversation.
    assert _flags_for_rows(pairs, row_shape(CONVERSATION), UNMARKED) == {
        "assistant_only_loss": False
    }
