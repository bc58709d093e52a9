"""A preference stage in the plan: its trainer takes the rows it is given or is refused by name
before a weight loads; its key holds the trainer; `plan` says what its reference model is."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from plans import pairs_csv, plan

from recipe_engine.errors import RecipeError


def _pairs_file(folder: Path) -> Path:
    rows = [{"prompt": f"{a} + {a}?", "chosen": str(2 * a), "rejected": str(2 * a + 1)}
            for a in range(8)]  # fmt: skip
    path = folder / "prefs.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def _text(*overrides: str):
    return plan("recipe=text-lora", "data.eval_fraction=0.25", *overrides)


def test_r5_plans_r3s_stages_with_r3s_keys_then_dpo_from_the_sft_stage():
    r3, r5 = plan("recipe=r3-two-stage"), plan("recipe=r5-sft-dpo")
    for name in ("vision", "llm"):
        assert r5.stages[name].fingerprint == r3.stages[name].fingerprint
    dpo = r5.stages["dpo"]
    assert dpo.parent == "llm" and dpo.config.trainer == "dpo"
    assert dpo.data.format == "vlm_preference"
    assert any("adapter-disabled base" in note for note in dpo.notes)
    assert "beta" in dpo.trainer and "assistant_only_loss" not in dpo.trainer


def test_the_trainer_enters_every_key(tmp_path):
    data = f"data.path={_pairs_file(tmp_path)}"
    dpo = _text("data.source=local", data, "stage.llm.trainer=dpo")
    orpo = _text("data.source=local", data, "stage.llm.trainer=orpo")
    assert dpo.stages["llm"].fingerprint != orpo.stages["llm"].fingerprint
    # r3's keys at key version 2: the default trainer (sft) is hashed like any other.
    r3 = plan("recipe=r3-two-stage")
    assert r3.stages["vision"].fingerprint.startswith("8754e3875076")
    assert r3.stages["llm"].fingerprint.startswith("51c08692dd3e")


def test_a_full_fine_tune_dpo_stage_keeps_a_frozen_copy_as_its_reference(tmp_path):
    planned = _text("data.source=local", f"data.path={_pairs_file(tmp_path)}",
                    "stage.llm.trainer=dpo", "stage.llm.lora=null")  # fmt: skip
    assert any("frozen copy" in note for note in planned.stages["llm"].notes)
    orpo = _text("data.source=local", f"data.path={_pairs_file(tmp_path)}",
                 "stage.llm.trainer=orpo")  # fmt: skip
    assert any("reference: none" in note for note in orpo.stages["llm"].notes)


def test_dpo_on_instruction_rows_is_refused_naming_the_columns_it_needs(tmp_path):
    with pytest.raises(RecipeError) as refused:
        _text("data.source=local", f"data.path={pairs_csv(tmp_path)}", "stage.llm.trainer=dpo")
    assert refused.value.key == "stage.llm.trainer"
    assert "prompt / chosen / rejected" in str(refused.value)


def test_sft_on_preference_pairs_is_refused_with_the_trainers_that_take_them(tmp_path):
    pairs = ("data.source=local", f"data.path={_pairs_file(tmp_path)}")
    with pytest.raises(RecipeError) as refused:
        _text(*pairs, "stage.llm.trainer=sft")
    assert "stage.llm.trainer=dpo" in str(refused.value)


def test_a_stage_left_at_auto_trains_with_the_trainer_its_rows_call_for(tmp_path):
    """Pairs given to a template that names no trainer: DPO, said, keyed as a stage that
    names dpo; instruction rows keep SFT and the key SFT stages always had."""
    chosen = _text("data.source=local", f"data.path={_pairs_file(tmp_path)}").stages["llm"]
    named = _text(
        "data.source=local", f"data.path={_pairs_file(tmp_path)}", "stage.llm.trainer=dpo"
    ).stages["llm"]
    assert chosen.config.trainer == "dpo" and chosen.fingerprint == named.fingerprint
    assert any("chosen by its rows" in note for note in chosen.notes)
    sft = _text().stages["llm"]
    assert (
        sft.config.trainer == "sft"
        and sft.fingerprint == _text("stage.llm.trainer=sft").stages["llm"].fingerprint
    )
    assert not any("chosen by its rows" in note for note in sft.notes)


def test_orpo_on_image_pairs_is_refused_because_trls_orpo_reads_text_only():
    with pytest.raises(RecipeError, match="takes text only"):
        plan(
            "recipe=r5-sft-dpo",
            "stage.dpo.trainer=orpo",
            "~stage.dpo.train.loss_type",  # DPOConfig's keys, not ORPOConfig's
            "~stage.dpo.train.loss_weights",
        )


def test_an_unknown_trainer_and_a_foreign_key_are_refused_before_anything_is_read():
    with pytest.raises(RecipeError, match="not a trainer the engine has"):
        plan("recipe=r5-sft-dpo", "stage.dpo.trainer=ppo")
    with pytest.raises(RecipeError, match="DPOConfig"):
        plan("recipe=r5-sft-dpo", "+stage.dpo.train.completion_only_loss=true")


def test_a_reference_copy_that_does_not_fit_is_refused_with_the_fixes_that_would():
    """TinyLlama's full DPO stage: 9.9 GiB with its frozen reference copy, on a 9 GiB GPU."""
    fits = plan("recipe=r5-sft-dpo-text", "model=tinyllama-1.1b", "stage.dpo.lora=null",
                "hardware=1x-rtx4090")  # fmt: skip
    memory = fits.stages["dpo"].memory
    assert dict(memory.estimate.parts())["reference model"] > 1.5  # GiB: a bf16 copy
    with pytest.raises(RecipeError) as refused:
        plan("recipe=r5-sft-dpo-text", "model=tinyllama-1.1b", "stage.dpo.lora=null",
             "hardware=1x-rtx4090", "hardware.gpus.0.memory_gib=9")  # fmt: skip
    text = str(refused.value)
    assert "frozen copy" in text and "precompute_ref_log_probs=true" in text


