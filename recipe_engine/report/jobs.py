"""Runs submitted to a scheduler, as text: what a submission sent, and each stage job's state
(`runs jobs`)."""

from __future__ import annotations

from pathlib import Path

from recipe_engine.launchers.kinds import DownNode, JobPhase, JobState
from recipe_engine.launchers.records import SubmittedJob
from recipe_engine.plan.dag import short
from recipe_engine.plan.recipe_plan import RecipePlan
from recipe_engine.tables import text_table


def render_submitted(plan: RecipePlan, jobs: list[SubmittedJob], run_dir: Path) -> str:
    submitted = {job.stage: job for job in jobs}
    lines = []
    for name in plan.graph.order:
        job = submitted.get(name)
        if job is None:
            lines.append(f"stage {name}: not submitted (in the store, or not in `only`)")
            continue
        after = f", after job(s) of {', '.join(job.after)}" if job.after else ""
        lines.append(f"stage {name}: {job.label} ({job.nodes} node(s){after})")
    if not jobs:
        lines.append("Nothing to submit: every stage is in the store.")
        return "\n".join(lines)
    lines += [
        f"run folder: {run_dir} (each stage's run in <run folder>/<stage>/)",
        f"follow: python -m recipe_engine runs jobs {run_dir}",
    ]
    return "\n".join(lines)


def render_job_states(
    run_dir: Path,
    jobs: list[SubmittedJob],
    states: dict[str, JobState],
    down: dict[str, DownNode],
) -> str:
    """One row per stage job: its state in its scheduler, where, when; then one line per job
    that did not finish, saying why and what to run."""
    rows = []
    for job in jobs:
        state = states.get(job.job_id)
        rows.append(
            [
                job.stage,
                job.job_id,
                state.said if state else "UNKNOWN",
                state.nodes if state else "-",
                state.elapsed if state else "-",
                short(job.key),
            ]
        )
    table = text_table(rows, ["stage", "job", "state", "nodes", "elapsed", "key"])
    notes = [_why(job, jobs, states, down) for job in jobs]
    return "\n".join([f"run {run_dir}", *table, *(n for n in notes if n)])


def _why(
    job: SubmittedJob,
    jobs: list[SubmittedJob],
    states: dict[str, JobState],
    down: dict[str, DownNode],
) -> str:
    """For a job that ended without its stage: which parent stopped it, or which node
    failed, and the command that submits what is left (finished stages are reused)."""
    state = states.get(job.job_id)
    if state is None or not state.phase.ended or state.phase is JobPhase.COMPLETED:
        return ""
    rerun = f"rerun `{job.command}` to submit what is left (finished stages are reused)"
    by_stage = {j.stage: j for j in jobs}
    failed_parents = [
        p
        for p in job.after
        if states.get(by_stage[p].job_id)
        and states[by_stage[p].job_id].phase is not JobPhase.COMPLETED
    ]
    if failed_parents:
        parent = by_stage[failed_parents[0]]
        return (
            f"{job.stage}: {state.said}, not run: its parent stage {parent.stage} (job "
            f"{parent.job_id}) ended {states[parent.job_id].said}; its log: {parent.log}"
        )
    lost = [n for n in state.node_names if n in down]
    if state.phase is JobPhase.NODE_LOST or lost:
        node = lost[0] if lost else state.nodes
        reason = f" ({down[node].reason})" if node in down else ""
        back = f" (`{down[node].back}`)" if node in down else ""
        return (
            f"{job.stage}: {state.said}: node {node} went down{reason} while job {job.job_id} "
            f"ran. Once it is back{back}, {rerun}; the stage resumes from its last checkpoint."
        )
    why = f": {state.reason}" if state.reason not in ("", "None") else ""
    return (
        f"{job.stage}: {state.said} (exit {state.exit_code}{why}); its log: {job.log}. "
        f"Then {rerun}."
    )
