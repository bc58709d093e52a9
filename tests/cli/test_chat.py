"""`chat`: a VLM stage (r2's vision stage, full weights) and a text stage
(text-lora's LoRA adapter on its base) answer their run's probes as the run's comparison
records them, with the same settings: once for a script (`prompt=`), streamed in the terminal,
and as the web view's worker (`jsonl=true`); the run's base too, and a stage named by its store
key. A stage that has not committed (a run stopped by Ctrl-C mid stage) and every other bad
input is one message, exit 2, nothing written."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest
from engine_cli import SHORT_STAGES, engine, forked_engine

from recipe_engine.cli.main import main
from recipe_engine.errors import EXIT_USER_ERROR

SHORT = SHORT_STAGES[:-1]  # text-lora: one `llm` stage


def ok(*args: str, cwd: Path) -> None:
    done = engine(*args, cwd=cwd, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture(scope="module")
def cwd(tmp_path_factory) -> Path:
    """r2-vision-only (a VLM stage, full weights) and text-lora (a LoRA adapter on its base)
    trained, each ending with its comparison (neither is quantized, so the models the run
    measured are those `compare run=...` and `chat` load)."""
    cwd = tmp_path_factory.mktemp("chat")
    ok("recipe=r2-vision-only", *SHORT_STAGES[:-2], "++stage.vision.train.max_steps=2", cwd=cwd)
    ok("recipe=text-lora", *SHORT, cwd=cwd)
    return cwd


def runs(cwd: Path) -> list[Path]:
    return sorted((cwd / "out" / "runs").glob("*/*"))


def run_of(cwd: Path, recipe: str) -> Path:
    return next(run for run in runs(cwd) if run.parent.name == recipe)


def probes(run: Path) -> list[dict]:
    return [json.loads(line) for line in (run / "compare.jsonl").read_text().splitlines()]


def files(root: Path) -> dict[str, float]:
    return {str(p): p.stat().st_mtime for p in root.rglob("*")}


def test_a_vlm_stage_and_its_base_answer_each_probe_as_compare_records_it(cwd, capsys):
    run = run_of(cwd, "r2-vision-only")
    for probe in probes(run)[:2]:
        for model in ("vision", "base"):
            asked = [f"prompt={probe['input']}", f"image={probe['image']}"]
            assert main(["chat", f"{run}/{model}", *asked]) == 0
            # the answer alone on stdout, for a script
            assert capsys.readouterr().out == probe["outputs"][model] + "\n", (model, probe)


def test_a_text_stage_answers_as_compare_records_it_by_store_key_or_run_stage(
    cwd, capsys, monkeypatch
):
    run = run_of(cwd, "text-lora")
    first, second = probes(run)[:2]
    key = json.loads((run / "summary.json").read_text())["stages"][-1]["key"]
    monkeypatch.chdir(cwd)  # where output_root=out is
    assert main(["chat", key, f"prompt={first['input']}", "output_root=out"]) == 0
    assert capsys.readouterr().out == first["outputs"]["llm"] + "\n"
    assert main(["chat", f"{run}:llm", f"prompt={second['input']}"]) == 0
    assert capsys.readouterr().out == second["outputs"]["llm"] + "\n"


def test_in_the_terminal_each_answer_streams_and_quit_ends(cwd, monkeypatch, capsys):
    run = run_of(cwd, "text-lora")
    asked = probes(run)[:2]
    typed = "".join(f"{p['input']}\n" for p in asked) + "/quit\n"
    monkeypatch.setattr(sys, "stdin", io.StringIO(typed))
    monkeypatch.chdir(cwd)
    assert main(["chat", f"{run}/llm"]) == 0
    out, err = capsys.readouterr()
    answers = [p["outputs"]["llm"] for p in asked]
    assert out == "".join(f"> {answer}\n" for answer in answers) + "> "
    assert "generation: max_new_tokens=" in err and "Each question is asked on its own" in err


def test_the_view_s_worker_streams_text_then_the_answer(cwd, monkeypatch, capsys):
    run = run_of(cwd, "r2-vision-only")
    probe = probes(run)[0]
    lines = [
        {"prompt": probe["input"], "image": probe["image"]},
        {"question": "no prompt"},
        {"prompt": "x", "image": str(cwd / "nothing.png")},
    ]
    monkeypatch.setattr(sys, "stdin", io.StringIO("".join(json.dumps(x) + "\n" for x in lines)))
    assert main(["chat", f"{run}/vision", "jsonl=true", "eval.max_new_tokens=6"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    ready = events.pop(0)["ready"]
    assert ready["kind"] == "vlm" and ready["name"] == "vision"
    assert "max_new_tokens=6" in ready["generation"]
    answer = next(i for i, e in enumerate(events) if "answer" in e)
    streamed = "".join(e["text"] for e in events[:answer])
    assert streamed.strip() == events[answer]["answer"] and streamed.strip()
    assert events[answer + 1]["error"].startswith("not a question line")
    assert events[answer + 2] == {"error": f"`image={cwd / 'nothing.png'}`: no such file."}


# Run first in the forked engine: Ctrl-C (SIGINT to itself, as the web view's Stop sends it to
# the run's process group) inside training step 3, after the checkpoint of step 2.
STOP_AT_STEP_3 = """
import os, signal
from transformers import Trainer
real_step = Trainer.training_step
def training_step(self, *args, **kwargs):
    if self.state.global_step + 1 == 3:
        os.kill(os.getpid(), signal.SIGINT)
    return real_step(self, *args, **kwargs)
