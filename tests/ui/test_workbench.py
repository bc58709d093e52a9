"""The workbench's routes through Starlette's TestClient, against real engine processes: a run
planned, started, stopped (Ctrl-C to its process group), started again and finished, its
command line as a terminal takes it; a chat worker on its committed stage answering the run's
probe as the run's comparison records it, streamed. And every refusal: no token, a wrong one,
another site's page, paths outside output_root, overrides that write elsewhere or run code
from elsewhere, an upload too large or not a picture; each refused with its reason, nothing
started, nothing written."""

from __future__ import annotations

import html
import io
import json
import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image
from starlette.testclient import TestClient

from recipe_engine.ui.app import create_app
from recipe_engine.ui.override_rules import Rules, Unsafe, check_overrides
from recipe_engine.ui.server import LOOPBACK
from recipe_engine.ui.workbench import Settings

TOKEN = "the-servers-token"
SHORT = "data.max_samples=16 eval.max_samples=4 ++stage.llm.train.max_steps=2"
UPLOAD_LIMIT = 4096
PICTURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def cwd(tmp_path_factory) -> Path:
    cwd = tmp_path_factory.mktemp("workbench")
    (cwd / "out" / "runs").mkdir(parents=True)
    (cwd / "my_rewards.py").write_text(
        "def fn(completions, **_):\n    return [0.0] * len(completions)\n"
    )
    return cwd


@pytest.fixture(scope="module")
def client(cwd) -> Iterator[TestClient]:
    """The view over `out`, started in `cwd`, this browser holding its token."""
    settings = Settings(cwd, python=sys.executable, max_upload_bytes=UPLOAD_LIMIT)
    app = create_app(cwd / "out", LOOPBACK, TOKEN, settings)
    with TestClient(app, base_url="http://127.0.0.1:8765") as client:
        assert client.get(f"/?token={TOKEN}").status_code == 200  # the printed address
        yield client


def form(**fields: str | list[str]) -> dict:
    return {"token": TOKEN, "verb": "run", "recipe": "text-lora", **fields}


def snapshot(root: Path) -> dict[str, float]:
    return {str(p): p.stat().st_mtime for p in root.rglob("*")}


def wait_for(check, timeout: float = 300, every: float = 0.3):  # noqa: ANN001, ANN201
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = check()
        if found:
            return found
        time.sleep(every)
    raise AssertionError(f"not within {timeout} s")


def job_state(client: TestClient, job: str) -> dict:
    return client.get(f"/api/job/{job}").json()


def test_the_printed_address_keeps_the_token_in_a_cookie_and_forms_carry_it(cwd):
    app = create_app(cwd / "out", LOOPBACK, TOKEN, Settings(cwd, python=sys.executable))
    with TestClient(app, base_url="http://127.0.0.1:8765") as browser:
        assert 'name="token"' not in browser.get("/launch").text  # read-only without it
        opened = browser.get(f"/launch?token={TOKEN}", follow_redirects=False)
        assert opened.status_code == 303 and opened.headers["location"] == "/launch"
        cookie = opened.headers["set-cookie"]
        assert "HttpOnly" in cookie and "SameSite=strict" in cookie and TOKEN in cookie
        assert f'name="token" value="{TOKEN}"' in browser.get("/launch").text
        assert browser.get("/?token=guessed").status_code == 403


