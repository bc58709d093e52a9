"""What a KTO stage asks of its batches and labels (`plan.feedback`), decided from the stage's
settings alone, in milliseconds: TRL's KTOTrainer pairs each prompt with another completion of
its batch for the KL term, so a batch of one row, another sampling order, a last batch of one
row and rows all labelled one way are refused before anything loads."""

from __future__ import annotations

import pytest

from recipe_engine.config.schema import StageConfig
from recipe_engine.errors import RecipeError
from recipe_engine.plan.feedback import (
    check_kl_batches,
    check_labels,
    estimates_kl,
    feedback_notes,
)
from recipe_engine.resolve.inputs import LabelCounts


def kto(**train: object) -> StageConfig:
    return StageConfig(trainer="kto", train={"per_device_train_batch_size": 4, **train})


def test_only_kto_with_a_kl_term_pairs_rows_within_its_batches():
    assert estimates_kl(kto())
    assert not estimates_kl(kto(loss_type="apo_zero_unpaired"))  # TRL: calculate_KL = False
    assert not estimates_kl(StageConfig(trainer="dpo"))
    assert "within batches of 4 rows" in feedback_notes("align", kto())[0]
    assert feedback_notes("align", kto(loss_type="apo_zero_unpaired")) == []


def test_a_batch_of_one_row_is_refused_as_trl_refuses_it_with_the_fixes():
    with pytest.raises(RecipeError) as refused:
        check_kl_batches("align", kto(per_device_train_batch_size=1), 64, 1)
    assert refused.value.key == "stage.align.train.per_device_train_batch_size"
    text = str(refused.value)
    assert "2 or more" in text and "loss_type=apo_zero_unpaired" in text
    check_kl_batches(
        "align", kto(per_device_train_batch_size=1, loss_type="apo_zero_unpaired"), 64, 1
    )


def test_another_sampling_order_breaks_the_pairs_and_is_refused():
    with pytest.raises(RecipeError) as refused:
        check_kl_batches("align", kto(train_sampling_strategy="random"), 64, 1)
    assert refused.value.key == "stage.align.train.train_sampling_strategy"
    check_kl_batches("align", kto(train_sampling_strategy="sequential"), 64, 1)


def test_an_epoch_ending_on_a_one_row_batch_is_refused_with_a_batch_size_that_fits():
    with pytest.raises(RecipeError) as refused:
        check_kl_batches("align", kto(), 9, 1)  # 4 + 4 + 1
    text = str(refused.value)
    assert "per_device_train_batch_size=3" in text and "dataloader_drop_last=true" in text
    check_kl_batches("align", kto(dataloader_drop_last=True), 9, 1)
    check_kl_batches("align", kto(max_steps=2), 9, 1)  # stops before the one-row batch
    check_kl_batches("align", kto(), 10, 1)  # 4 + 4 + 2
    # Two processes: 17 rows are 9 per process (the sampler pads), 4 + 4 + 1 again.
    with pytest.raises(RecipeError, match="9 rows per process"):
        check_kl_batches("align", kto(), 17, 2)


def test_rows_all_labelled_one_way_are_refused_naming_the_counts():
    check_labels("align", kto(), "data file f.jsonl", LabelCounts(3, 1))
    with pytest.raises(RecipeError) as refused:
        check_labels("align", kto(), "data file f.jsonl", LabelCounts(4, 0))
    text = str(refused.value)
    assert refused.value.key == "stage.align.data"
    assert "all labelled desirable (true)" in text and "4 desirable and 0 undesirable" in text
    assert "Add undesirable (false) rows" in text
    with pytest.raises(RecipeError, match="all labelled undesirable"):
        check_labels("align", kto(), "data file f.jsonl", LabelCounts(0, 5))
