"""The browser tests' machinery: Debian's chromium driven by Playwright, a real engine run in
progress, and `recipe-engine ui` serving its output folder, each started as a user starts them."""

from __future__ import annotations

import os
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from engine_cli import SHORT_STAGES, free_port, start_engine, stop_group

CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
# `make ui-screenshots` sets it: each page's screenshot goes there (docs/ui/).
SCREENSHOTS = os.environ.get("UI_SCREENSHOTS")
# The live run: a vision stage long enough to watch, each step logged (other keys than SHORT's).
LIVE = (
    "recipe=r3-two-stage",
    "output_root=out",
    "data.max_samples=16",
    "eval.max_samples=4",
    "++stage.vision.train.max_steps=2000",
    "++stage.vision.train.logging_steps=1",
    "++stage.llm.train.max_steps=2",
)


@pytest.fixture(scope="session")
def chromium() -> str:
    if not Path(CHROMIUM).is_file():
        pytest.fail(f"no chromium at {CHROMIUM}: `make test-browser` installs Debian's package")
    return CHROMIUM


@pytest.fixture(scope="session")
def workdir(tmp_path_factory) -> Path:
    """An experiment already written (`compare recipes=[...]`), as `make run` leaves one, and
    a two-job sweep reusing its r1 stage."""
    cwd = tmp_path_factory.mktemp("browser")
    sweep = ("-m", "recipe=r1-llm-only", "eval.max_new_tokens=8,9", *SHORT_STAGES[:-1])
    for args in (("compare", "recipes=[r1-llm-only,r3-two-stage]", *SHORT_STAGES), sweep):
        done = start_engine(*args, cwd=cwd)
        output, _ = done.communicate(timeout=1800)
        assert done.returncode == 0, output[-3000:]
    return cwd


@pytest.fixture(scope="session")
def live_run(workdir) -> Iterator[Path]:
    """A real r3-two-stage run training its vision stage while the tests look at it; yields
    its run folder once the stage has logged its first steps."""
    run = start_engine(*LIVE, cwd=workdir)
    try:
        yield _run_folder_once_training(workdir / "out", run)
    finally:
        stop_group(run)


def _run_folder_once_training(out: Path, run: subprocess.Popen) -> Path:
    known = set((out / "runs" / "r3-two-stage").iterdir())
    deadline = time.time() + 900
    while time.time() < deadline:
        assert run.poll() is None, (run.stdout.read() if run.stdout else "")[-3000:]
        new = set((out / "runs" / "r3-two-stage").iterdir()) - known
        partial = [p for p in (out / "store").glob("*.partial") if (p / "metrics.jsonl").is_file()]
        if new and partial and (partial[0] / "metrics.jsonl").read_text().count("\n") >= 2:
            return new.pop()
        time.sleep(1)
    raise AssertionError("the live run logged no step in 15 minutes")


@pytest.fixture(scope="session")
def server(workdir) -> Iterator[str]:
    """`recipe-engine ui` over the output folder; yields its address."""
    port = free_port()
    ui = start_engine("ui", "output_root=out", f"ui.port={port}", cwd=workdir)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(300):
            try:
                with urllib.request.urlopen(url + "/", timeout=5):
                    break
            except OSError:
                assert ui.poll() is None, (ui.stdout.read() if ui.stdout else "")[-3000:]
                time.sleep(0.5)
        yield url
    finally:
        stop_group(ui)


@pytest.fixture
def screenshot(request) -> Iterator:
    """`screenshot(page, name)`: the page as docs/ui/<name>.png, under `make ui-screenshots`."""

    def take(page, name: str) -> None:  # noqa: ANN001 (a Playwright page)
        if SCREENSHOTS:
            Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(Path(SCREENSHOTS) / f"{name}.png"), full_page=True)

    yield take