def test_a_run_is_planned_started_stopped_started_again_and_talked_to(client, cwd):
    overrides = f"{SHORT} ++stage.llm.train.save_steps=1"
    planned = client.post("/launch/plan", data=form(overrides=overrides))
    assert planned.status_code == 200, planned.text
    assert "[1] stage llm" in planned.text and "memory:" in planned.text  # plan's own output
    command = re.search(r"<pre class=\"command\" data-command>(.*?)</pre>", planned.text)[1]
    root = (cwd / "out").resolve()
    assert command == (
        "python -m recipe_engine recipe=text-lora data.max_samples=16 eval.max_samples=4 "
        f"++stage.llm.train.max_steps=2 ++stage.llm.train.save_steps=1 output_root={root}"
    )
    assert 'action="/launch/start"' in planned.text
    started = client.post("/launch/start", data=form(overrides=overrides), follow_redirects=False)
    assert started.status_code == 303
    job = started.headers["location"].removeprefix("/job/")
    # stopped as soon as Hydra made its run folder (Ctrl-C to its process group)
    run = wait_for(lambda: job_state(client, job)["runs"])[0]
    stopped = client.post(f"/job/{job}/stop", data={"token": TOKEN}, follow_redirects=False)
    assert stopped.status_code == 303
    assert wait_for(lambda: job_state(client, job)["state"] == "stopped")
    assert job_state(client, job)["returncode"] != 0
    page = client.get(f"/run/{run}").text
    assert "data-run-state>stopped<" in page and "Resume" in page  # at once, not after 5 min
    # the same command again: it finishes, and the run page says so
    again = client.post(f"/job/{job}/again", data={"token": TOKEN}, follow_redirects=False)
    second = again.headers["location"].removeprefix("/job/")
    assert second != job
    assert wait_for(lambda: job_state(client, second)["state"] in ("finished", "failed"))
    done = job_state(client, second)
    assert done["state"] == "finished", done["output"][-3000:]
    (finished,) = done["runs"]
    assert f"<code>{command}</code>" in client.get("/launch").text
    assert client.get(f"/api/run/{finished}").json()["state"] == "finished"
    # talk to its committed stage: the probe's answer is the run's comparison's
    probe = json.loads((cwd / "out" / finished / "compare.jsonl").read_text().splitlines()[0])
    target = {"run": finished, "model": "llm"}
    headers = {"X-Recipe-Engine-Token": TOKEN}
    assert client.post("/api/chat/start", json=target, headers=headers).json()["state"] in (
        "loading",
        "ready",
    )
    asked = client.post("/api/chat/ask", json={**target, "prompt": probe["input"]}, headers=headers)
    assert asked.headers["content-type"].startswith("text/event-stream")
    events = [json.loads(line[6:]) for line in asked.text.splitlines() if line.startswith("data: ")]
    assert events[-1] == {"answer": probe["outputs"]["llm"]}, events
    assert "".join(e.get("text", "") for e in events).strip() == probe["outputs"]["llm"]
    state = client.get("/api/chat/state", params=target).json()
    assert state["state"] == "ready" and "max_new_tokens=" in state["generation"]
    assert client.post("/api/chat/stop", json=target, headers=headers).json()["state"] == "stopped"
    # of a finished run, a model is one of its stages or its base, a picture one uploaded here
    before = snapshot(cwd / "out")
    for model in ("../llm", "llm jsonl=false", "nothing"):
        target = {"run": finished, "model": model}
        assert client.post("/api/chat/start", json=target, headers=headers).status_code == 404
    for image in ("../../../etc/passwd", "0123456789abcdef0123.png", "/etc/hostname"):
        ask = {"run": finished, "model": "llm", "prompt": "hi", "image": image}
        assert client.post("/api/chat/ask", json=ask, headers=headers).status_code == 404
    assert snapshot(cwd / "out") == before


REFUSED_OVERRIDES = {
    "hydra.run.dir=/tmp/elsewhere": "Hydra's own settings",
    "hydra/launcher=submitit_local": "Hydra's own settings",
    "output_root=/tmp/elsewhere": "every run the view starts writes to",
    "~output_root": "every run the view starts writes to",
    "++stage.llm.train.output_dir=/tmp/x": "`output_dir` names a folder the run writes to",
    "'++stage.llm.train={logging_dir: /tmp/x}'": "`logging_dir` names a folder",
    "++stage.llm.train.push_to_hub=true": "uploads the model to the hub",
    "++stage.llm.train.report_to=[wandb]": "trackers other than tensorboard",
    "model.trust_remote_code=true": "runs code from the model's files",
    "'model={allow_pickle: true}'": "runs code from the model's files",
    "'++stage.llm.rewards=[{fn: /tmp/evil.py:fn}]'": "is code outside",
    "'++stage.llm.rewards=[{fn: os:system}]'": "is not a module in",
    "'++stage.llm.rewards=[{name: my_plugin}]'": "is not one the engine ships",
    "stage.llm.trainer=my_plugin_kind": "is not a kind the engine ships",
    "launcher=my_plugin_launcher": "is not one the engine ships",
    "slurm.setup=[rm,-rf,/]": "shell lines",
    "data.path=${oc.env:HOME}/x.jsonl": "an interpolation",
    "seed=1,2": "is a sweep",
    "--config-dir /tmp": "is a command-line flag",
    "'unclosed": "do not split into words",
}


