"""The wheelhouse `make gpu-report` takes to a GPU machine without a package index, sized to
what one device call carries (64 MiB with the working tree; docs/gpu/README.md).

    python -m tools.gpu_wheels [DEST]       # default .gpu-wheels (`make gpu-wheels`)

- The packages the GPU image lacks or holds at other versions than constraints.txt pins, as
  wheels for its Python (3.12, manylinux x86_64); deepspeed and antlr4's runtime, published as
  sdists only, are built into wheels here.
- bitsandbytes without the native libraries of other CUDA versions and of ROCm / XPU: the image
  runs CUDA 13, and the whole wheel (43 MB) would fill a call alone; 7 MB remain.
- SmolLM2-135M's config and tokenizer (`gpu_models shape`), 3.5 MB, for the throughput
  steps, where its 98 MB GGUF fits no call.
- The embedded tiny models and datasets as the engine's cache holds them, 12 MB: built on a
  GPU machine, the tiny VLMs' pre-training took the first 250 s of a lease (on its CPU, as
  everywhere: their weights must not depend on the machine).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from tools.gpu_models import SHAPE, TINY_CACHE, write_shape

# What the image lacks, or holds at versions other than the pins (KINDS.md's package list):
# its accelerate, huggingface_hub, tokenizers and safetensors are admissible and stay.
WHEELS = (
    "trl", "transformers", "peft", "bitsandbytes", "datasets", "dill", "multiprocess",
    "filelock", "hydra-core", "omegaconf", "liger-kernel", "pydantic", "pydantic_core",
    "annotated-types", "typing-inspection", "hjson",
)  # fmt: skip
SDISTS = ("deepspeed", "antlr4-python3-runtime==4.9.3")
BUILT_NAMES = {re.split(r"[=<>!~ ]", name)[0].lower() for name in SDISTS}
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64",
             "manylinux2014_x86_64")  # fmt: skip
DEFLATED = zipfile.ZIP_DEFLATED
# bitsandbytes' native libraries worth carrying: CUDA 13's and the CPU fallback.
KEPT_LIBRARIES = re.compile(r"libbitsandbytes_(cuda13\d|cpu)\.so$")


def pinned(name: str, constraints: Path) -> str:
    """`name==version` as constraints.txt pins it, or `name` where it pins nothing."""
    if "==" in name or not constraints.is_file():
        return name
    spelled = re.compile(rf"^{re.sub(r'[-_]', '[-_]', name)}==", re.IGNORECASE)
    line = next((ln for ln in constraints.read_text().splitlines() if spelled.match(ln)), "")
    return line.strip() or name


def download(requirements: list[str], dest: Path) -> None:
    platforms = [arg for p in PLATFORMS for arg in ("--platform", p)]
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
         "--python-version", "3.12", "--implementation", "cp", *platforms, "-d", str(dest),
         *requirements],
        check=True,
    )  # fmt: skip


def build(requirements: list[str], dest: Path) -> None:
    """Wheels of packages published as sdists only (pure Python: they install anywhere).

    Built afresh, never from pip's wheel cache: that cache is keyed by the sdist alone, so it
    hands back whatever this machine built last, such as `make install`'s DeepSpeed wheel with
    its CPU op compiled for this Python (`tools/deepspeed_op`), which the GPU image refuses."""
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--no-cache-dir",
         "-w", str(dest), *requirements],
        check=True,
    )  # fmt: skip
    refuse_platform_wheels(dest)


def refuse_platform_wheels(dest: Path) -> None:
    """Stop where a built wheel is tied to this machine's Python or platform: the GPU image
    (another Python) would refuse it at install, after a machine was started for it."""
    tied = sorted(w.name for w in dest.glob("*.whl") if not w.name.endswith("-none-any.whl")
                  and w.name.split("-")[0].lower().replace("_", "-") in BUILT_NAMES)  # fmt: skip
    if tied:
        raise SystemExit(
            f"{dest}: {', '.join(tied)} is built for this machine, not pure Python; "
            f"delete it and run `make gpu-wheels` again"
        )


def prune_bitsandbytes(wheel: Path) -> int:
    """Rewrite `wheel` without the native libraries the GPU image cannot load, its RECORD
    with them; returns how many bytes it shrank by."""
    before = wheel.stat().st_size
    dropped = lambda name: "libbitsandbytes_" in name and not KEPT_LIBRARIES.search(name)  # noqa: E731
    pruned = wheel.with_suffix(".pruning")
    with (
        zipfile.ZipFile(wheel) as source,
        zipfile.ZipFile(pruned, "w", zipfile.ZIP_DEFLATED) as out,
    ):
        for entry in source.infolist():
            if dropped(entry.filename):
                continue
            data = source.read(entry)
            if entry.filename.endswith(".dist-info/RECORD"):
                lines = data.decode().splitlines(keepends=True)
                data = "".join(ln for ln in lines if not dropped(ln.split(",")[0])).encode()
            out.writestr(entry, data)
    pruned.replace(wheel)
    return before - wheel.stat().st_size


def copy_tiny_cache(dest: Path) -> Path:
    """The embedded tiny models and datasets, from this machine's cache (built there first
    where missing), laid out as a cache of their own under `dest`."""
    from recipe_engine.resolve.tiny import (
        TINY_DATASETS,
        TINY_MODELS,
        build_dataset,
        build_tiny_model,
    )

    target = dest / TINY_CACHE
    built = [*map(build_tiny_model, TINY_MODELS), *map(build_dataset, TINY_DATASETS)]
    for folder in built:
        kept = target / folder.parent.name / folder.name  # models/<name> or data/<name>
        if kept.exists():
            shutil.rmtree(kept)
        shutil.copytree(folder, kept)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.gpu_wheels")
    parser.add_argument("dest", nargs="?", type=Path, default=Path(".gpu-wheels"))
    dest = parser.parse_args(argv).dest
    dest.mkdir(parents=True, exist_ok=True)
    constraints = Path("constraints.txt")
    download([pinned(name, constraints) for name in WHEELS], dest)
    build([pinned(name, constraints) for name in SDISTS], dest)
    for wheel in dest.glob("bitsandbytes-*.whl"):
        print(f"{wheel.name}: {prune_bitsandbytes(wheel) / 1e6:.1f} MB of other platforms left out")
    write_shape(dest / SHAPE)
    print(f"wrote {copy_tiny_cache(dest)}")
    total = sum(f.stat().st_size for f in dest.rglob("*") if f.is_file())
    print(f"{dest}: {total / 1e6:.1f} MB (a device call carries 64 MiB with the working tree)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
