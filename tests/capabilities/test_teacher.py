"""A stage's teacher: an input of the graph ordered before the stage, hashed into its key (a
retrained teacher retrains the student), counted on its memory estimate, and refused before a
weight loads where it is missing, misplaced or of another tokenizer."""

from __future__ import annotations

import dataclasses

import pytest
from plans import plan

from recipe_engine.capabilities import InputStage, StageFacts, Vocabulary
from recipe_engine.capabilities.teacher import TEACHER
from recipe_engine.errors import RecipeError
from recipe_engine.plan import dag

R8 = "recipe=r8-distill-text"


def stage(parent: str | None = None, teacher: str | None = None) -> dict:
    return {"init": {"from_stage": parent}, "teacher": {"from_stage": teacher}, "train": {}}


def test_the_teacher_is_ordered_before_the_stage_that_learns_from_it():
    graph = dag.build_graph({"student": stage(teacher="big"), "big": stage(), "a": stage()})
    assert graph.order == ("big", "student", "a")
    assert graph.inputs("student") == ["big"] and graph.parents["student"] is None
    chain = dag.build_graph(
        {"s": stage("sft", teacher="t"), "t": stage("t0"), "sft": stage(), "t0": stage()}
    )
    assert chain.order == ("sft", "t0", "t", "s")
    assert chain.needs("s") == ["sft", "t0", "t"]
    assert chain.children("t") == []  # a teacher is an input, not a parent
    assert chain.loaded_by("t") == ["s"] and chain.loaded_by("s") == []


def test_a_teacher_feeds_a_target_and_a_cycle_through_it_is_refused():
    graph = dag.build_graph({"t": stage(), "s": stage(teacher="t")}, targets=["s"])
    assert graph.needs("s") == ["t"]
    with pytest.raises(RecipeError, match="cycle: ") as refused:
        dag.build_graph({"a": stage(teacher="b"), "b": stage("a")})
    assert refused.value.key == "stage.a.teacher.from_stage"


def test_a_teacher_naming_no_stage_suggests_the_closest():
    with pytest.raises(RecipeError, match="Did you mean `teacher`") as refused:
        dag.build_graph({"teacher": stage(), "s": stage(teacher="teachr")})
    assert refused.value.key == "stage.s.teacher.from_stage"


def test_the_plan_draws_the_teacher_and_keys_the_student_by_it():
    from recipe_engine.evaluate.experiment_jobs import final_stage

    planned = plan(R8)
    assert final_stage(plan(R8, "recipe.targets=[]")) == "distill"  # the teacher is loaded
    distill = planned.stages["distill"]
    assert planned.graph.order == ("llm", "teacher", "distill")
    assert distill.inputs == {"teacher": "teacher"} and distill.parent == "llm"
    assert planned.inputs_of(distill) == {"teacher": planned.stages["teacher"]}
    retaught = plan(R8, "stage.teacher.train.learning_rate=1e-3")
    assert retaught.stages["teacher"].fingerprint != planned.stages["teacher"].fingerprint
    assert retaught.stages["distill"].fingerprint != distill.fingerprint
    assert retaught.stages["llm"].fingerprint == planned.stages["llm"].fingerprint


def test_stages_without_a_teacher_keep_their_keys():
    """The teacher enters a key only where a stage has one: text-lora's stage in r8 is the
    stage text-lora trains (reused from the store), key for key."""
    assert plan(R8).stages["llm"].fingerprint == plan("recipe=text-lora").stages["llm"].fingerprint


def test_the_estimate_counts_the_teachers_weights():
    planned = plan(R8)
    memory = planned.stages["distill"].memory.estimate
    teacher_params = sum(planned.stages["teacher"].policy.param_counts.values())
    assert memory.of("teacher model") == pytest.approx(teacher_params * 4 / 2**30)  # float32
    assert dict(memory.parts())["teacher model"] > 0
    assert planned.stages["llm"].memory.estimate.of("teacher model") == 0


def vocabulary(vocab_size: int, digest: str) -> Vocabulary:
    return Vocabulary(vocab_size, {"tokenizer.json": digest, "tokenizer_config.json": "x"})


def student(ours: Vocabulary, theirs: Vocabulary | None) -> StageFacts:
    teacher = InputStage("t", "f" * 64, 1000, False, theirs)
    return StageFacts("s", {}, 8, 1, "rows", vocabulary=ours, inputs={"teacher": teacher})


def test_a_teacher_with_another_vocabulary_is_refused():
    same = vocabulary(363, "a")
    TEACHER.plan(student(same, dataclasses.replace(same)))
    # Settings beside the vocabulary (tokenizer_config.json) may differ.
    TEACHER.plan(student(same, Vocabulary(363, {"tokenizer.json": "a"})))
    TEACHER.plan(student(same, None))  # not read here: TRL compares on load
    for other in (vocabulary(363, "b"), vocabulary(400, "a")):
        with pytest.raises(RecipeError, match="must share one tokenizer") as refused:
            TEACHER.plan(student(same, other))
        assert refused.value.key == "stage.s.teacher.from_stage"


def test_the_teacher_plans_its_key_part_its_weights_on_the_estimate_and_its_load():
    planned = TEACHER.plan(student(vocabulary(363, "a"), vocabulary(363, "a")))
    assert planned.key == {"teacher": "f" * 64}
    assert [(m.label, m.params) for m in planned.frozen] == [("teacher model", 1000)]
    [load] = planned.loads
    assert (load.argument, load.stage, load.role) == ("teacher_model", "t", "teacher")
