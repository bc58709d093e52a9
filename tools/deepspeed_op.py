"""DeepSpeed's CPU shared-memory op, compiled once per machine rather than once per environment.

    python -m tools.deepspeed_op     # prints the wheel to install, or nothing

On CPU, DeepSpeed's communication backend loads its `deepspeed_shm_comm` op at every launch,
and DeepSpeed on PyPI ships as a source distribution that compiles no op: the first launch in
each virtual environment compiles it (torch's JIT build, in `~/.cache/torch_extensions`), a
minute on two cores, and so does the first launch after another environment's, because the
compile command names the environment's own paths. DeepSpeed's documented alternative is to
compile its ops when the package is built (`DS_BUILD_SHM_COMM=1`). `make install` runs this
tool, which builds that wheel once per DeepSpeed, torch and Python into the engine's cache
(`<cache>/wheels/`), and installs what it prints.

It prints nothing where DeepSpeed would not JIT-compile the op: on a GPU machine (another
accelerator, other ops), where the installed DeepSpeed already holds it, or where the op does
not build here (DeepSpeed then compiles nothing and falls back to gloo's all-reduce, as before).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from importlib.metadata import version
from pathlib import Path

from recipe_engine.files import default_cache_dir, file_lock

OP_BUILDER = "ShareMemCommBuilder"


def op_to_prebuild() -> str | None:
    """The op's name where this environment's DeepSpeed would JIT-compile it, else None (and
    where DeepSpeed is not installed: an install without the engine's `deepspeed` extra)."""
    try:
        import deepspeed.ops
        from deepspeed.accelerator import get_accelerator
        from deepspeed.git_version_info import installed_ops
    except ImportError:
        return None

    if get_accelerator().device_name() != "cpu":
        return None
    builder = get_accelerator().create_op_builder(OP_BUILDER)
    if builder is None or not deepspeed.ops.__compatible_ops__.get(builder.NAME, False):
        return None
    return None if installed_ops.get(builder.NAME) else builder.NAME


def wheel_folder(cache_dir: Path | None = None) -> Path:
    """One folder per DeepSpeed, torch, Python and platform: the op links against torch."""
    platform = sysconfig.get_platform().replace("-", "_")
    python = f"cp{sys.version_info.major}{sys.version_info.minor}"
    name = f"deepspeed-{version('deepspeed')}-torch-{version('torch')}-{python}-{platform}"
    return (cache_dir or default_cache_dir()) / "wheels" / name


def built_wheel(folder: Path) -> Path:
    """The folder's wheel, built first if no process has: aside, then renamed into place."""
    with file_lock(folder.with_name(f".{folder.name}.lock")):
        found = sorted(folder.glob("deepspeed-*.whl"))
        if found:
            return found[0]
        tmp = Path(tempfile.mkdtemp(prefix=f".{folder.name}.tmp-", dir=folder.parent))
        try:
            # --no-cache-dir: pip's wheel cache is keyed by the sdist, not by DS_BUILD_SHM_COMM,
            # so it could hand back a pure-Python DeepSpeed wheel built without the op.
            subprocess.run(
                [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-cache-dir",
                 "--no-build-isolation", "--no-binary", "deepspeed", "-w", str(tmp),
                 f"deepspeed=={version('deepspeed')}"],
                check=True,
                env={**os.environ, "DS_BUILD_SHM_COMM": "1"},
                stdout=sys.stderr,  # stdout carries only the wheel's path
            )  # fmt: skip
            os.rename(tmp, folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return next(folder.glob("deepspeed-*.whl"))


def main() -> int:
    # DeepSpeed logs to stdout (its accelerator's notice on import); stdout is the path alone.
    with contextlib.redirect_stdout(sys.stderr):
        wheel = built_wheel(wheel_folder()) if op_to_prebuild() else None
    if wheel is not None:
        print(wheel)
    return 0


if __name__ == "__main__":
    sys.exit(main())
