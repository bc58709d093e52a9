"""A hub model and a hub dataset, through the engine's own commands, from a Hugging Face Hub on
the loopback address (tests/hub_server.py) that the real `huggingface_hub` and `datasets`
clients reach through HF_ENDPOINT: no mock of either client.

Each test starts from a hub holding only the tiny Qwen2 as `acme/tiny-lm` and the arithmetic
rows as the dataset `acme/arith`, and runs `python -m recipe_engine` with a Hugging Face cache
of its own. The two tests that start from a stage trained on that hub start from a copy of one
such run, made once for the module (`trained_from_hub`): every engine process costs seconds
of imports before it does anything. For the same reason the hub is one server for the module,
emptied and stocked again for each test, and each test's cache is reached through one path
(`hf_home`): `huggingface_hub` and `datasets` read HF_ENDPOINT and HF_HOME as they are
imported, and with both the same, the commands are forked from one process that imported the
engine with them (tests/engine_cli.py), each with the variables a fresh one would have.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from engine_cli import engine as run_engine
from hub_server import HubServer

from recipe_engine.resolve.tiny import build_dataset, build_tiny_model

MODEL, DATA = "acme/tiny-lm", "acme/arith"
HUB_MODEL = ("recipe=text-lora", "model.source=hub", f"model.id={MODEL}")
HUB_DATA = ("data.source=hub", f"data.path={DATA}", "data.format=auto", "data.eval_split=test")
SHORT = (
    "data.max_samples=16",
    "eval.max_samples=2",
    "eval.compare=false",
    "stage.llm.train.max_steps=2",
    "stage.llm.train.per_device_train_batch_size=4",
)
WEIGHTS = "model.safetensors"


def stocked(server: HubServer) -> HubServer:
    """`server` emptied, then holding MODEL and DATA, each at one commit: the same commit ids
    every time (a commit id is the hash of its files, and the files are built once)."""
    server.reset()
    server.commit(MODEL, build_tiny_model("tiny-qwen2"))
    server.commit(DATA, build_dataset("arithmetic"), kind="dataset")
    return server


@pytest.fixture(scope="module")
def module_hub() -> Iterator[HubServer]:
    server = HubServer().start()
    yield server
    server.stop()


@pytest.fixture
def hub(module_hub: HubServer) -> HubServer:
    return stocked(module_hub)


def hf_home(tmp_path: Path) -> Path:
    """HF_HOME for a command of the test in `tmp_path`: one path for every test of this worker
    (a link beside their folders), pointing at the test's own cache, `tmp_path/hf`."""
    home, cache = tmp_path.parent / "hf-home", tmp_path / "hf"
    cache.mkdir(exist_ok=True)
    if home.is_symlink():
        home.unlink()
    home.symlink_to(cache, target_is_directory=True)
    return home


def engine(
    tmp_path: Path,
    endpoint: str,
    *args: str,
    offline: bool = False,
    inside: Sequence[str] = (),
    fork: bool = True,
    **env: str,
) -> subprocess.CompletedProcess:
    """`python -m recipe_engine ARGS` with the hub at `endpoint` and a Hugging Face cache of
    its own (`inside`: a command that runs it, e.g. in a namespace). It is forked (`fork`) with
    the module's hub variables, or runs as a fresh process: offline, inside a command, or where
    a test asks (another endpoint would start another forking process for one command)."""
    environment = {key: value for key, value in os.environ.items() if key != "HF_TOKEN"}
    environment |= {
        "HF_ENDPOINT": endpoint,
        "HF_HOME": str(hf_home(tmp_path)),
        "HF_HUB_OFFLINE": "1" if offline else "0",
        "HF_DATASETS_OFFLINE": "1" if offline else "0",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        **env,
    }
    args = (*args, f"output_root={tmp_path / 'out'}")
    if fork and not offline and not inside:
        return run_engine(*args, cwd=tmp_path, env=environment, timeout=300, fork=True)
    return subprocess.run(
        [*inside, sys.executable, "-m", "recipe_engine", *args],
        cwd=tmp_path,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
    )


def on_a_small_disk(folder: Path, size: str, then: str = "") -> list[str]:
    """A command prefix: the engine runs with `folder` a tmpfs of `size` (a real file system
    that fills: ENOSPC), in a mount namespace of its own that ends with it; `then` runs after
    it (still inside), and the engine's exit code is the prefix's."""
    folder.mkdir(parents=True, exist_ok=True)
    script = (
        f'mount -t tmpfs -o size={size} tmpfs "{folder}" || exit 90\n'
        f'"$@"; code=$?\n{then}\nexit $code\n'
    )
    return ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script, "sh"]