# --------------------------------------------------------------------------- KTO


def _feedback_file(folder: Path, labels: tuple[bool, ...] = (True, False)) -> Path:
    """TRL's unpaired rows (prompt / completion / label), as a user writes them."""
    rows = [
        {"prompt": f"{a} + {a}?", "completion": f"It is {2 * a + (a % 2)}.", "label": label}
        for a in range(8)
        for label in labels
    ]
    path = folder / "feedback.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def test_r6_plans_text_loras_stage_with_its_key_then_kto_from_it():
    text, r6 = plan("recipe=text-lora"), plan("recipe=r6-sft-kto-text")
    assert r6.stages["llm"].fingerprint == text.stages["llm"].fingerprint
    kto = r6.stages["kto"]
    assert kto.parent == "llm" and kto.config.trainer == "kto"
    assert kto.data.format == "chat_unpaired"  # through the tiny model's chat template
    assert kto.trainer["beta"] == 0.1 and "completion_only_loss" not in kto.trainer
    notes = " | ".join(kto.notes)
    assert "trainer: kto (trl.KTOTrainer)" in notes and "adapter-disabled base" in notes
    assert "KL term: each prompt paired with the previous row's completion" in notes


def test_a_full_fine_tune_kto_stage_keeps_a_frozen_copy_and_the_estimate_counts_it(tmp_path):
    data = ("data.source=local", f"data.path={_feedback_file(tmp_path)}")
    full = _text(*data, "stage.llm.trainer=kto", "stage.llm.lora=null").stages["llm"]
    lora = _text(*data, "stage.llm.trainer=kto").stages["llm"]
    assert any("frozen copy" in note for note in full.notes)
    assert dict(full.memory.estimate.parts())["reference model"] > 0
    assert "reference model" not in dict(lora.memory.estimate.parts())


def test_each_trainer_given_rows_it_does_not_learn_from_names_the_one_that_does(tmp_path):
    feedback = ("data.source=local", f"data.path={_feedback_file(tmp_path)}")
    for trainer in ("sft", "dpo", "orpo"):
        with pytest.raises(RecipeError) as refused:
            _text(*feedback, f"stage.llm.trainer={trainer}")
        text = str(refused.value)
        assert refused.value.key == "stage.llm.trainer"
        assert "holds unpaired feedback (prompt / completion / label)" in text
        assert "stage.llm.trainer=kto" in text
    pairs = ("data.source=local", f"data.path={_pairs_file(tmp_path)}")
    with pytest.raises(RecipeError) as refused:
        _text(*pairs, "stage.llm.trainer=kto")
    assert "kto, which learns from unpaired feedback" in str(refused.value)
    assert "stage.llm.trainer=dpo (or orpo)" in str(refused.value)
    with pytest.raises(RecipeError) as refused:
        _text("data.source=local", f"data.path={pairs_csv(tmp_path)}", "stage.llm.trainer=kto")
    assert "holds instruction rows" in str(refused.value)
    assert "stage.llm.trainer=sft" in str(refused.value)
    assert "prompt / completion / label" in str(refused.value)


def test_kto_rows_all_labelled_one_way_are_refused_while_planning(tmp_path):
    data = f"data.path={_feedback_file(tmp_path, labels=(True,))}"
    with pytest.raises(RecipeError) as refused:
        _text("data.source=local", data, "stage.llm.trainer=kto")
    assert "all labelled desirable (true)" in str(refused.value)
    assert "6 desirable and 0 undesirable" in str(refused.value)  # 8 rows, 2 held out


def test_reference_settings_trl_refuses_after_loading_are_refused_before(tmp_path):
    with pytest.raises(RecipeError, match="adapter-disabled base") as refused:
        plan("recipe=r6-sft-kto-text", "++stage.kto.train.sync_ref_model=true")
    assert refused.value.key == "stage.kto.train.sync_ref_model"
    with pytest.raises(RecipeError, match="would go stale"):
        plan("recipe=r6-sft-kto-text", "stage.kto.lora=null",
             "++stage.kto.train.sync_ref_model=true",
             "++stage.kto.train.precompute_ref_log_probs=true")  # fmt: skip
    with pytest.raises(RecipeError, match="needs text rows") as refused:
        plan("recipe=r5-sft-dpo", "++stage.dpo.train.precompute_ref_log_probs=true")
    assert refused.value.key == "stage.dpo.train.precompute_ref_log_probs"
