"""The UI's routes over a real output folder: the engine trains two recipes and compares them
(`compare recipes=[...]`), reruns one from the store, compares that run, exports a stage and
sweeps a setting; Starlette's TestClient then reads every page, and tries what must be
refused: `..`, absolute paths, a symbolic link out of the folder, files the engine did not
write, any method but GET, another Host. Nothing it serves changes a file."""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from engine_cli import SHORT_STAGES, engine
from starlette.testclient import TestClient

from recipe_engine.store.records import RunSummary
from recipe_engine.ui.app import create_app
from recipe_engine.ui.server import LOOPBACK

SHORT = SHORT_STAGES


def ok(*args: str, cwd: Path) -> None:
    done = engine(*args, cwd=cwd, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def out(tmp_path_factory) -> Path:
    """What `make run`'s verbs write, small: an experiment, a rerun from the store and its
    comparison, an export of a stage and a two-job sweep."""
    cwd = tmp_path_factory.mktemp("ui")
    ok("compare", "recipes=[r1-llm-only,r3-two-stage]", *SHORT, cwd=cwd)
    ok("recipe=r3-two-stage", *SHORT, cwd=cwd)
    first, rerun = sorted((cwd / "out" / "runs" / "r3-two-stage").iterdir())
    ok("compare", f"run={rerun}", "output_root=out", "eval.max_samples=4", cwd=cwd)
    ok("export", f"{first}:vision", "output_root=out", cwd=cwd)
    ok("-m", "recipe=r1-llm-only", "eval.max_new_tokens=8,9", *SHORT[:-1], cwd=cwd)
    return cwd / "out"


@pytest.fixture(scope="module")
def client(out) -> Iterator[TestClient]:
    with TestClient(create_app(out, LOOPBACK), base_url="http://127.0.0.1") as client:
        yield client


def r3_runs(out: Path) -> tuple[str, str]:
    first, rerun = sorted((out / "runs" / "r3-two-stage").iterdir())
    return first.relative_to(out).as_posix(), rerun.relative_to(out).as_posix()


def text(html: str) -> str:
    """The page's words, tags removed and spaces collapsed."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


def test_the_runs_page_lists_every_run_with_its_recipe_state_stages_and_score(client, out):
    page = client.get("/")
    assert page.status_code == 200
    first, rerun = r3_runs(out)
    rows = re.findall(r"<tr>(.*?)</tr>", page.text, re.S)
    by_run = {re.search(r'href="/run/([^"]+)"', r)[1]: text(r) for r in rows if "/run/" in r}
    assert len(by_run) == 5  # r1, r3 twice, the sweep's two jobs
    # trained 2, reused 0 / trained 0, reused 2; the final stage's score
    score = RunSummary.load(out / rerun).stages[-1].eval
    assert re.search(rf"r3-two-stage \S+ \S+ finished 2 0 {re.escape(score)}", by_run[first])
    assert re.search(rf"r3-two-stage \S+ \S+ finished 0 2 {re.escape(score)}", by_run[rerun])


def test_a_run_page_draws_its_stage_graph_with_links_and_lineage(client, out):
    first, rerun = r3_runs(out)
    page = client.get(f"/run/{rerun}")
    assert page.status_code == 200
    svg = re.search(r"<svg.*?</svg>", page.text, re.S)[0]
    nodes = re.findall(r'<a href="/run/([^"]+)/stage/(\w+)" class="node state-(\w+)"', svg)
    assert nodes == [(rerun, "vision", "cached"), (rerun, "llm", "cached")]
    assert len(re.findall(r'<line class="edge"', svg)) == 1  # vision -> llm
    # a reused stage names the run that trained it, as a link
    assert page.text.count(f'<a href="/run/{first}">{first}</a>') == 2
    data = client.get(f"/api/run/{rerun}").json()
    assert data["state"] == "finished"
    assert [(s["name"], s["state"]) for s in data["stages"]] == [
        ("vision", "cached"),
        ("llm", "cached"),
    ]


def test_a_stage_page_shows_its_plan_memory_curve_settings_and_export_card(client, out):
    first, _ = r3_runs(out)
    page = client.get(f"/run/{first}/stage/vision")
    assert page.status_code == 200
    words = text(page.text)
    assert "trained vision_tower, projector" in words
    assert "frozen language_model, embeddings, lm_head" in words
    assert re.search(r"estimated peak [\d.]+ GiB measured peak [\d.]+ GiB", words)
    assert "max_steps 2" in words
    assert re.search(
        r'<polyline class="line" data-curve="training loss" points="[\d., ]+"', page.text
    )
    export = next((out / "exports").iterdir())
    assert f"{export.name} (full)" in words
    assert "<h1>r3-two-stage: stage <code>vision</code></h1>" in page.text  # the model card
    llm = text(client.get(f"/run/{first}/stage/llm").text)
    assert "LoRA language_model" in llm and "quantized 4bit" in llm


def test_the_experiment_page_shows_its_table_answer_line_and_charts(client, out):
    listing = client.get("/reports").text
    report = next((out / "experiments").rglob("experiment.md"))
    relative = report.relative_to(out).as_posix()
    answer = next(line for line in report.read_text().splitlines() if line.startswith("**answer"))
    assert f'href="/report/{relative}"' in listing and answer.strip("*") in listing
    page = client.get(f"/report/{relative}")
    assert page.status_code == 200
    assert f'<p class="answer-box" role="note"><strong>{answer.strip("*")}</strong>' in page.text
    assert "<table" in page.text and "r1-llm-only" in page.text
    charts = re.findall(r'<img alt="[\w ]+" src="(/files/[^"]+\.png)"', page.text)
    assert charts, page.text
    for chart in charts:
        answered = client.get(chart)
        assert answered.status_code == 200 and answered.headers["content-type"] == "image/png"


def test_a_run_s_comparison_and_the_sweep_are_listed_and_shown(client, out):
    listing = client.get("/reports").text
    _, rerun = r3_runs(out)
    assert f'href="/report/{rerun}/compare.md"' in listing
    compare = client.get(f"/report/{rerun}/compare.md")
    assert compare.status_code == 200 and "<table" in compare.text
    sweep = next((out / "sweeps").rglob("jobs.jsonl")).parent.relative_to(out).as_posix()
    page = client.get(f"/sweep/{sweep}")
    assert page.status_code == 200
    headers = re.findall(r'<button type="button" data-sort="\d+">([^<]+)</button>', page.text)
    assert headers[:3] == ["job", "overrides", "status"] and "llm eval" in headers
    rows = re.findall(r"<tr><td>(\d+)</td><td>([^<]+)</td>", page.text)
    assert rows == [("0", "eval.max_new_tokens=8"), ("1", "eval.max_new_tokens=9")]


def test_the_store_page_lists_entries_their_users_and_what_gc_would_free(out, tmp_path):
    copy = tmp_path / "out"
    shutil.copytree(out, copy, symlinks=True)
    with TestClient(create_app(copy, LOOPBACK), base_url="http://127.0.0.1") as client:
        words = text(client.get("/store").text)
        assert "runs gc would free 0 B in 0 folder(s)" in words
        # r1's run removed (as `runs rm` would, with the sweep that reused its stage)
        shutil.rmtree(copy / "runs" / "r1-llm-only")
        shutil.rmtree(copy / "sweeps")
        page = client.get("/store").text
    rows = [text(row) for row in re.findall(r"<tr>(.*?)</tr>", page, re.S)]
    freed = [row for row in rows if row.strip().endswith("would free")]
    assert len(freed) == 1 and " llm r1-llm-only " in freed[0]
    assert re.search(r"runs gc would free [\d.]+ [KM]B in 1 folder\(s\)", text(page))
    first, rerun = r3_runs(copy)
    vision = next(row for row in rows if " vision r3-two-stage " in row)
    assert first in vision and rerun in vision and vision.strip().endswith("kept")


# --- what is refused -------------------------------------------------------------------------


def snapshot(root: Path) -> dict[str, tuple[int, float]]:
    return {
        str(p): (p.lstat().st_size, p.lstat().st_mtime)
        for p in root.rglob("*")
        if "locks" not in p.parts
    }


def test_paths_that_leave_the_folder_or_were_not_written_by_the_engine_are_refused(out, tmp_path):
    copy = tmp_path / "out"
    shutil.copytree(out, copy, symlinks=True)
    first, _ = r3_runs(copy)
    secret = tmp_path / "secret.png"
    secret.write_bytes(b"\x89PNG not yours")
    (copy / first / "loss-link.png").symlink_to(secret)
    (copy / "runs" / "linked").symlink_to(tmp_path)
    (copy / first / "notes.txt").write_text("the user's own notes")
    mine = copy / "runs" / "mine" / "2026-01-01_00-00-00"
    mine.mkdir(parents=True)
    (mine / "summary.json").write_text('{"recipe": "x", "stages": []}')
    (mine / "loss.png").write_bytes(b"\x89PNG")
    store = next(p for p in (copy / "store").iterdir() if (p / "manifest.json").is_file())
    refused = [
        "/files/runs/%2E%2E/%2E%2E/secret.png",  # `..`
        f"/files/{first}/%2E%2E/%2E%2E/%2E%2E/secret.png",
        f"/files/{secret}",  # absolute
        "/files/%2Fetc%2Fpasswd",
        f"/files/{first}/loss-link.png",  # a symbolic link out of the folder
        "/files/runs/linked/secret.png",
        "/run/runs/linked",
        f"/files/{first}/notes.txt",  # a file the engine does not write
        f"/files/{first}/.hydra/config.yaml",
        f"/files/store/{store.name}/model.safetensors",
        "/files/runs/mine/2026-01-01_00-00-00/loss.png",  # a folder the engine did not mark
        "/run/runs/mine/2026-01-01_00-00-00",
        "/files/store/locks",
        "/report/runs/mine/2026-01-01_00-00-00/loss.png",
        f"/run/{first}/stage/nosuchstage",
    ]
    with TestClient(create_app(copy, LOOPBACK), base_url="http://127.0.0.1") as client:
        for url in refused:
            answered = client.get(url)
            assert answered.status_code == 404, url
            assert b"PNG" not in answered.content and "the user's own" not in answered.text, url
        assert client.get(f"/files/{first}/loss.png").status_code == 200  # the engine's own
        assert "runs/mine" not in client.get("/").text  # not listed either


def test_no_method_but_get_is_answered_and_nothing_changes_on_disk(client, out):
    first, _ = r3_runs(out)
    before = snapshot(out)
    urls = ["/", f"/run/{first}", f"/run/{first}/stage/vision", f"/api/run/{first}", "/store"]
    urls += ["/reports", f"/files/{first}/loss.png", "/static/ui.css"]
    for url in urls:
        assert client.get(url).status_code == 200, url
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            assert client.request(method, url).status_code == 405, (method, url)
    assert snapshot(out) == before


def test_only_the_loopback_names_are_answered_and_pages_run_only_shipped_scripts(client):
    assert client.get("/", headers={"host": "attacker.example"}).status_code == 400
    page = client.get("/")
    policy = page.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "default-src 'none'" in policy
    assert re.findall(r'<script src="([^"]+)"', page.text) == ["/static/live.js"]
    assert not re.search(r'(src|href)="(https?:)?//', page.text)  # nothing from elsewhere
    assert client.get("/static/live.js").status_code == 200


# --- comparing runs: an experiment's runs by recipe and seed, curves laid over each other ----


def test_the_experiment_groups_its_runs_by_recipe_and_seed_and_overlays_the_ticked(client, out):
    report = next((out / "experiments").rglob("experiment.md")).relative_to(out).as_posix()
    page = client.get(f"/report/{report}").text
    groups = re.search(r'<table class="grid groups">.*?</table>', page, re.S)[0]
    rows = dict(re.findall(r'<tr data-recipe="([\w-]+)">(.*?)</tr>', groups, re.S))
    assert set(rows) == {"r1-llm-only", "r3-two-stage"}
    runs = {recipe: re.search(r'href="/run/([^"]+)"', row)[1] for recipe, row in rows.items()}
    assert runs["r3-two-stage"].startswith("runs/r3-two-stage/")
    assert "seed 42" in groups  # the config's seed: one column
    ticked = client.get(f"/report/{report}", params={"run": list(runs.values())}).text
    charts = re.findall(
        r'<figure class="curve overlay" data-chart="([^"]+)">(.*?)</figure>', ticked, re.S
    )
    by_title = dict(charts)
    llm = by_title["stage llm: training loss"]  # both recipes train `llm`: one chart, two lines
    lines = re.findall(r'<polyline class="series" data-run="([^"]+)"', llm)
    assert sorted(lines) == sorted(runs.values())
    assert "r1-llm-only seed 42" in llm and "r3-two-stage seed 42" in llm  # the legend
    vision = re.findall(r'data-run="([^"]+)"', by_title["stage vision: training loss"])
    assert vision == [runs["r3-two-stage"]]  # only r3 has a vision stage
    # a run that is not one of the experiment's is not drawn, nor one outside output_root
    first, rerun = r3_runs(out)
    other = client.get(f"/report/{report}", params={"run": [rerun, "../../etc"]}).text
    assert "<figure" not in other


def test_a_sweep_s_jobs_and_any_runs_overlay_on_shared_charts(client, out):
    sweep = next((out / "sweeps").rglob("jobs.jsonl")).parent.relative_to(out).as_posix()
    page = client.get(f"/sweep/{sweep}").text
    offered = re.findall(r'<input type="checkbox" name="run" value="([^"]+)"', page)
    assert len(offered) == 2
    ticked = client.get(f"/sweep/{sweep}", params={"run": offered}).text
    charts = re.findall(r'<figure class="curve overlay".*?</figure>', ticked, re.S)
    assert charts and all(
        re.findall(r"</svg> (job \d)</li>", c) == ["job 0", "job 1"] for c in charts
    )
    first, rerun = r3_runs(out)
    chosen = client.get("/overlay", params={"run": [first, offered[0]]}).text
    titles = set(re.findall(r'data-chart="([^"]+)"', chosen))
    assert {"stage vision: training loss", "stage llm: training loss"} <= titles
    assert re.search(
        rf'<input type="checkbox" name="run" value="{first}" id="[\w-]+" checked>', chosen
    )
    assert client.get("/overlay", params={"run": [first] * 2}).status_code == 200
