"""The workbench in Chromium, as a new user meets it, against the real server and real runs
(one story, in order):

1. open the address the server printed (its token), start `r3-two-stage` from the browser:
   plan's output and the command line first, then the run; stop it once its vision stage
   saved a checkpoint, resume it, and watch both stages commit;
2. ask its committed `llm` stage about a picture (uploaded from the browser) and get the answer
   `compare` records for that probe with the same settings; then the same question to the
   stage and its base side by side;
3. start a comparison of two recipes over two seeds from the browser, find its runs grouped by
   recipe and seed, and lay the two seeds' loss curves over each other.

Every page: no console error, no failed request, axe-core's WCAG 2 A/AA rules, a visible
keyboard focus. `make ui-screenshots` keeps each page's screenshot for docs/ui.md."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest
from engine_cli import engine
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.browser
MINUTES = 60_000
# r3 with a vision stage long enough to stop mid-way once it saved a checkpoint.
R3 = (
    "data.max_samples=16 eval.max_samples=4 ++stage.vision.train.max_steps=400 "
    "++stage.vision.train.save_steps=10 ++stage.vision.train.logging_steps=1 "
    "++stage.llm.train.max_steps=2"
)
# Two recipes, two seeds, each step's loss logged.
COMPARED = (
    "data.max_samples=16 eval.max_samples=4 ++stage.vision.train.max_steps=4 "
    "++stage.vision.train.logging_steps=1 ++stage.llm.train.max_steps=4 "
    "++stage.llm.train.logging_steps=1"
)


def wait_for(check, timeout: float):  # noqa: ANN001, ANN201
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"not within {timeout} s")


def base_of(address: str) -> str:
    return address.split("/?", 1)[0]


def finished_r3(out: Path) -> Path:
    runs = sorted(p.parent for p in (out / "runs" / "r3-two-stage").glob("*/summary.json"))
    assert runs, "the first test's r3 run did not finish"
    return runs[-1]


def test_a_new_user_starts_r3_sees_its_plan_stops_and_resumes_it_and_both_stages_commit(
    watched, workbench, screenshot
):
    address, cwd = workbench
    page = watched.page
    page.goto(address)
    expect(page).to_have_url(base_of(address) + "/")  # the token left the address bar
    page.get_by_role("link", name="Start a run").click()
    expect(page.get_by_role("heading", name="Start a run")).to_be_visible()
    watched.check("launch")

    form = page.locator("form.launch").first
    form.get_by_label("Recipe").select_option("r3-two-stage")
    form.get_by_label(re.compile("^Overrides")).fill(R3)
    form.get_by_role("button", name="Plan it").click()
    expect(page.get_by_role("heading", name="The plan")).to_be_visible()
    plan = page.locator('pre[data-plan="r3-two-stage"]')
    for said in ("[1] stage vision", "[2] stage llm  key", "memory:", "n_gpu: 0 per process"):
        expect(plan).to_contain_text(said)
    command = page.locator("pre[data-command]").text_content() or ""
    out = (cwd / "out").resolve()
    assert command == f"python -m recipe_engine recipe=r3-two-stage {R3} output_root={out}"
    screenshot(page, "launch")
    watched.check("plan", reload=False)

    page.get_by_role("button", name="Start it").click()
    expect(page.get_by_role("heading", name=re.compile("^Job "))).to_be_visible()
    expect(page.locator("pre[data-command]")).to_have_text(command)
    # stopped once the vision stage began its second checkpoint (so its first is whole), well
    # before its last step
    wait_for(lambda: list(out.glob("store/*.partial/checkpoints/checkpoint-[2-9]?")), 600)
    page.get_by_role("button", name=re.compile("^Stop it")).click()
    expect(page.locator("[data-job-state]")).to_have_text("stopped", timeout=2 * MINUTES)
    assert not list(out.glob("store/*/COMPLETE"))  # nothing committed
    screenshot(page, "job")
    watched.check("job")

    page.locator("[data-job-runs] a").first.click()
    expect(page.locator("[data-run-state]")).to_have_text("stopped")
    expect(page.locator('a.node[data-stage="vision"]')).to_have_class(re.compile("state-failed"))
    page.get_by_role("button", name=re.compile("^Resume")).click()
    expect(page.get_by_role("heading", name=re.compile("^Job "))).to_be_visible()
    events = page.locator("[data-job-events]")
    expect(events).to_contain_text("stage vision: resuming from", timeout=5 * MINUTES)
    expect(events).to_contain_text(re.compile(r"\.partial/checkpoints/checkpoint-[1-9]\d+"))
    expect(page.locator("[data-job-runs] a")).to_have_count(1, timeout=MINUTES)
    page.locator("[data-job-runs] a").first.click()
    for stage in ("vision", "llm"):
        node = page.locator(f'a.node[data-stage="{stage}"]')
        expect(node).to_have_class(re.compile("state-committed"), timeout=15 * MINUTES)
    expect(page.locator("[data-run-state]")).to_have_text("finished", timeout=5 * MINUTES)
    screenshot(page, "run-resumed")
    watched.check("the resumed run")


def test_the_committed_llm_stage_answers_a_picture_as_compare_records_it_and_beside_its_base(
    watched, workbench, screenshot
):
    address, cwd = workbench
    run_dir = finished_r3(cwd / "out")
    run = run_dir.relative_to(cwd / "out").as_posix()
    # compare's record of the run's probes, every model loaded as the chat loads it, one
    # question at a time as the chat asks it
    done = engine("compare", f"run={run_dir}", "eval.batch_size=1", "output_root=out", cwd=cwd)
    assert done.returncode == 0, done.stderr[-3000:]
    probe = json.loads((run_dir / "compare.jsonl").read_text().splitlines()[0])
    page = watched.page
    page.goto(address)
    page.goto(f"{base_of(address)}/run/{run}/stage/llm")
    expect(page.get_by_role("heading", name="Talk to this stage")).to_be_visible()
    pane = page.locator(".chat-pane")
    page.get_by_role("button", name="Start the chat worker").click()
    expect(pane.locator("[data-chat-state]")).to_have_text("ready", timeout=5 * MINUTES)
    expect(pane.locator("[data-chat-settings]")).to_contain_text("max_new_tokens=8")
    ask(page, probe["input"], probe["image"])
    answer = pane.locator("[data-chat-answer]")
    expect(answer).to_have_attribute("data-done", "yes", timeout=2 * MINUTES)
    expect(answer).to_have_text(probe["outputs"]["llm"])
    screenshot(page, "stage-chat")
    watched.check("a stage's chat")

    page.get_by_role("link", name="Side by side with the base model").click()
    panes = page.locator(".chat-pane")
    expect(panes).to_have_count(2)
    for index in range(2):
        panes.nth(index).get_by_role("button", name="Start the chat worker").click()
    for index in range(2):
        state = panes.nth(index).locator("[data-chat-state]")
        expect(state).to_have_text("ready", timeout=5 * MINUTES)
    ask(page, probe["input"], probe["image"])
    for index, model in enumerate(("base", "llm")):
        answer = panes.nth(index).locator("[data-chat-answer]")
        expect(answer).to_have_attribute("data-done", "yes", timeout=2 * MINUTES)
        expect(answer).to_have_text(probe["outputs"][model])
    screenshot(page, "chat")
    watched.check("side by side")
    for index in range(2):
        panes.nth(index).get_by_role("button", name="Stop it").click()
        expect(panes.nth(index).locator("[data-chat-state]")).to_have_text("stopped")


def ask(page: Page, question: str, picture: str) -> None:
    page.get_by_label("Question").fill(question)
    page.get_by_label(re.compile("^Picture")).set_input_files(picture)
    expect(page.locator("[data-chat-picture]")).to_be_visible()  # previewed before it is sent
    page.get_by_role("button", name="Ask").click()


def test_a_comparison_started_from_the_browser_groups_its_runs_and_overlays_two_seeds(
    watched, workbench, screenshot
):
    address, cwd = workbench
    page = watched.page
    page.goto(address)
    page.get_by_role("link", name="Start a run").click()
    form = page.locator("form.launch").nth(1)
    for recipe in ("r1-llm-only", "r3-two-stage"):
        form.get_by_label(recipe, exact=True).check()
    form.get_by_label(re.compile("^Seeds")).fill("0,1")
    form.get_by_label(re.compile("^Overrides")).fill(COMPARED)
    form.get_by_role("button", name="Plan it").click()
    expect(page.locator('pre[data-plan="r1-llm-only"]')).to_contain_text("[1] stage llm")
    expect(page.locator('pre[data-plan="r3-two-stage"]')).to_contain_text("[2] stage llm")
    command = page.locator("pre[data-command]").text_content() or ""
    assert command.startswith(
        "python -m recipe_engine compare 'recipes=[r1-llm-only,r3-two-stage]' 'seeds=[0,1]' "
    )
    page.get_by_role("button", name="Start it").click()
    expect(page.locator("[data-job-state]")).to_have_text("finished", timeout=20 * MINUTES)
    expect(page.locator("[data-job-runs] a")).to_have_count(4)

    page.get_by_role("link", name="Comparisons and experiments").click()
    page.get_by_role("link", name=re.compile("Experiment: r1-llm-only vs r3-two-stage")).click()
    groups = page.get_by_role("table", name=re.compile("Each recipe's run per seed"))
    expect(groups.locator("thead th")).to_have_text(["recipe", "seed 0", "seed 1"])
    expect(groups.locator("tbody th")).to_have_text(["r1-llm-only", "r3-two-stage"])
    for seed in (0, 1):
        page.get_by_label(f"overlay r3-two-stage seed {seed}").check()
    page.get_by_role("button", name="Overlay the ticked runs' curves").click()
    page.wait_for_load_state("load")
    chart = page.locator('figure[data-chart="stage llm: training loss"]')
    expect(chart.locator("polyline.series")).to_have_count(2)
    expect(chart.locator(".legend li")).to_have_text(["r3-two-stage seed 0", "r3-two-stage seed 1"])
    points = [chart.locator("polyline.series").nth(i).get_attribute("points") for i in (0, 1)]
    assert all(p and p.count(",") == 4 for p in points) and points[0] != points[1]  # 4 steps
    screenshot(page, "experiment-overlay")
    watched.check("the experiment's runs overlaid")
