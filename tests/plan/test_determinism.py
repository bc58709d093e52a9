"""What a stage's weights can be trusted to repeat, decided by `plan` before anything trains."""

from __future__ import annotations

from plans import plan

from recipe_engine.plan.determinism import BNB_CUDA, decide_determinism


def test_cpu_stages_repeat_bitwise_on_the_same_platform_without_any_switch():
    cpu = decide_determinism("cpu", deterministic=False, quantized=True)
    assert cpu.repeatable and not cpu.deterministic_kernels
    assert "thread count" in cpu.describe()


def test_cuda_repeats_only_with_deterministic_kernels_and_says_what_they_cost():
    fast = decide_determinism("cuda", deterministic=False, quantized=False)
    assert not fast.repeatable and "deterministic=true" in fast.describe()
    slow = decide_determinism("cuda", deterministic=True, quantized=False)
    assert slow.repeatable and "CUBLAS_WORKSPACE_CONFIG" in slow.describe()
    assert "slower" in slow.cost


def test_bitsandbytes_cuda_kernels_are_named_as_not_covered():
    qlora = decide_determinism("cuda", deterministic=True, quantized=True)
    assert not qlora.repeatable and qlora.not_covered == (BNB_CUDA,)
    assert "bitsandbytes" in qlora.describe()


def test_mps_is_never_promised_repeatable():
    assert not decide_determinism("mps", deterministic=True, quantized=False).repeatable


def test_deterministic_true_reaches_the_trainer_and_the_key_while_default_keys_stay():
    default, asked = (
        plan("recipe=r2-vision-only"),
        plan("recipe=r2-vision-only", "deterministic=true"),
    )
    vision, strict = default.stages["vision"], asked.stages["vision"]
    assert vision.trainer["full_determinism"] is False
    assert strict.trainer["full_determinism"] is True and strict.determinism.deterministic_kernels
    assert strict.fingerprint != vision.fingerprint
    # Seeding left full fine-tune keys as they were; built-in data is keyed by its rows since
    # the resolve layer (it was keyed by the tiny builder's source file, cc17357bb5e3 then).
    # The tiny builder's version entered the key with v4 (f6643624bda3 before).
    assert vision.fingerprint.startswith("81cb9290d57c")


def test_a_stage_asking_full_determinism_itself_is_planned_as_deterministic():
    stage = plan("recipe=r2-vision-only", "++stage.vision.train.full_determinism=true")
    assert stage.stages["vision"].determinism.deterministic_kernels


def test_lora_stages_got_new_keys_because_their_old_keys_named_no_single_result(monkeypatch):
    """LoRA adapters were initialised unseeded (key 873ef3c284d3 then): the seeded init is
    part of a LoRA stage's key, so a key without it names another stage."""
    from recipe_engine.plan import keys

    llm = plan("recipe=r1-llm-only").stages["llm"]
    unseeded = {"lora_init": "seeded"}
    assert keys._randomness(llm).items() >= unseeded.items()
    real = keys._randomness
    monkeypatch.setattr(
        keys,
        "_randomness",
        lambda stage: {k: v for k, v in real(stage).items() if k != "lora_init"},
    )
    without = plan("recipe=r1-llm-only").stages["llm"]
    assert without.fingerprint != llm.fingerprint


def test_a_new_tiny_builder_version_gives_a_tiny_model_s_stages_new_keys(monkeypatch):
    """The builder's version names what it builds (v4: the weights built on one thread), so a
    stage stored from an older build is never reused for a newer one."""
    from recipe_engine.resolve import sources

    before = plan("recipe=r3-two-stage")
    monkeypatch.setattr(sources, "TINY_BUILD_VERSION", "v-next")
    after = plan("recipe=r3-two-stage")
    for name in ("vision", "llm"):
        assert after.stages[name].fingerprint != before.stages[name].fingerprint, name
