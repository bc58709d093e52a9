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


def test_deterministic_true_reaches_the_trainer_and_the_key():
    default, asked = (
        plan("recipe=r2-vision-only"),
        plan("recipe=r2-vision-only", "deterministic=true"),
    )
    vision, strict = default.stages["vision"], asked.stages["vision"]
    assert vision.trainer["full_determinism"] is False
    assert strict.trainer["full_determinism"] is True and strict.determinism.deterministic_kernels
    assert strict.fingerprint != vision.fingerprint
    assert vision.fingerprint.startswith("8754e3875076")  # key version 2


def test_a_stage_asking_full_determinism_itself_is_planned_as_deterministic():
    stage = plan("recipe=r2-vision-only", "++stage.vision.train.full_determinism=true")
    assert stage.stages["vision"].determinism.deterministic_kernels


def test_the_key_version_enters_every_key(monkeypatch):
    """One constant names what every key is made with: a new version gives every stage of
    every recipe a new key (what was stored under the old ones is kept, not reused)."""
    from recipe_engine.plan import dag

    before = plan("recipe=r3-two-stage")
    monkeypatch.setattr(dag, "KEY_VERSION", dag.KEY_VERSION + 1)
    after = plan("recipe=r3-two-stage")
    for name in ("vision", "llm"):
        assert after.stages[name].fingerprint != before.stages[name].fingerprint


def test_a_new_tiny_builder_version_gives_a_tiny_model_s_stages_new_keys(monkeypatch):
    """The builder's version names what it builds (v4: the weights built on one thread), so a
    stage stored from an older build is never reused for a newer one."""
    from recipe_engine.resolve import sources

    before = plan("recipe=r3-two-stage")
    monkeypatch.setattr(sources, "TINY_BUILD_VERSION", "v-next")
    after = plan("recipe=r3-two-stage")
    for name in ("vision", "llm"):
        assert after.stages[name].fingerprint != before.stages[name].fingerprint, name