def files_in(folder: Path, listing: Path) -> str:
    """Shell: the files under `folder`, with sizes, into `listing` (outside the tmpfs)."""
    return f'find "{folder}" \\( -type f -o -type l \\) -printf "%P %s\\n" | sort > "{listing}"'


def summary(tmp_path: Path) -> list[str]:
    newest = max((tmp_path / "out" / "runs" / "text-lora").iterdir())
    return [s["status"] for s in json.loads((newest / "summary.json").read_text())["stages"]]


def one_error(result: subprocess.CompletedProcess) -> str:
    """The one `error:` line of a refusal, with no traceback."""
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr[-3000:]
    return errors[0]


def committed(tmp_path: Path) -> list[str]:
    """The store's complete stage entries."""
    store = tmp_path / "out" / "store"
    return sorted(p.parent.name for p in store.glob("*/COMPLETE")) if store.is_dir() else []


HUB_RUN = (*HUB_MODEL, *HUB_DATA, *SHORT)


@dataclass(frozen=True)
class TrainedFromHub:
    """`plan` then `run` of HUB_RUN with a fresh cache and output root, on a hub of its own
    (stopped since): what each printed, wrote and asked the hub."""

    folder: Path  # the runs' tmp_path: out/ (store, runs) and hf/ (the Hugging Face cache)
    model_commit: str  # MODEL's and DATA's main when they ran
    data_commit: str
    planned: subprocess.CompletedProcess
    plan_wrote_out: bool  # whether `out` existed once the plan had finished
    trained: subprocess.CompletedProcess
    requests_of_the_run: list[str]

    def copy_into(self, tmp_path: Path) -> None:
        """The output root and the cache, as a test's own (the cache's snapshot links are
        relative, and the store records no absolute path): a test may change its copy."""
        for part in ("out", "hf"):
            shutil.copytree(self.folder / part, tmp_path / part, symlinks=True)


@pytest.fixture(scope="module")
def trained_from_hub(
    tmp_path_factory: pytest.TempPathFactory, module_hub: HubServer
) -> TrainedFromHub:
    """One hub stage trained for the tests that continue from one (they assert that it
    trained); each works on a copy of it (`copy_into`) and the hub stocked again."""
    folder = tmp_path_factory.mktemp("trained-from-hub")
    server = stocked(module_hub)
    planned = engine(folder, server.endpoint, "plan", *HUB_RUN)
    plan_wrote_out = (folder / "out").exists()
    asked_before = len(server.requests)
    trained = engine(folder, server.endpoint, *HUB_RUN)
    return TrainedFromHub(
        folder=folder,
        model_commit=server.repos[("model", MODEL)].refs["main"],
        data_commit=server.repos[("dataset", DATA)].refs["main"],
        planned=planned,
        plan_wrote_out=plan_wrote_out,
        trained=trained,
        requests_of_the_run=server.requests[asked_before:],
    )


