"""A stage's trainer is a choice (auto | sft | dpo | orpo | kto): its name and its `train` keys
are checked against the trainer's own settings class before anything is read (with `auto`,
against any trainer's: its rows choose one, whose class `plan` checks them against)."""

from __future__ import annotations

import pytest

from recipe_engine.config.library_keys import check_train, check_train_for_one_of
from recipe_engine.errors import RecipeError
from recipe_engine.trainers import TRAINERS, trainer_for, trainer_kinds, trainers_taking


def test_an_unknown_trainer_is_named_with_the_closest_one():
    with pytest.raises(RecipeError) as refused:
        trainer_kinds("dpoo", "align")
    assert refused.value.key == "stage.align.trainer"
    assert "Did you mean `dpo`" in str(refused.value)
    assert "auto, sft, dpo, orpo, kto" in str(refused.value)
    with pytest.raises(RecipeError, match="Did you mean `kto`"):
        trainer_kinds("ktoo", "align")
    with pytest.raises(RecipeError, match="Did you mean `auto`"):
        trainer_kinds("atuo", "align")


def test_auto_may_be_any_trainer_and_the_rows_choose_the_first_that_takes_them():
    assert trainer_kinds("auto", "s") == list(TRAINERS.values())
    assert trainer_kinds("orpo", "s") == [TRAINERS["orpo"]]
    rows = {"instruction": "sft", "preference": "dpo", "unpaired": "kto"}
    assert {kind: trainer_for(kind) for kind in rows} == rows
    check_train_for_one_of("s", {"beta": 0.2}, ["SFTConfig", "DPOConfig"])  # DPO's key
    with pytest.raises(RecipeError, match="SFTConfig fields"):  # the first class says why
        check_train_for_one_of("s", {"betta": 0.2}, ["SFTConfig", "DPOConfig"])


def capabilities(name: str) -> set[str]:
    return {capability.name for capability in TRAINERS[name].capabilities}


def test_preference_trainers_take_pairs_and_only_dpo_keeps_a_reference():
    assert not TRAINERS["sft"].preference
    assert TRAINERS["dpo"].preference and capabilities("dpo") == {"reference", "judged"}
    assert TRAINERS["orpo"].preference and capabilities("orpo") == {"judged"}


def test_kto_takes_unpaired_rows_keeps_a_reference_and_forms_kl_pairs_in_its_batches():
    kto = TRAINERS["kto"]
    assert kto.rows == "unpaired" and kto.judged and not kto.preference
    assert capabilities("kto") == {"reference", "judged"} and kto.images
    assert (kto.module, kto.trainer_class, kto.settings_class) == ("trl", "KTOTrainer", "KTOConfig")
    assert trainers_taking("unpaired") == ["kto"]
    assert trainers_taking("preference") == ["dpo", "orpo"]
    assert type(kto).check_plan is not type(TRAINERS["dpo"]).check_plan  # its KL batches


def test_kto_keys_are_checked_against_kto_config():
    check_train(
        "kto", {"beta": 0.2, "desirable_weight": 1.3, "loss_type": "apo_zero_unpaired"}, "KTOConfig"
    )
    with pytest.raises(RecipeError, match=r"stage\.kto\.train\.loss_type"):
        check_train("kto", {"loss_type": "sigmoid"}, "KTOConfig")  # DPO's, not KTO's
    with pytest.raises(RecipeError, match="KTOConfig fields"):
        check_train("kto", {"rpo_alpha": 0.5}, "KTOConfig")


def test_dpo_keys_are_checked_against_dpo_config():
    check_train("dpo", {"beta": 0.2, "loss_type": ["sigmoid"], "learning_rate": 1e-4}, "DPOConfig")
    with pytest.raises(RecipeError, match=r"stage\.dpo\.train\.beta.*expected"):
        check_train("dpo", {"beta": "high"}, "DPOConfig")
    with pytest.raises(RecipeError, match="DPOConfig fields"):
        check_train("dpo", {"assistant_only_loss": True}, "DPOConfig")


def test_orpo_keys_come_from_trl_experimental_orpo_config():
    check_train("orpo", {"beta": 0.1, "max_length": 256}, "ORPOConfig")
    with pytest.raises(RecipeError, match="ORPOConfig fields"):
        check_train("orpo", {"bta": 0.1}, "ORPOConfig")


def test_engine_owned_keys_stay_refused_for_every_trainer():
    for kind in TRAINERS.values():
        with pytest.raises(RecipeError, match="set by the engine"):
            check_train("x", {"seed": 3}, kind.settings_class)
