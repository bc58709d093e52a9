"""`recipe-engine ui` in Chromium, driven as a user drives it: a run is training; its page
shows the stage graph with the running stage and its step count rising by itself; a click on
the stage shows its curve and plan; the experiment's page shows its answer; the store page its
entries; a sweep's table sorts. Every page: no console error, no failed request, and the
accessibility basics (axe-core's WCAG 2 A/AA rules: labels, names, contrast; and a visible
keyboard focus). `make ui-screenshots` keeps a screenshot of each page for docs/ui.md."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.browser


def step_of(page: Page, stage: str) -> int:
    text = page.locator(f'a.node[data-stage="{stage}"] [data-field="step"]').text_content() or ""
    match = re.match(r"step (\d+)", text)
    return int(match[1]) if match else -1


def test_a_live_run_s_page_updates_by_itself_and_its_stage_shows_curve_and_plan(
    watched, server, live_run, screenshot
):
    page = watched.page
    run = f"{live_run.parent.name}/{live_run.name}"
    page.goto(server + "/")
    expect(page.get_by_role("heading", name="Runs", exact=True)).to_be_visible()
    row = page.locator("tr", has=page.locator(f'a[href$="{run}"]'))
    expect(row.locator(".state")).to_have_text("running")
    screenshot(page, "runs")
    watched.check("runs")

    row.locator("a").first.click()
    node = page.locator('a.node[data-stage="vision"]')
    expect(node).to_have_class(re.compile("state-training"))
    expect(page.locator('a.node[data-stage="llm"]')).to_have_class(re.compile("state-planned"))
    expect(page.locator("svg line.edge")).to_have_count(1)
    first = step_of(page, "vision")
    assert first > 0
    # the page polls: the count rises with no reload (the first value's element stays)
    page.evaluate("() => { document.querySelector('a.node').dataset.seen = 'yes'; }")
    page.wait_for_function(
        "n => parseInt((document.querySelector('a.node[data-stage=vision] [data-field=step]')"
        ".textContent.match(/step (\\d+)/) || [0, -1])[1]) > n",
        arg=first,
        timeout=180_000,
    )
    assert page.evaluate("document.querySelector('a.node').dataset.seen") == "yes"
    screenshot(page, "run")
    watched.check("run")

    node.click()
    expect(page.get_by_role("heading", name="Stage vision")).to_be_visible()
    expect(page.locator('polyline[data-curve="training loss"]')).to_be_visible()
    plan = page.get_by_role("table", name=re.compile("What is frozen, trained"))
    expect(plan).to_contain_text("language_model, embeddings, lm_head")
    expect(page.get_by_role("table", name="The trainer's settings")).to_contain_text("2000")
    screenshot(page, "stage")
    watched.check("stage")


def test_the_experiment_shows_its_answer_and_the_store_its_entries(
    watched, server, workdir, screenshot
):
    page = watched.page
    page.goto(server + "/")
    page.get_by_role("link", name="Comparisons and experiments").click()
    expect(page.get_by_role("heading", name="Experiments", exact=True)).to_be_visible()
    watched.check("reports")
    page.get_by_role("link", name=re.compile("Experiment: r1-llm-only vs r3-two-stage")).click()
    report = next(Path(workdir, "out", "experiments").rglob("experiment.md")).read_text()
    answer = next(line.strip("*") for line in report.splitlines() if line.startswith("**answer"))
    expect(page.locator(".answer-box")).to_have_text(answer)
    expect(page.locator("article table").first).to_contain_text("r3-two-stage")
    page.wait_for_load_state("load")  # the charts too
    images = page.locator("article img")
    assert images.count() >= 1
    for index in range(images.count()):  # every chart loaded (and was not refused)
        assert images.nth(index).evaluate("img => img.complete && img.naturalWidth > 0")
    screenshot(page, "experiment")
    watched.check("experiment")

    page.get_by_role("link", name="Store").click()
    expect(page.get_by_role("heading", name="Store", exact=True)).to_be_visible()
    expect(page.get_by_text(re.compile(r"runs gc would free"))).to_be_visible()
    expect(page.locator("tbody tr")).to_have_count(
        len(list(Path(workdir, "out", "store").glob("*"))) - 1
    )
    screenshot(page, "store")
    watched.check("store")


def test_a_sweep_s_table_sorts_by_a_column(watched, server, screenshot):
    page = watched.page
    page.goto(server + "/reports")
    page.locator('a[href^="/sweep/sweeps/r1-llm-only/"]').click()
    jobs = page.locator("table.sortable tbody tr td:first-child")
    expect(jobs).to_have_text(["0", "1"])
    # live.js is deferred: the sort buttons answer once it has run, by the page's load event
    page.wait_for_load_state("load")
    button = page.get_by_role("button", name="overrides")
    button.focus()
    page.keyboard.press("Enter")  # by keyboard, as by mouse
    expect(page.locator("th", has=button)).to_have_attribute("aria-sort", "ascending")
    expect(jobs).to_have_text(["0", "1"])
    button.click()
    expect(page.locator("th", has=button)).to_have_attribute("aria-sort", "descending")
    expect(jobs).to_have_text(["1", "0"])
    screenshot(page, "sweep")
    watched.check("sweep")
