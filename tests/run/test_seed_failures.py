"""The seeds' containerised GPU deployment failed twice (../shared/seeds/): first `You can't
train a model that has been loaded with device_map='auto' in any distributed mode`, then, past
that, `module must have its parameters and buffers on device cuda:0 (device_ids[0]) but found
one of them on device: cpu`. Their CPU twins: the same script under torchrun with two gloo
processes (tests/seed_twin.py) fails the same two ways with the seed's loading, and trains with
the engine's placement; `doctor log=...` names each cause in the failed run's log."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
from engine_cli import engine, launcher_env

from recipe_engine.resolve.tiny import build_tiny_model

TWIN = Path(__file__).resolve().parents[1] / "seed_twin.py"


def launch(placement: str, out: Path) -> subprocess.CompletedProcess:
    """The twin script as the seed ran it: a distributed launcher, one process per device."""
    command = [
        sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
        str(TWIN), placement, str(build_tiny_model("tiny-llama")), str(out),
    ]  # fmt: skip
    return subprocess.run(
        command, capture_output=True, text=True, timeout=300, cwd=out.parent,
        env=launcher_env(out.parent),
    )  # fmt: skip


@pytest.fixture(scope="module")
def seed_loading(tmp_path_factory) -> dict[str, subprocess.CompletedProcess]:
    root = tmp_path_factory.mktemp("seed")
    return {placement: launch(placement, root / placement) for placement in ("auto", "bypass")}


def test_device_map_auto_under_a_launcher_fails_as_the_seed_did(seed_loading) -> None:
    failed = seed_loading["auto"]
    assert failed.returncode != 0
    assert "You can't train a model that has been loaded with `device_map='auto'`" in (
        failed.stderr
    )


def test_parameters_left_on_another_device_fail_as_the_seed_did_next(seed_loading) -> None:
    """CPU and disk (meta) stand in for cuda:0 and cpu: DDP refuses a model split that way,
    as DataParallel refused the seed's."""
    failed = seed_loading["bypass"]
    assert failed.returncode != 0
    assert "input module must be on the same type of devices" in failed.stderr
    assert "'meta'" in failed.stderr and "'cpu'" in failed.stderr


def test_the_same_script_with_the_engines_placement_trains(tmp_path: Path) -> None:
    done = launch("engine", tmp_path / "engine")
    assert done.returncode == 0, done.stderr[-3000:]
    # Two processes share stdout: a line of one may run into the trainer's log of the other.
    trained = sorted(re.findall(r"rank \d: trained \d+ step\(s\)", done.stdout))
    assert trained == ["rank 0: trained 1 step(s)", "rank 1: trained 1 step(s)"]


@pytest.mark.parametrize(
    ("placement", "named"),
    [("auto", "device_map='auto' under a distributed launcher"),
     ("bypass", "parameters on another device than the process's")],
)  # fmt: skip
def test_doctor_names_the_cause_in_the_failed_runs_log(
    seed_loading, placement: str, named: str, tmp_path: Path
) -> None:
    log = tmp_path / "train.log"
    log.write_text(seed_loading[placement].stderr)
    doctor = engine("doctor", f"log={log}", cwd=tmp_path, timeout=120)
    assert doctor.returncode == 0, doctor.stderr[-2000:]
    section = doctor.stdout.split("== your log: known failures")[1].split("== advice")[0]
    assert named in section and "fix:" in section
