"""Comparisons, experiments and sweeps as pages: the reports the engine wrote (compare.md,
experiment.md with its table, answer line and charts) shown as HTML, and a sweep's jobs as a
table of settings and scores (`report.sweep`'s rows) that the page sorts."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

import markdown
from markupsafe import Markup

from recipe_engine.report.sweep import JOBS_FILE, SweepJob, parse_jobs, table_rows
from recipe_engine.ui.paths import OutputFolder, Refused
from recipe_engine.ui.runs import run_folders

EXPERIMENT_REPORT = "experiment.md"
_IMAGE = re.compile(r"!\[([^\]]*)\]\(([\w.-]+\.png)\)")
_FRONT_MATTER = re.compile(r"\A---\n.*?\n---\n", re.S)


@dataclass(frozen=True)
class Report:
    """A report the engine wrote: where (relative), its title and its answer line."""

    path: str  # the Markdown file, relative to output_root
    title: str
    answer: str = ""

    @property
    def folder(self) -> str:
        return self.path.rsplit("/", 1)[0]


@dataclass(frozen=True)
class Sweep:
    path: str  # the sweep folder, relative
    headers: list[str]
    rows: list[list[str]]  # cells in the headers' order
    outputs: list[str | None]  # each job's run folder, relative to the sweep folder


def experiments(folder: OutputFolder) -> list[Report]:
    base = folder.root / "experiments"
    found = sorted(base.rglob(EXPERIMENT_REPORT), reverse=True) if base.is_dir() else []
    return [_report(folder, path) for path in found if not path.is_symlink()]


def comparisons(folder: OutputFolder) -> list[Report]:
    """Every run's compare reports (compare.md, compare-<probes>.md)."""
    found = [path for run in run_folders(folder) for path in sorted(run.glob("compare*.md"))]
    return [_report(folder, path) for path in found]


def sweeps(folder: OutputFolder) -> list[str]:
    base = folder.root / "sweeps"
    found = sorted(base.rglob(JOBS_FILE), reverse=True) if base.is_dir() else []
    return [folder.relative(path.parent) for path in found if not path.is_symlink()]


def _report(folder: OutputFolder, path: Path) -> Report:
    lines = path.read_text(errors="replace").splitlines()
    title = next((line.lstrip("# ") for line in lines if line.startswith("# ")), path.name)
    answer = next((line.strip("*") for line in lines if line.startswith("**answer:")), "")
    return Report(folder.relative(path), title, answer)


def report_page(folder: OutputFolder, relative: str) -> tuple[Report, Markup]:
    """A report (engine-written Markdown) and its HTML, its charts served by `/files/`."""
    path = folder.engine_file(relative)
    if path.suffix != ".md":
        raise Refused(f"`{relative}` is not a report")
    report = _report(folder, path)
    return report, markdown_html(path.read_text(errors="replace"), report.folder)


def sweep_page(folder: OutputFolder, relative: str) -> Sweep:
    path = folder.engine_file(f"{relative}/{JOBS_FILE}")
    jobs = _jobs(path)
    headers, rows = table_rows(jobs)
    return Sweep(relative, headers, rows, [job.output_dir for job in jobs])


def _jobs(path: Path) -> list[SweepJob]:
    """The sweep's jobs, read without the writers' lock (the UI creates no file)."""
    return parse_jobs(path.read_text(encoding="utf-8", errors="replace").splitlines())


def markdown_html(text: str, folder: str) -> Markup:
    """Markdown the engine wrote as HTML. Raw HTML in it (a model's answer quoted in a table)
    is escaped, never passed through; images name files beside it, served by `/files/`."""
    text = _FRONT_MATTER.sub("", text)
    text = _IMAGE.sub(lambda m: f"![{m[1]}](/files/{quote(folder)}/{m[2]})", text)
    converter = markdown.Markdown(
        extensions=["tables", "fenced_code"],
        extension_configs={"tables": {"use_align_attribute": True}},
    )
    converter.preprocessors.deregister("html_block")
    converter.inlinePatterns.deregister("html")
    return Markup(converter.convert(text))  # noqa: S704 (escaped above: no raw HTML passes)
