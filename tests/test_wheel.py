"""Installable anywhere: the wheel in a fresh venv, and the package read-only, each run from a
folder outside the checkout.

The wheel test reuses the suite's libraries (torch and all) without copying them: the fresh
venv's site-packages holds a .pth line naming this venv's site-packages. A path line only adds
that folder to sys.path; the .pth files inside it are not processed, so this checkout's editable
install of recipe_engine stays invisible and only the wheel provides it (checked below).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from recipe_engine.files import default_cache_dir

pytestmark = pytest.mark.install

ROOT = Path(__file__).resolve().parents[1]
# What the build reads; building in the checkout itself would write build/ and *.egg-info there.
# tools/ goes along so that the check below sees the build leave it out.
BUILD_INPUTS = ("pyproject.toml", "README.md", "recipe_engine", "tools")
# A default run made short: two steps per stage, no held-out evaluation.
SHORT_R3 = (
    "data.max_samples=16",
    "eval.enabled=false",
    "stage.vision.train.max_steps=2",
    "stage.llm.train.max_steps=2",
)
SHORT_TEXT = (
    "recipe=text-lora",
    "data.max_samples=16",
    "eval.max_samples=4",
    "stage.llm.train.max_steps=2",
)
Snapshot = dict[str, tuple[int, int]]


def snapshot(root: Path) -> Snapshot:
    """Every file and folder under `root` with its size and mtime: any write changes it."""
    return {
        str(path.relative_to(root)): (path.lstat().st_size, path.lstat().st_mtime_ns)
        for path in root.rglob("*")
    }


def user_env(**extra: str) -> dict[str, str]:
    """The environment of a user's shell: no PYTHONPATH or venv of this checkout; the suite's
    cache, so the tiny models are not rebuilt."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    return {**env, "RECIPE_ENGINE_CACHE": str(default_cache_dir()), **extra}


def run(command: list[str], cwd: Path, env: dict[str, str], timeout: int = 300):
    result = subprocess.run(
        command, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )
    assert result.returncode == 0, f"{command}:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result


def build_wheel(into: Path) -> Path:
    source = into / "source"
    source.mkdir(parents=True)
    for name in BUILD_INPUTS:
        if (ROOT / name).is_dir():
            ignore = shutil.ignore_patterns("__pycache__")
            shutil.copytree(ROOT / name, source / name, ignore=ignore)
        else:
            shutil.copy2(ROOT / name, source / name)
    # No build isolation: an isolated build would download setuptools, and the suite is offline;
    # this venv's setuptools is the one pyproject.toml's [build-system] asks for (>= 68).
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check"]
    command = [*pip, "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q"]
    run([*command, "-w", str(into / "dist"), str(source)], cwd=into, env=user_env())
    [wheel] = (into / "dist").glob("recipe_engine-*.whl")
    return wheel


def top_level(wheel: Path) -> set[str]:
    """The wheel's top-level folders and files."""
    with zipfile.ZipFile(wheel) as archive:
        return {name.split("/")[0] for name in archive.namelist()}


def fresh_venv(folder: Path) -> tuple[Path, Path]:
    """A venv without pip or packages whose sys.path ends with this venv's site-packages;
    returns (its bin folder, its site-packages)."""
    run([sys.executable, "-m", "venv", "--without-pip", str(folder)], cwd=folder.parent, env={})
    python = folder / "bin" / "python"
    where = "import sysconfig; print(sysconfig.get_path('purelib'))"
    site = Path(run([str(python), "-c", where], cwd=folder, env={}).stdout.strip())
    ours = dict.fromkeys(sysconfig.get_path(k) for k in ("purelib", "platlib"))
    (site / "suite-libraries.pth").write_text("".join(f"{path}\n" for path in ours))
    return folder / "bin", site


def where_recipe_engine(python: Path, cwd: Path, env: dict[str, str]) -> str:
    code = "import importlib.util as u; s = u.find_spec('recipe_engine'); print(s and s.origin)"
    return run([str(python), "-c", code], cwd=cwd, env=env).stdout.strip()


def test_the_wheel_installs_and_runs_from_anywhere(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path / "build")
    # The engine alone: the development scripts (tools/) are not shipped.
    assert {name for name in top_level(wheel) if not name.endswith(".dist-info")} == {
        "recipe_engine"
    }
    venv_bin, site = fresh_venv(tmp_path / "venv")
    work = tmp_path / "work"
    work.mkdir()
    env = user_env()
    assert where_recipe_engine(venv_bin / "python", work, env) == "None"  # editable: unseen
    install = ["-m", "pip", "install", "--no-deps", "--no-index", "--ignore-installed", "-q"]
    run([str(venv_bin / "python"), *install, str(wheel)], cwd=work, env=env)
    origin = where_recipe_engine(venv_bin / "python", work, env)
    assert Path(origin).parent == site / "recipe_engine"
    before = snapshot(tmp_path / "venv")

    cli = str(venv_bin / "recipe-engine")
    shown = run([cli, "--help"], cwd=work, env=env).stdout
    for recipe in ("r1-llm-only", "r2-vision-only", "r3-two-stage", "r4-joint", "text-lora"):
        assert recipe in shown, shown
    planned = run([cli, "plan"], cwd=work, env=env).stdout
    assert "r3-two-stage" in planned, planned
    run([cli, *SHORT_R3], cwd=work, env=env)
    listed = run([cli, "runs"], cwd=work, env=env).stdout

    [run_dir] = (work / "outputs" / "runs" / "r3-two-stage").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [s["status"] for s in summary["stages"]] == ["trained", "trained"]
    assert f"runs/r3-two-stage/{run_dir.name}" in listed, listed
    assert [p.name for p in work.iterdir()] == ["outputs"]
    assert snapshot(tmp_path / "venv") == before  # nothing lands in site-packages


def test_plan_and_a_short_run_with_the_package_read_only(tmp_path: Path) -> None:
    copy = tmp_path / "readonly"
    shutil.copytree(ROOT / "recipe_engine", copy / "recipe_engine")  # compiled files too
    paths = [copy, *copy.rglob("*")]
    for path in paths:
        path.chmod(path.stat().st_mode & ~0o222)
    # Root ignores the mode bits, so the snapshot is what proves nothing was written.
    before = snapshot(copy)
    work = tmp_path / "work"
    work.mkdir()
    env = user_env(PYTHONPATH=str(copy), PYTHONDONTWRITEBYTECODE="1")
    try:
        origin = where_recipe_engine(Path(sys.executable), work, env)
        assert Path(origin).parent == copy / "recipe_engine"
        engine = [sys.executable, "-m", "recipe_engine"]
        planned = run([*engine, "plan", *SHORT_TEXT], cwd=work, env=env).stdout
        assert "text-lora" in planned, planned
        run([*engine, *SHORT_TEXT], cwd=work, env=env)
        assert snapshot(copy) == before
    finally:
        for path in paths:  # so that pytest can clear its temporary folders as any user
            path.chmod(path.stat().st_mode | 0o200)
    [run_dir] = (work / "outputs" / "runs" / "text-lora").iterdir()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert [s["status"] for s in summary["stages"]] == ["trained"]
    assert [p.name for p in work.iterdir()] == ["outputs"]
