"""`make gpu-wheels`: the pins it asks for, and bitsandbytes cut to what a CUDA 13 image loads."""

from __future__ import annotations

import zipfile

import pytest

from tools.gpu_wheels import pinned, prune_bitsandbytes, refuse_platform_wheels

LIBRARIES = ("cpu", "cuda118", "cuda128", "cuda130", "cuda132", "rocm72", "xpu2025")


def library(kind: str) -> str:
    return f"bitsandbytes/libbitsandbytes_{kind}.so"


def test_a_package_is_asked_for_at_its_constraints_pin_however_its_name_is_spelled(tmp_path):
    constraints = tmp_path / "constraints.txt"
    constraints.write_text("hydra-core==1.3.8\npydantic_core==2.50.4\ntrl==1.16.0\n")
    assert pinned("hydra_core", constraints) == "hydra-core==1.3.8"
    assert pinned("pydantic-core", constraints) == "pydantic_core==2.50.4"
    assert pinned("liger-kernel", constraints) == "liger-kernel"  # not pinned: the newest
    assert pinned("antlr4-python3-runtime==4.9.3", constraints) == "antlr4-python3-runtime==4.9.3"


def test_a_built_wheel_tied_to_this_machines_python_stops_the_wheelhouse(tmp_path):
    # make install's DeepSpeed wheel (its CPU op compiled for Python 3.11) came back from pip's
    # wheel cache once, and the GPU image's Python 3.12 refused it after a machine had started.
    for name in ("antlr4_python3_runtime-4.9.3-py3-none-any.whl",
                 "bitsandbytes-0.50.2-py3-none-manylinux_2_24_x86_64.whl"):  # fmt: skip
        (tmp_path / name).touch()
    refuse_platform_wheels(tmp_path)  # pure, or downloaded for the image's platform: kept
    (tmp_path / "deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl").touch()
    with pytest.raises(SystemExit, match="deepspeed-0.19.8-cp311-cp311-linux_x86_64.whl is built"):
        refuse_platform_wheels(tmp_path)


def test_bitsandbytes_keeps_only_cuda_13_and_cpu_libraries_and_a_matching_record(tmp_path):
    wheel = tmp_path / "bitsandbytes-0.50.2-py3-none-manylinux_2_24_x86_64.whl"
    names = ["bitsandbytes/__init__.py", *(library(kind) for kind in LIBRARIES)]
    record = "".join(f"{name},sha256=x,1\n" for name in names)
    with zipfile.ZipFile(wheel, "w") as out:
        for name in names:
            out.writestr(name, b"\0" * 100_000)
        out.writestr("bitsandbytes-0.50.2.dist-info/RECORD", record)
    assert prune_bitsandbytes(wheel) > 0
    with zipfile.ZipFile(wheel) as kept:
        files = set(kept.namelist())
        left = kept.read("bitsandbytes-0.50.2.dist-info/RECORD").decode()
    libraries = {n for n in files if n.endswith(".so")}
    assert libraries == {library(kind) for kind in ("cpu", "cuda130", "cuda132")}
    assert "bitsandbytes/__init__.py" in files
    assert {line.split(",")[0] for line in left.splitlines()} == files - {
        "bitsandbytes-0.50.2.dist-info/RECORD"
    }


def test_the_tiny_models_and_datasets_travel_as_a_cache_the_engine_reads(tmp_path, monkeypatch):
    """Laid out as the engine's cache (models/<name>, data/<name>), so RECIPE_ENGINE_CACHE
    pointed at it finds every embedded model and dataset without building one."""
    from recipe_engine.files import default_cache_dir
    from recipe_engine.resolve.tiny import TINY_DATASETS, TINY_MODELS, build_tiny_model
    from tools.gpu_models import TINY_CACHE
    from tools.gpu_wheels import copy_tiny_cache

    carried = copy_tiny_cache(tmp_path)
    assert carried == tmp_path / TINY_CACHE
    models = {p.name for p in (carried / "models").iterdir()}
    data = {p.name for p in (carried / "data").iterdir()}
    assert len(models) == len(TINY_MODELS) and len(data) == len(TINY_DATASETS)
    monkeypatch.setenv("RECIPE_ENGINE_CACHE", str(carried))
    assert default_cache_dir() == carried
    assert build_tiny_model("tiny-qwen2-vl").parent == carried / "models"
    assert {p.name for p in (carried / "models").iterdir()} == models  # found, none built
