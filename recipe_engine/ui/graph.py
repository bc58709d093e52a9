"""A run's stage graph laid out for drawing: boxes in columns by depth, arrows parent -> child
(and from each other stage a stage loads: a distilling stage's, say).

networkx orders the graph (`topological_generations`: a stage's column is the longest path to
it from a root); the page draws the boxes and arrows as inline SVG, each box a link to its
stage, so the graph needs no script and reads without one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import networkx as nx

from recipe_engine.ui.runs import StageView

BOX_W, BOX_H = 190, 64
GAP_X, GAP_Y = 70, 24
MARGIN = 12


@dataclass(frozen=True)
class Box:
    stage: StageView
    x: int
    y: int

    @property
    def middle_y(self) -> int:
        return self.y + BOX_H // 2


@dataclass(frozen=True)
class Arrow:
    """From the right edge of the parent's box to the left edge of the child's."""

    x1: int
    y1: int
    x2: int
    y2: int


@dataclass(frozen=True)
class Layout:
    boxes: list[Box]
    arrows: list[Arrow]
    width: int
    height: int
    box_w: int = BOX_W
    box_h: int = BOX_H


def layout(stages: Sequence[StageView]) -> Layout:
    """Columns by generation (roots first), rows in the recipe's order within a column."""
    graph = nx.DiGraph()
    graph.add_nodes_from(stage.name for stage in stages)
    named = {stage.name: stage for stage in stages}
    graph.add_edges_from((s.parent, s.name) for s in stages if s.parent in named)
    graph.add_edges_from(
        (source, s.name) for s in stages for source in s.inputs.values() if source in named
    )
    if not nx.is_directed_acyclic_graph(graph):  # a damaged config: draw one column
        columns = [[stage.name for stage in stages]]
    else:
        order = list(named)
        columns = [sorted(g, key=order.index) for g in nx.topological_generations(graph)]
    boxes: dict[str, Box] = {}
    for column, names in enumerate(columns):
        for row, name in enumerate(names):
            x = MARGIN + column * (BOX_W + GAP_X)
            boxes[name] = Box(named[name], x, MARGIN + row * (BOX_H + GAP_Y))
    arrows = [
        Arrow(boxes[a].x + BOX_W, boxes[a].middle_y, boxes[b].x - 4, boxes[b].middle_y)
        for a, b in graph.edges
    ]
    rows = max((len(names) for names in columns), default=1)
    width = 2 * MARGIN + len(columns) * BOX_W + max(0, len(columns) - 1) * GAP_X
    height = 2 * MARGIN + rows * BOX_H + (rows - 1) * GAP_Y
    return Layout([boxes[name] for name in named], arrows, width, height)