Trainer.training_step = training_step
"""


def stopped_mid_stage(cwd: Path) -> Path:
    """text-lora stopped by Ctrl-C once its stage saved a checkpoint: a run folder without a
    summary, a `.partial` store entry (another seed: another key than the trained one's)."""
    before = set(runs(cwd))
    prelude = cwd / "stop_at_step_3.py"
    prelude.write_text(STOP_AT_STEP_3)
    long = ("++stage.llm.train.max_steps=50", "++stage.llm.train.save_steps=2", "seed=7")
    done = forked_engine("recipe=text-lora", *SHORT[:-1], *long, cwd=cwd, prelude=prelude)
    assert done.returncode != 0 and "Traceback" not in done.stderr[-300:], done.stderr[-2000:]
    prelude.unlink()
    (stopped,) = set(runs(cwd)) - before
    return stopped


def refused(args: tuple[str, ...], capsys) -> str:
    """`chat ARGS` in this process: exit 2, one `error:` line, nothing printed on stdout."""
    assert main(["chat", *args]) == EXIT_USER_ERROR, args
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: ") and err.count("error:") == 1, (args, err)
    return err


def test_what_is_not_committed_and_every_bad_input_is_one_message_and_exit_2(
    cwd, capsys, monkeypatch
):
    stopped = stopped_mid_stage(cwd)
    partial = next((cwd / "out" / "store").glob("*.partial"))
    vlm, text = run_of(cwd, "r2-vision-only"), run_of(cwd, "text-lora")
    picture = f"image={probes(vlm)[0]['image']}"
    cases = {
        (f"{stopped}/llm",): "is not committed: the run has not finished",
        (str(partial),): "is not committed (no COMPLETE marker",
        (partial.name[:12], "output_root=out"): "is not committed (no COMPLETE marker",
        (f"{vlm}/visoin",): "is not one of its stages. Did you mean `vision`?",
        ("out/runs/nothing/llm",): "Cannot chat with `out/runs/nothing/llm`: it does not exist",
        ("abcdef123456", "output_root=out"): "Store key `abcdef123456` matches no stage",
        (f"{text}/llm", "prompt=hi", picture): "`image=` is for a vision-language stage",
        (f"{vlm}/vision", "prompt=hi", f"image={vlm / 'summary.json'}"): "is not a picture PIL",
        (f"{vlm}/vision", "jsonl=true", "prompt=hi"): "`jsonl=true` reads its questions",
        (f"{vlm}/vision", "prompt="): "`prompt=` is empty",
        (f"{vlm}/vision", "colour=red"): "Unknown key `colour`",
        ("prompt=hi",): "`chat` takes one stage, got 0",
    }
    monkeypatch.chdir(cwd)
    before = files(cwd / "out")
    for args, message in cases.items():
        assert message in refused(args, capsys), args
    # and as a user runs it: a process of its own, the same message, exit 2 (the web view's
    # worker answers as a process of its own in tests/ui/test_workbench.py)
    done = engine("chat", f"{stopped}/llm", "prompt=hi", cwd=cwd)
    assert done.returncode == EXIT_USER_ERROR and done.stdout == ""
    assert done.stderr.startswith("error: Stage `llm` of") and "Traceback" not in done.stderr
    assert files(cwd / "out") == before  # nothing written