def test_plan_pins_run_downloads_and_a_later_commit_changes_nothing(
    hub: HubServer, tmp_path: Path, trained_from_hub: TrainedFromHub
) -> None:
    """The shared run's plan and run (`trained_from_hub`), then, on a copy of what they
    wrote and a hub at the same commits, what later commits upstream change."""
    model_a, data_a = trained_from_hub.model_commit, trained_from_hub.data_commit
    assert hub.repos[("model", MODEL)].refs["main"] == model_a  # this hub: the same commits
    assert hub.repos[("dataset", DATA)].refs["main"] == data_a
    planned = trained_from_hub.planned
    assert planned.returncode == 0, planned.stderr[-3000:]
    assert f"revision:  {model_a[:12]} (default branch, resolved now from the hub" in planned.stdout
    assert f"data rev:  {data_a[:12]} (default branch, resolved now from the hub" in planned.stdout
    assert not trained_from_hub.plan_wrote_out, "plan writes nothing"

    trained = trained_from_hub.trained
    assert trained.returncode == 0, trained.stderr[-3000:]
    trained_from_hub.copy_into(tmp_path)
    assert summary(tmp_path) == ["trained"]
    downloads = trained_from_hub.requests_of_the_run
    assert f"GET /{MODEL}/resolve/{model_a}/{WEIGHTS}" in downloads  # downloaded, at A
    pins = json.loads((tmp_path / "out" / "store" / "hub-revisions.json").read_text())
    assert pins["models"][MODEL]["commit"] == model_a
    assert pins["datasets"][DATA]["commit"] == data_a
    [key] = committed(tmp_path)
    manifest = json.loads((tmp_path / "out" / "store" / key / "manifest.json").read_text())
    assert manifest["model_entry"]["revision"] == model_a

    # Upstream moves on: both repositories get a new commit on main.
    hub.commit(MODEL, {**hub.repos[("model", MODEL)].snapshots[model_a], "README.md": b"v2"})
    hub.commit(DATA, {"train.jsonl": b'{"prompt": "1+1=", "completion": "2"}\n'}, kind="dataset")
    again = engine(tmp_path, hub.endpoint, "plan", *HUB_RUN)
    assert f"revision:  {model_a[:12]} (pinned 20" in again.stdout
    assert f"data rev:  {data_a[:12]} (pinned 20" in again.stdout
    assert f"key {key[:12]}" in again.stdout  # the same stage, so the same key
    rerun = engine(tmp_path, hub.endpoint, *HUB_RUN)
    assert rerun.returncode == 0 and summary(tmp_path) == ["cached"], rerun.stderr[-3000:]
    # Asking for the branch as it is now is another result: another key.
    moved = engine(tmp_path, hub.endpoint, "plan", *HUB_RUN, "model.revision=main")
    assert moved.returncode == 0 and f"key {key[:12]}" not in moved.stdout

    # Offline, the cached copy is used: the same plan, and a run that trains from it, with
    # the hub's address a port nothing listens on.
    offline = engine(tmp_path, "http://127.0.0.1:9", *HUB_RUN, "force=[llm]", offline=True)
    assert offline.returncode == 0, offline.stderr[-3000:]
    assert summary(tmp_path) == ["trained"] and committed(tmp_path) == [key]


def test_a_hub_dataset_without_a_held_out_split_holds_rows_out_automatically(
    hub: HubServer, tmp_path: Path
) -> None:
    rows = [
        {"instruction": f"Add {i} and 1.", "input": "", "output": str(i + 1)} for i in range(42)
    ]
    hub.commit(
        "acme/alpaca",
        {"train.jsonl": "".join(json.dumps(r) + "\n" for r in rows).encode()},
        kind="dataset",
    )
    planned = engine(
        tmp_path, hub.endpoint, "plan", *HUB_MODEL, "data.source=hub", "data.path=acme/alpaca"
    )
    assert planned.returncode == 0, planned.stderr[-3000:]
    assert "38 train / 4 held out automatically" in planned.stdout


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        (f"model.id={MODEL}-typo", "which the hub does not have"),
        ("model.id=acme/gated-lm", "which is gated: accept its terms"),
        ("model.revision=no-such-branch", "has no revision 'no-such-branch'. Fix model.revision"),
        ("model.revision=a..b", "which the hub cannot read (Invalid rev id: a..b). Fix model"),
        (f"data.path={DATA}-typo", "is the hub dataset acme/arith-typo, which the hub does not"),
        ("data.revision=v9", "has no revision 'v9'. Fix data.revision"),
    ],
)
def test_what_the_hub_refuses_is_one_message_at_plan_time(
    hub: HubServer, tmp_path: Path, override: str, expected: str
) -> None:
    hub.commit("acme/gated-lm", build_tiny_model("tiny-qwen2"))
    hub.gate("acme/gated-lm")
    key = override.split("=")[0]
    args = [a for a in (*HUB_MODEL, *HUB_DATA) if a.split("=")[0] != key] + [override]
    for verb in ("plan", "run"):
        result = engine(tmp_path, hub.endpoint, verb, *args)
        assert result.returncode == 2 and expected in one_error(result), result.stderr[-3000:]
        assert not (tmp_path / "out").exists(), "a refusal writes nothing"
    assert not any(WEIGHTS in request for request in hub.requests), "nothing was downloaded"


