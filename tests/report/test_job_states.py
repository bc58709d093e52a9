"""`runs jobs` as text: each stage job's state, and for one that did not finish, one line
saying which parent or node stopped it and what to run (from records; tests/cluster/ make
them on a real scheduler)."""

from __future__ import annotations

from pathlib import Path

from recipe_engine.launchers.kinds import DownNode, JobState
from recipe_engine.launchers.records import SubmittedJob
from recipe_engine.launchers.slurm_cluster import job_state
from recipe_engine.report.jobs import render_job_states

COMMAND = "python -m recipe_engine recipe=r3-two-stage launcher=slurm"
VISION = SubmittedJob(
    "vision", "11", "a" * 64, (), 1, "/runs/r3/vision/slurm/11_0_log.out", COMMAND
)
LLM = SubmittedJob(
    "llm", "12", "b" * 64, ("vision",), 1, "/runs/r3/llm/slurm/12_0_log.out", COMMAND
)


def state(job_id: str, name: str, nodes: str = "n1", reason: str = "None") -> JobState:
    """As SLURM's accounting reports it: one line of `sacct -X -n -P -o JobID,State,...`."""
    return job_state(f"{job_id}|{name}|0:0|{nodes}|00:01:00|{reason}")


def render(states: dict[str, JobState], down: dict[str, DownNode] | None = None) -> list[str]:
    return render_job_states(Path("/runs/r3"), [VISION, LLM], states, down or {}).splitlines()


def test_finished_jobs_are_a_row_each_and_nothing_more():
    lines = render({"11": state("11", "COMPLETED"), "12": state("12", "COMPLETED")})
    assert lines[0] == "run /runs/r3"
    assert [line.split()[:3] for line in lines[2:]] == [
        ["vision", "11", "COMPLETED"],
        ["llm", "12", "COMPLETED"],
    ]


def test_a_child_cancelled_by_its_failed_parent_says_which_and_where_its_log_is():
    lines = render({"11": state("11", "FAILED"), "12": state("12", "CANCELLED", nodes="")})
    assert lines[-2].startswith("vision: FAILED (exit 0:0); its log: /runs/r3/vision/slurm/")
    assert lines[-1] == (
        "llm: CANCELLED, not run: its parent stage vision (job 11) ended FAILED; its log: "
        "/runs/r3/vision/slurm/11_0_log.out"
    )


def test_a_pending_child_whose_parent_failed_says_so_before_slurm_cancels_it():
    pending = state("12", "PENDING", nodes="", reason="DependencyNeverSatisfied")
    assert (
        "its parent stage vision (job 11) ended FAILED"
        in render({"11": state("11", "FAILED"), "12": pending})[-1]
    )


def test_a_job_whose_node_went_down_names_the_node_and_what_to_run():
    lines = render(
        {"11": state("11", "NODE_FAIL", nodes="n2"), "12": state("12", "PENDING", nodes="")},
        down={"n2": DownNode("power supply", "scontrol update nodename=n2 state=resume")},
    )
    [why] = [line for line in lines if line.startswith("vision:")]
    assert "node n2 went down (power supply) while job 11 ran" in why
    assert "scontrol update nodename=n2 state=resume" in why and f"rerun `{COMMAND}`" in why
