"""docs/experiments.md's study table, rewritten from the newest experiment (`make study-table`).

`make study-table` runs `make run` (the four recipes over three seeds, or what is in the store)
and then this module: it reads the newest `outputs/experiments/*/*/experiment.csv` (one row per
recipe and seed for its final stage, one per seed for the base: report/experiment_report.py)
and the answer line of the `experiment.md` beside it, and replaces what lies between
`<!-- study-table:start -->` and `<!-- study-table:end -->` in docs/experiments.md with the
table, the answer line and where it was measured: the date, this checkout's commit and this
machine (CPU model, torch's CPU capability and threads, the libraries' versions). So the figures
in the guide are regenerated, never copied by hand. Nothing outside the markers changes.

Exit codes: 0 rewritten, 2 no experiment folder, no markers or an unreadable table (one line,
`error: ...`).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import importlib.metadata
import re
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from recipe_engine.errors import RecipeError
from recipe_engine.files import atomic_write_text
from recipe_engine.run.machine import cpu_model

START, END = "<!-- study-table:start -->", "<!-- study-table:end -->"
BASE = "base"  # the base's rows in experiment.csv (report.experiment.BASE)
LIBRARIES = ("torch", "transformers", "trl", "peft", "bitsandbytes")
ROOT = Path(__file__).resolve().parents[1]  # the checkout (for the commit)
TIME_FOLDER = re.compile(r"^(\d{4}-\d{2}-\d{2})_")  # the report folder's name: 2026-11-23_22-12-17


def newest_experiment(outputs: Path) -> Path:
    """The newest `experiments/*/*/experiment.csv` under `outputs`, by its time folder's name
    (then its modification time)."""
    found = list(outputs.glob("experiments/*/*/experiment.csv"))
    if not found:
        raise RecipeError(
            f"no experiment under {outputs / 'experiments'} (no */*/experiment.csv): "
            "`make run` writes one (`make study-table` runs it first)"
        )
    return max(found, key=lambda path: (path.parent.name, path.stat().st_mtime))


def read_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    wanted = {"recipe", "seed", "model", "exact_match", "base_precision"}
    if not rows or not wanted <= set(rows[0]):
        raise RecipeError(f"{path}: no rows with the columns {', '.join(sorted(wanted))}")
    return rows


def table_lines(rows: Sequence[dict[str, str]]) -> list[str]:
    """The base's row (untrained), then one per recipe in the CSV's order: its final stage and
    held-out exact match over its seeds, labelled `(4-bit base)` where measured on one."""
    recipes = list(dict.fromkeys(row["recipe"] for row in rows if row["recipe"] != BASE))
    seeds = sorted({int(row["seed"]) for row in rows})
    header = f"held-out exact match, mean [min..max] over seeds {', '.join(map(str, seeds))}"
    lines = [f"| recipe | final stage | {header} |", "| --- | --- | --- |"]
    base = [row for row in rows if row["recipe"] == BASE]
    if base:
        lines.append(f"| base (untrained) | - | {_cell(base)} |")
    for recipe in recipes:
        own = [row for row in rows if row["recipe"] == recipe]
        lines.append(f"| {recipe} | {own[0]['model']} | {_cell(own)} |")
    return lines


def _cell(rows: Sequence[dict[str, str]]) -> str:
    """ "92% [92..94%] (4-bit base)" as the experiment's table writes it (report.experiment)."""
    values = [float(row["exact_match"]) for row in rows if row["exact_match"]]
    if not values or len(values) < len(rows):
        return "-"  # a seed without the metric: no fair mean
    mean, low, high = sum(values) / len(values), min(values), max(values)
    text = f"{mean:.0%}"
    if low != high:
        text += f" [{low * 100:.0f}..{high:.0%}]"
    precisions = list(dict.fromkeys(row["base_precision"] for row in rows if row["base_precision"]))
    precision = "/".join(precisions)
    return text + (f" ({precision} base)" if precision not in ("", "full") else "")


