"""A frozen reference (`capabilities.reference`): a full fine-tune's copy of its starting
weights on the estimate and loaded as `ref_model` (or reloaded by name, for a trainer that
does it itself), none for LoRA (the adapter-disabled base, checked on the built trainer) or
precomputed log-probs; TRL's refusals of the reference settings in `plan`."""

from __future__ import annotations

import pytest

from recipe_engine.capabilities import (
    DisabledAdapter,
    NamedStart,
    StageFacts,
    StartingWeights,
)
from recipe_engine.capabilities.reference import Reference
from recipe_engine.errors import RecipeError

DPO = Reference("DPOTrainer")
GRPO = Reference("GRPOTrainer", given=False, beta_default=0.0)


def stage(lora: bool = False, images: bool = False, **train: object) -> StageFacts:
    return StageFacts("pref", train, 64, 1, "pairs", images=images, lora=lora, params=1000)


def test_a_full_fine_tune_holds_a_frozen_copy_given_to_the_trainer():
    planned = DPO.plan(stage())
    [copy] = planned.frozen
    assert (copy.label, copy.params, copy.same_storage) == ("reference model", 1000, True)
    assert planned.loads == (StartingWeights("ref_model"),)
    assert planned.notes[0].startswith("reference: a frozen copy of the starting weights")


def test_lora_and_precomputed_log_probs_hold_no_copy():
    lora = DPO.plan(stage(lora=True))
    assert lora.frozen == () and lora.loads == (DisabledAdapter(),)
    assert "adapter-disabled base" in lora.notes[0]
    precomputed = DPO.plan(stage(precompute_ref_log_probs=True))
    assert precomputed.frozen == () and precomputed.loads == ()
    assert "precomputed" in precomputed.notes[0]


def test_a_trainer_that_reloads_its_reference_gets_the_starting_folders_name():
    assert GRPO.plan(stage()).loads == ()  # beta 0: no reference at all
    kept = GRPO.plan(stage(beta=0.04))
    assert kept.loads == (NamedStart(),) and [m.label for m in kept.frozen] == ["reference model"]
    assert GRPO.plan(stage(lora=True, beta=0.04)).loads == ()  # TRL disables the adapter


@pytest.mark.parametrize(
    ("facts", "key"),
    [
        (stage(lora=True, sync_ref_model=True), "stage.pref.train.sync_ref_model"),
        (
            stage(sync_ref_model=True, precompute_ref_log_probs=True),
            "stage.pref.train.precompute_ref_log_probs",
        ),
        (
            stage(images=True, precompute_ref_log_probs=True),
            "stage.pref.train.precompute_ref_log_probs",
        ),
    ],
)
def test_what_trl_refuses_of_the_reference_settings_is_refused_in_plan(facts, key):
    with pytest.raises(RecipeError) as refused:
        DPO.plan(facts)
    assert refused.value.key == key