def test_a_gated_model_plans_with_a_token_the_hub_accepts(hub: HubServer, tmp_path: Path) -> None:
    hub.commit("acme/gated-lm", build_tiny_model("tiny-qwen2"))
    hub.gate("acme/gated-lm")
    hub.tokens.add("hf_accepted")
    args = ("plan", "recipe=text-lora", "model.source=hub", "model.id=acme/gated-lm")
    assert engine(tmp_path, hub.endpoint, *args, HF_TOKEN="hf_accepted").returncode == 0
    assert engine(tmp_path, hub.endpoint, *args, HF_TOKEN="hf_other").returncode == 2


def test_a_hub_that_does_not_answer_is_one_message_for_run(tmp_path: Path) -> None:
    with socket.socket() as closed:  # a loopback port nothing listens on
        closed.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{closed.getsockname()[1]}"
    planned = engine(tmp_path, endpoint, "plan", *HUB_MODEL, fork=False)
    assert planned.returncode == 0 and f"`{MODEL}` cannot be had from here" in planned.stdout
    refused = engine(tmp_path, endpoint, *HUB_MODEL, fork=False)
    assert refused.returncode == 2 and "the hub did not answer" in one_error(refused)
    data = engine(tmp_path, endpoint, "plan", *HUB_DATA, fork=False)
    assert data.returncode == 2 and "could not load hub dataset `acme/arith`" in one_error(data)


def test_a_connection_that_keeps_dropping_fails_cleanly_and_one_dropped_mid_file_resumes(
    hub: HubServer, tmp_path: Path
) -> None:
    """A download cut every time fails the run cleanly (nothing half-written is kept); the
    rerun's download, cut twice mid-file, resumes each time to the same bytes, and the rerun
    trains and commits."""
    hub.drop(MODEL, WEIGHTS, after=100_000, times=100)
    failed = engine(tmp_path, hub.endpoint, *HUB_MODEL, *SHORT)
    message = one_error(failed)
    assert failed.returncode == 1, failed.stderr[-3000:]
    assert f"downloading hub model {MODEL}" in message and "rerun" in message
    assert committed(tmp_path) == []  # nothing in the store that a rerun would trust
    hub_cache = tmp_path / "hf" / "hub" / "models--acme--tiny-lm"
    assert not list(hub_cache.glob(f"snapshots/*/{WEIGHTS}")), "no half file passes as cached"
    assert not list(hub_cache.glob("blobs/*.incomplete")), "nor is kept to be trusted later"
    assert len(list(hub_cache.glob("blobs/*"))) == 5  # the whole files (config, tokenizer...)

    hub.drop(MODEL, WEIGHTS, after=100_000, times=2)  # in place of the hundred cuts
    asked_before = len(hub.requests)
    resumed = engine(tmp_path, hub.endpoint, *HUB_MODEL, *SHORT)
    assert resumed.returncode == 0 and summary(tmp_path) == ["trained"], resumed.stderr[-3000:]
    assert len(committed(tmp_path)) == 1
    gets = [r for r in hub.requests[asked_before:] if r.startswith("GET") and r.endswith(WEIGHTS)]
    assert len(gets) == 3  # cut twice, resumed twice (with a Range from where it stopped)
    original = (build_tiny_model("tiny-qwen2") / WEIGHTS).read_bytes()
    [cached] = (tmp_path / "hf" / "hub").glob(f"models--acme--tiny-lm/snapshots/*/{WEIGHTS}")
    assert hashlib.sha256(cached.read_bytes()).digest() == hashlib.sha256(original).digest()


def test_a_disk_that_fills_during_a_download_leaves_nothing_half_written(
    hub: HubServer, tmp_path: Path
) -> None:
    hf, listing = tmp_path / "hf", tmp_path / "cache-files.txt"
    small = on_a_small_disk(hf, "256k", then=files_in(hf, listing))  # the weights are 475 KiB
    result = engine(tmp_path, hub.endpoint, *HUB_MODEL, *SHORT, inside=small)
    assert result.returncode == 1, result.stderr[-3000:]
    message = one_error(result)
    assert f"downloading hub model {MODEL}" in message and "no space left on that disk" in message
    assert committed(tmp_path) == []
    cached = listing.read_text()
    assert "config.json" in cached, "the files that fit are cached whole"
    assert WEIGHTS not in cached and ".incomplete" not in cached, cached


