"""The browser tests' machinery: Debian's chromium driven by Playwright, a real engine run in
progress, and `recipe-engine ui` serving its output folder, each started as a user starts them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from axe_playwright_python.sync_playwright import Axe
from engine_cli import SHORT_STAGES, free_port, start_engine, start_group, stop_group
from playwright.sync_api import Page, sync_playwright

WCAG = {"runOnly": {"type": "tag", "values": ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa"]}}
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


@pytest.fixture(scope="session")
def workbench(tmp_path_factory) -> Iterator[tuple[str, Path]]:
    """`recipe-engine ui` over an empty output folder, as a new user starts it: yields the
    address it printed (with its token) and the folder it started in. Runs it starts train on
    one thread each (the machine's two cores are shared with the test's browser)."""
    cwd = tmp_path_factory.mktemp("workbench")
    (cwd / "out" / "runs").mkdir(parents=True)
    port = free_port()
    command = [sys.executable, "-m", "recipe_engine", "ui", "output_root=out", f"ui.port={port}"]
    ui = start_group(command, cwd, log=cwd / "ui.log", OMP_NUM_THREADS="1")
    try:
        deadline = time.time() + 300
        while "serving" not in (cwd / "ui.log").read_text():
            assert ui.poll() is None and time.time() < deadline, (cwd / "ui.log").read_text()
            time.sleep(0.2)
        line = next(x for x in (cwd / "ui.log").read_text().splitlines() if "serving" in x)
        address = re.search(r"at (http://127\.0\.0\.1:\d+/\?token=[\w-]+) ", line)
        assert address, line
        yield address[1], cwd
    finally:
        stop_group(ui)


@pytest.fixture
def screenshot(request) -> Iterator:
    """`screenshot(page, name)`: the page as docs/ui/<name>.png, under `make ui-screenshots`."""

    def take(page, name: str) -> None:  # noqa: ANN001 (a Playwright page)
        if SCREENSHOTS:
            # its styles and pictures too: a locator can find the page's text before them
            page.wait_for_load_state("load")
            Path(SCREENSHOTS).mkdir(parents=True, exist_ok=True)
            page.screenshot(path=str(Path(SCREENSHOTS) / f"{name}.png"), full_page=True)

    yield take


class Watched:
    """A page with its console errors and failed requests collected."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.problems: list[str] = []
        # Events in order: when the page last committed a document, when it last asked for
        # another, and for each request the document it belongs to.
        self.events = 0
        self.committed = 0
        self.leaving = 0
        self.asked_from: dict[object, int] = {}
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.problems.append(f"page error: {error}"))
        page.on("framenavigated", self._committed)
        page.on("request", self._asked)
        page.on("requestfailed", self._failed)
        page.on("response", self._response)

    def _tick(self) -> int:
        self.events += 1
        return self.events

    def _committed(self, frame) -> None:  # noqa: ANN001
        if frame == self.page.main_frame:
            self.committed = self._tick()

    def _asked(self, request) -> None:  # noqa: ANN001
        if request.is_navigation_request() and request.frame == self.page.main_frame:
            self.leaving = self._tick()  # a link followed, a reload: the page is being left
        self.asked_from[request] = self.committed

    def _failed(self, request) -> None:  # noqa: ANN001
        # The browser cancels what a document still loads when the page asks for another (the
        # test navigates away, or a live page reloads itself as its run's state changes): its
        # icon, fetched after the load event. The page did not fail, it was left.
        left = self.leaving > self.asked_from.pop(request, self.committed)
        if not (left and request.failure == "net::ERR_ABORTED"):
            self.problems.append(f"failed: {request.url} {request.failure}")

    def _console(self, message) -> None:  # noqa: ANN001
        if message.type == "error":
            self.problems.append(f"console: {message.text}")

    def _response(self, response) -> None:  # noqa: ANN001
        if response.status >= 400:
            self.problems.append(f"{response.status}: {response.url}")

    def check(self, name: str, reload: bool = True) -> None:
        """No problem so far, and the page passes the accessibility checks (`reload=False`: a
        page a form posted, checked as loaded, not posted again)."""
        assert not self.problems, f"{name}: {self.problems}"
        results = Axe().run(self.page, options=WCAG)
        violations = [
            f"{v['id']}: {v['help']} ({len(v['nodes'])} nodes: {v['nodes'][0]['target']})"
            for v in results.response["violations"]
        ]
        assert not violations, f"{name}: {violations}"
        _keyboard_focus_is_visible(self.page, name, reload)


def _keyboard_focus_is_visible(page: Page, name: str, reload: bool = True) -> None:
    """Tab reaches the skip link first, then the links, each drawn with a focus outline."""
    if reload:
        page.reload()  # focus starts at the top of the page, as when it was opened
    page.keyboard.press("Tab")
    focused = page.evaluate("document.activeElement.textContent.trim()")
    assert focused == "Skip to content", f"{name}: the first Tab reaches {focused!r}"
    for _ in range(3):
        page.keyboard.press("Tab")
        outline = page.evaluate("getComputedStyle(document.activeElement).outlineStyle")
        assert outline not in ("none", ""), f"{name}: no visible focus on the focused element"


@pytest.fixture(scope="module")
def browser(chromium) -> Iterator:
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture
def watched(browser) -> Iterator[Watched]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    yield Watched(context.new_page())
    context.close()
