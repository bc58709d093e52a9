"""`make install` installs DeepSpeed with its CPU shared-memory op compiled, from a wheel built
once per machine (tools/deepspeed_op.py), so no DeepSpeed launch compiles it."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import deepspeed
import pytest
from deepspeed.accelerator import get_accelerator
from deepspeed.git_version_info import installed_ops

from tools import deepspeed_op


def test_the_installed_deepspeed_holds_the_op_so_no_launch_compiles_it() -> None:
    assert installed_ops["deepspeed_shm_comm"]
    assert deepspeed_op.op_to_prebuild() is None
    module = get_accelerator().create_op_builder(deepspeed_op.OP_BUILDER).load()
    assert Path(module.__file__).is_relative_to(Path(deepspeed.__file__).parent)  # not a JIT


def test_without_deepspeed_there_is_nothing_to_build(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "deepspeed.ops", None)  # `import deepspeed.ops` raises
    assert deepspeed_op.op_to_prebuild() is None


def test_the_wheel_is_kept_per_deepspeed_torch_python_and_platform(tmp_path: Path) -> None:
    folder = deepspeed_op.wheel_folder(tmp_path)
    assert folder.parent == tmp_path / "wheels"
    python = f"cp{sys.version_info.major}{sys.version_info.minor}"
    expected = f"deepspeed-{version('deepspeed')}-torch-{version('torch')}-{python}-"
    assert folder.name.startswith(expected)


def test_a_built_wheel_is_found_not_built_again(tmp_path: Path, monkeypatch) -> None:
    folder = tmp_path / "wheels" / "deepspeed-x"
    folder.mkdir(parents=True)
    wheel = folder / "deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl"
    wheel.write_bytes(b"wheel")

    def no_build(*args, **kwargs):
        raise AssertionError("built again")

    monkeypatch.setattr(subprocess, "run", no_build)
    assert deepspeed_op.built_wheel(folder) == wheel


def test_a_failed_build_leaves_nothing_a_later_install_would_take(tmp_path: Path, monkeypatch):
    folder = tmp_path / "wheels" / "deepspeed-x"

    def half_built(command, **kwargs):
        into = Path(command[command.index("-w") + 1])
        (into / "deepspeed-0.19.8.whl.part").write_bytes(b"half")
        raise subprocess.CalledProcessError(1, command)

    monkeypatch.setattr(subprocess, "run", half_built)
    with pytest.raises(subprocess.CalledProcessError):
        deepspeed_op.built_wheel(folder)
    assert not folder.exists()
    assert [p.name for p in folder.parent.iterdir()] == [".deepspeed-x.lock"]