@pytest.mark.parametrize(
    ("saving", "size", "written"),
    [
        ("stage.llm.train.save_strategy=no", "160k", "final/README.md"),  # the final save
        ("stage.llm.train.save_steps=1", "400k", "checkpoint-1/adapter_model.safetensors"),
    ],
    ids=["final save", "checkpoint"],
)
def test_a_disk_that_fills_while_a_stage_writes_leaves_no_entry_and_a_rerun_commits(
    hub: HubServer, tmp_path: Path, saving: str, size: str, written: str
) -> None:
    out, listing = tmp_path / "out", tmp_path / "store-files.txt"
    grow = f'mount -o remount,size=16m "{out}" && "$@" > "{tmp_path}/rerun.out" 2>&1'  # room
    then = f'{files_in(out, listing)}\n{grow}\necho $? > "{tmp_path}/rerun.code"'
    result = engine(
        tmp_path, hub.endpoint, *HUB_MODEL, *SHORT, saving,
        inside=on_a_small_disk(out, size, then=then),
    )  # fmt: skip
    assert result.returncode == 1, result.stderr[-3000:]
    message = one_error(result)
    assert "stage `llm` stopped: the disk holding" in message and "is full" in message, message
    stored = listing.read_text()
    assert "COMPLETE" not in stored and written in stored, stored  # died while writing there
    assert "trainer_state.json" not in stored  # no checkpoint a rerun would resume from
    # The same command, once the disk has room: it trains and commits the stage.
    rerun = (tmp_path / "rerun.out").read_text()
    assert (tmp_path / "rerun.code").read_text().strip() == "0", rerun[-3000:]
    assert "stage llm: committed" in rerun


LOAD_FROM_HUB = """
import json, sys
from peft import AutoPeftModelForCausalLM
from transformers import AutoModelForCausalLM

adapter = AutoPeftModelForCausalLM.from_pretrained(sys.argv[1])
pushed = AutoModelForCausalLM.from_pretrained(sys.argv[2])
print(json.dumps({"adapter": type(adapter).__name__, "pushed": type(pushed).__name__}))
"""


def test_an_exported_adapter_names_its_hub_base_at_the_trained_revision(
    hub: HubServer, tmp_path: Path, trained_from_hub: TrainedFromHub
) -> None:
    """The adapter loads elsewhere with a fresh cache: PEFT fetches its base from the hub at
    the commit the stage trained on, after upstream moved on; the merged export, pushed, loads
    by its repository id. The stage is a copy of the shared run's (`trained_from_hub`)."""
    model_a = hub.repos[("model", MODEL)].refs["main"]
    assert model_a == trained_from_hub.model_commit  # the shared run's, on this hub too
    trained = trained_from_hub.trained  # HUB_MODEL, HUB_DATA and SHORT
    assert trained.returncode == 0, trained.stderr[-3000:]
    trained_from_hub.copy_into(tmp_path)
    [key] = committed(tmp_path)
    adapter = tmp_path / "adapter"
    exported = engine(tmp_path, hub.endpoint, "export", key[:8], "merge=false", f"to={adapter}")
    assert exported.returncode == 0, exported.stderr[-3000:]
    config = json.loads((adapter / "adapter_config.json").read_text())
    assert config["base_model_name_or_path"] == MODEL and config["revision"] == model_a

    hub.tokens.add("hf_writer")
    merged = ("export", key[:8], f"to={tmp_path / 'merged'}", "push=true", "repo=acme/tuned-lm")
    pushed = engine(tmp_path, hub.endpoint, *merged, HF_TOKEN="hf_writer")
    assert pushed.returncode == 0, pushed.stderr[-3000:]
    hub.commit(MODEL, {"config.json": b"{}"})  # upstream breaks its main branch

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    asked_before = len(hub.requests)
    environment = {key: value for key, value in os.environ.items() if key != "HF_TOKEN"}
    environment |= {"HF_ENDPOINT": hub.endpoint, "HF_HOME": str(elsewhere / "hf")}
    loaded = subprocess.run(
        [sys.executable, "-c", LOAD_FROM_HUB, str(adapter), "acme/tuned-lm"],
        cwd=elsewhere,
        env={**environment, "HF_HUB_OFFLINE": "0"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert loaded.returncode == 0, loaded.stderr[-3000:]
    assert json.loads(loaded.stdout.strip().splitlines()[-1]) == {
        "adapter": "PeftModelForCausalLM",
        "pushed": "Qwen2ForCausalLM",
    }
    assert f"GET /{MODEL}/resolve/{model_a}/{WEIGHTS}" in hub.requests[asked_before:]
