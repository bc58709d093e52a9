"""The web view's stage graph draws a distilling stage's teacher as a second input: an arrow
from the teacher's box, the teacher a column before the stage, listed before it."""

from __future__ import annotations

from recipe_engine.ui.graph import layout
from recipe_engine.ui.runs import StageView, in_order


def test_a_teacher_is_drawn_as_an_input_of_the_stage_it_teaches():
    stages = [
        StageView("distill", "llm", "planned", inputs={"teacher": "teacher"}),
        StageView("llm", None, "planned"),
        StageView("teacher", None, "planned"),
    ]
    assert [s.name for s in in_order(stages)] == ["llm", "teacher", "distill"]
    drawn = layout(stages)
    boxes = {box.stage.name: box for box in drawn.boxes}
    assert boxes["teacher"].x == boxes["llm"].x < boxes["distill"].x
    ends = {(a.x1, a.y1, a.x2, a.y2) for a in drawn.arrows}
    assert len(drawn.arrows) == 2
    for source in ("llm", "teacher"):
        start = (boxes[source].x + drawn.box_w, boxes[source].middle_y)
        assert any(end[:2] == start for end in ends), source
