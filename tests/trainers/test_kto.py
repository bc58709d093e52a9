"""What a KTO stage asks of its batches and labels (`trainers.kto`), decided from the stage's
settings alone, in milliseconds: TRL's KTOTrainer pairs each prompt with another completion of
its batch for the KL term, so a batch of one row, another sampling order, a last batch of one
row and rows all labelled one way are refused before anything loads."""

from __future__ import annotations

import pytest

from recipe_engine.errors import RecipeError
from recipe_engine.trainers import TRAINERS
from recipe_engine.trainers.kind import LabelCounts, StageFacts
from recipe_engine.trainers.kto import KIND, check_kl_batches, check_labels, estimates_kl


def kto(rows: int = 64, processes: int = 1, labels: LabelCounts | None = None, **train: object):
    train = {"per_device_train_batch_size": 4, **train}
    return StageFacts("align", train, rows, processes, "data file f.jsonl", labels)


def test_only_kto_with_a_kl_term_pairs_rows_within_its_batches():
    assert estimates_kl(kto().train)
    assert not estimates_kl(kto(loss_type="apo_zero_unpaired").train)  # TRL: calculate_KL = False
    for name in ("sft", "dpo", "orpo"):  # KTO's own check: no other judged kind has it
        TRAINERS[name].check_plan(kto(per_device_train_batch_size=1))
    with pytest.raises(RecipeError):
        KIND.check_plan(kto(per_device_train_batch_size=1))
    assert "within batches of 4 rows" in KIND.plan_notes(kto())[0]
    assert KIND.plan_notes(kto(loss_type="apo_zero_unpaired")) == []


def test_a_batch_of_one_row_is_refused_as_trl_refuses_it_with_the_fixes():
    with pytest.raises(RecipeError) as refused:
        check_kl_batches(kto(per_device_train_batch_size=1))
    assert refused.value.key == "stage.align.train.per_device_train_batch_size"
    text = str(refused.value)
    assert "2 or more" in text and "loss_type=apo_zero_unpaired" in text
    KIND.check_plan(kto(per_device_train_batch_size=1, loss_type="apo_zero_unpaired"))


def test_another_sampling_order_breaks_the_pairs_and_is_refused():
    with pytest.raises(RecipeError) as refused:
        check_kl_batches(kto(train_sampling_strategy="random"))
    assert refused.value.key == "stage.align.train.train_sampling_strategy"
    check_kl_batches(kto(train_sampling_strategy="sequential"))


def test_an_epoch_ending_on_a_one_row_batch_is_refused_with_a_batch_size_that_fits():
    with pytest.raises(RecipeError) as refused:
        check_kl_batches(kto(9))  # 4 + 4 + 1
    text = str(refused.value)
    assert "per_device_train_batch_size=3" in text and "dataloader_drop_last=true" in text
    check_kl_batches(kto(9, dataloader_drop_last=True))
    check_kl_batches(kto(9, max_steps=2))  # stops before the one-row batch
    check_kl_batches(kto(10))  # 4 + 4 + 2
    # Two processes: 17 rows are 9 per process (the sampler pads), 4 + 4 + 1 again.
    with pytest.raises(RecipeError, match="9 rows per process"):
        check_kl_batches(kto(17, 2))


def test_rows_all_labelled_one_way_are_refused_naming_the_counts():
    check_labels(kto(labels=LabelCounts(3, 1)))
    with pytest.raises(RecipeError) as refused:
        check_labels(kto(labels=LabelCounts(4, 0)))
    text = str(refused.value)
    assert refused.value.key == "stage.align.data"
    assert "all labelled desirable (true)" in text and "4 desirable and 0 undesirable" in text
    assert "Add undesirable (false) rows" in text
    with pytest.raises(RecipeError, match="all labelled undesirable"):
        check_labels(kto(labels=LabelCounts(0, 5)))