def test_overrides_that_write_elsewhere_or_run_code_from_elsewhere_are_refused(client, cwd):
    before, jobs = snapshot(cwd), client.get("/launch").text.count("/job/")
    for override, reason in REFUSED_OVERRIDES.items():
        for route in ("/launch/plan", "/launch/start"):
            answered = client.post(route, data=form(overrides=f"{SHORT} {override}"))
            assert answered.status_code == 400, (route, override)
            assert reason in html.unescape(answered.text), (route, override)
    compare = form(verb="compare", recipes=["text-lora", "r1-llm-only"], overrides="output_root=x")
    assert client.post("/launch/start", data=compare).status_code == 400
    assert client.post("/launch/start", data=form(recipe="not-shipped")).status_code == 400
    assert snapshot(cwd) == before and client.get("/launch").text.count("/job/") == jobs
    # what the rules let through: a reward file in the server's folder, its own trackers
    rules = Rules((cwd / "out").resolve(), cwd.resolve())
    check_overrides(["++stage.llm.rewards=[{fn: my_rewards.py:fn}]"], rules)
    check_overrides(["++stage.llm.rewards=[{fn: my_rewards:fn}, {name: exact_match}]"], rules)
    check_overrides(["++stage.llm.train.report_to=[tensorboard]", "data.path=data.jsonl"], rules)
    with pytest.raises(Unsafe, match="is code outside"):
        check_overrides([f"++stage.llm.rewards=[{{fn: {cwd}/../x.py:fn}}]"], rules)


def test_no_token_a_wrong_one_or_another_site_s_page_changes_nothing(client, cwd):
    before = snapshot(cwd)
    start, run = "/launch/start", {"run": "runs/x/y", "model": "llm"}
    token, evil = {"X-Recipe-Engine-Token": TOKEN}, {"Origin": "http://evil.example"}
    asked = [
        (start, {"data": form(token="")}, "no token"),
        (start, {"data": {k: v for k, v in form().items() if k != "token"}}, "no token"),
        (start, {"data": form(token="guessed")}, "wrong token"),
        (start, {"data": form(), "headers": evil}, "another site's page"),
        (start, {"data": form(), "headers": {"Sec-Fetch-Site": "cross-site"}}, "cross-site"),
        ("/api/chat/start", {"json": run}, "no token"),
        ("/api/chat/start", {"json": run, "headers": {**token, **evil}}, "another site's page"),
        ("/api/chat/ask", {"json": run, "headers": {"X-Recipe-Engine-Token": "x"}}, "wrong token"),
        ("/api/upload", {"content": PICTURE, "headers": {**token, "Origin": "null"}}, "another"),
        ("/api/upload", {"content": PICTURE}, "no token"),
        ("/job/2026-01-01_00-00-00-abcd/stop", {"data": {}}, "no token"),
    ]
    for url, kwargs, reason in asked:
        answered = client.post(url, **kwargs)
        assert answered.status_code == 403, (url, kwargs)
        assert reason in html.unescape(answered.text), (url, answered.text)
    assert snapshot(cwd) == before


def test_paths_outside_output_root_and_oversized_or_false_pictures_are_refused(client, cwd):
    before = snapshot(cwd)
    headers = {"X-Recipe-Engine-Token": TOKEN}
    for run in ("../..", "/etc", "runs/../../x", str(cwd / "out" / "runs")):
        answered = client.post(
            "/api/chat/start", json={"run": run, "model": "llm"}, headers=headers
        )
        assert answered.status_code == 404, run
        assert client.get("/launch", params={"rerun": run, "stage": "llm"}).status_code == 404
    too_large = b"\x89PNG\r\n\x1a\n" + b"\0" * UPLOAD_LIMIT
    answered = client.post("/api/upload", content=too_large, headers=headers)
    assert answered.status_code == 413 and "larger than 4096 bytes" in answered.json()["refused"]
    in_parts = iter([too_large[:3000], too_large[3000:]])
    streamed = client.post("/api/upload", content=in_parts, headers=headers)
    assert streamed.status_code == 413  # no length declared: counted while read
    fake = client.post("/api/upload", content=b"#!/bin/sh\necho not a picture\n", headers=headers)
    assert fake.status_code == 400 and "not a PNG, JPEG" in fake.json()["refused"]
    assert snapshot(cwd) == before
    uploads = cwd / "out" / "workbench" / "uploads"
    assert not uploads.exists()
    # a picture is kept under output_root by its content's hash, once
    picture = io.BytesIO()
    Image.new("RGB", (8, 8), "red").save(picture, format="PNG")
    kept = [client.post("/api/upload", content=picture.getvalue(), headers=headers) for _ in "ab"]
    assert kept[0].status_code == 200 and kept[0].json() == kept[1].json()
    (path,) = uploads.iterdir()
    assert path.name == kept[0].json()["image"] and path.read_bytes() == picture.getvalue()