def answer_line(folder: Path) -> str | None:
    """The exact-match verdict of `experiment.md` beside the CSV (`**answer: ...**`)."""
    report = folder / "experiment.md"
    if not report.is_file():
        return None
    for line in report.read_text(encoding="utf-8").splitlines():
        text = line.strip().strip("*").strip()
        if text.startswith("answer: "):
            return text
    return None


def measured_date(folder: Path) -> str:
    """The day the experiment ran: its time folder's name, else the CSV's modification day."""
    named = TIME_FOLDER.match(folder.name)
    if named:
        return named[1]
    stamp = (folder / "experiment.csv").stat().st_mtime
    return datetime.date.fromtimestamp(stamp).isoformat()


def commit(root: Path = ROOT, *, page: Path | None = None) -> str:
    """This checkout's short commit, `+ changes` where tracked files other than `page` (the one
    this tool rewrites) differ from it."""
    try:
        head = _git(root, "rev-parse", "--short", "HEAD").strip()
        status = _git(root, "status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return "unknown (not a git checkout)"
    skip = page.resolve() if page is not None else None
    changed = [line for line in status.splitlines() if (root / line[3:]).resolve() != skip]
    return head + (" + changes" if changed else "")


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, check=True)
    return done.stdout


def platform_here() -> str:
    """This machine as the study's figures depend on it: "AMD EPYC 7B13 (torch CPU capability
    AVX2, 2 threads), torch 2.14.1, transformers 5.23.0, ..."."""
    import torch

    capability = torch.backends.cpu.get_cpu_capability()
    count = torch.get_num_threads()
    versions = [f"{name} {_version(name)}" for name in LIBRARIES]
    threads = f"{count} thread" + ("" if count == 1 else "s")
    where = f"{cpu_model()} (torch CPU capability {capability}, {threads})"
    return ", ".join([where, *versions])


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def study_block(csv_path: Path, *, commit_text: str, platform: str) -> list[str]:
    """The lines between the markers."""
    folder = csv_path.parent
    answer = answer_line(folder)
    where = f"`{folder.parent.parent.name}/{folder.parent.name}/{folder.name}/`"
    return [
        *table_lines(read_rows(csv_path)),
        "",
        *(["```", answer, "```", ""] if answer else []),
        f"measured {measured_date(folder)} at commit {commit_text} on {platform} "
        f"(`make study-table`, from {where})",
    ]


def replace_block(page_text: str, block: Sequence[str], page: Path) -> str:
    """`page_text` with the lines between the markers replaced by `block`."""
    start, end = page_text.find(START), page_text.find(END)
    if start < 0 or end < start:
        raise RecipeError(f"{page}: no {START} ... {END} markers around the study table")
    head = page_text[: start + len(START)]
    return head + "\n" + "\n".join(block) + "\n" + page_text[end:]


def rewrite(
    page: Path,
    outputs: Path,
    *,
    commit_text: str | None = None,
    platform: str | None = None,
) -> Path:
    """Rewrites the study table in `page` from the newest experiment under `outputs`; returns
    the experiment.csv it read. `commit_text` / `platform`: this checkout's and machine's by
    default."""
    csv_path = newest_experiment(outputs)
    if not page.is_file():
        raise RecipeError(f"{page}: no such page")
    block = study_block(
        csv_path,
        commit_text=commit(page=page) if commit_text is None else commit_text,
        platform=platform_here() if platform is None else platform,
    )
    atomic_write_text(page, replace_block(page.read_text(encoding="utf-8"), block, page))
    return csv_path


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.study_table")
    parser.add_argument("--outputs", type=Path, default=Path("outputs"), help="output root")
    parser.add_argument("--page", type=Path, default=Path("docs/experiments.md"))
    options = parser.parse_args(argv)
    try:
        csv_path = rewrite(options.page, options.outputs)
    except RecipeError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(f"{options.page}: study table rewritten from {csv_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
