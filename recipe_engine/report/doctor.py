"""`python -m recipe_engine doctor [key=value ...]`: what placement depends on, here and now.

Prints library versions, CUDA / MPS, the GPUs nvidia-smi lists, CUDA_VISIBLE_DEVICES, the
launcher environment, whether the installed bitsandbytes has a backend for this device, and
what `parallel=auto` would choose for an unquantized and a 4-bit model. Every refusal or
fallback is printed with its reason and what to do instead. Overrides (`device=cpu
parallel=ddp hardware=2x-rtx6000-ada`) show what the planner would do with them.

Order matters: the planner runs first and reads the machine without importing torch (as a
real run does before it sets CUDA_VISIBLE_DEVICES); torch is imported only afterwards, and
bitsandbytes is never imported (its import initialises CUDA), only its files are read.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import platform
import re
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from recipe_engine.config.schema import EngineConfig, StageConfig
from recipe_engine.errors import RecipeError
from recipe_engine.plan.hardware import profile_gpus
from recipe_engine.report.known_failures import diagnose, diagnosis_lines
from recipe_engine.resolve.machine import Machine, detect_machine
from recipe_engine.run.machine import TorchView, torch_view
from recipe_engine.versions import LIBRARIES, package_version

# deepspeed is optional (only parallel=deepspeed needs it), so no manifest records it.
OPTIONAL = ("deepspeed",)
# bitsandbytes has its own section, with its own advice.
OWN_SECTION = ("bitsandbytes",)
# What torchrun / accelerate / deepspeed set; the planner reads WORLD_SIZE and LOCAL_RANK.
DISTRIBUTED_VARS = (
    "WORLD_SIZE",
    "RANK",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
)
# What the report goes on with where torch is not installed: no CUDA, no MPS.
NO_TORCH = TorchView(cuda_build=None, cuda=False, device_count=0, mps=False)
# A model this small fits any GPU: shows where `auto` puts a model that fits one GPU.
SMALL_MODEL_GIB = 1.0


@dataclass
class Report:
    """Sections of text plus the problems found, each with its fix."""

    sections: list[tuple[str, list[str]]] = field(default_factory=list)
    advice: list[str] = field(default_factory=list)

    def section(self, title: str, lines: list[str]) -> None:
        self.sections.append((title, lines))

    def render(self) -> str:
        out: list[str] = []
        for title, lines in self.sections:
            out += [f"== {title}", *(f"  {line}".rstrip() for line in lines), ""]
        out.append("== advice")
        unique = list(dict.fromkeys(self.advice))  # both scenarios may give the same refusal
        out += [f"  - {a}" for a in unique] or ["  nothing to fix"]
        return "\n".join(out)


def doctor_report(
    overrides: Sequence[str] = (),
    *,
    extra_dirs: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
    log: str | None = None,
) -> str:
    """The whole report as text; `env` defaults to this process's environment; `log`, the
    text of a user's failed run, gets the known failures found in it named."""
    from recipe_engine.config.compose import compose_config, to_engine_config

    env = os.environ if env is None else env
    # Composed like any other verb, so a bad override is the usual one-line error (exit 2).
    cfg = to_engine_config(compose_config(list(overrides), extra_dirs=extra_dirs))
    report = Report()
    versions = _libraries(report)
    machine = _launcher(report, env)
    _gpus(report, machine, env)
    # Planned before torch is imported (see the module docstring), printed last.
    placement = Report()
    if machine is not None:
        _placement(placement, cfg, machine, list(overrides))
    torch_info = _torch(report, machine, versions)
    _bitsandbytes(report, Here(versions, torch_info, machine, env), cfg)
    report.sections += placement.sections
    report.advice += placement.advice
    if log is not None:
        report.sections.append(("your log: known failures", diagnosis_lines(log)))
        report.advice += [f"{f.name}: {f.fix}" for f in diagnose(log)]
    return report.render()


# --------------------------------------------------------------------------- sections


def _libraries(report: Report) -> dict[str, str | None]:
    versions = {name: package_version(name) for name in (*LIBRARIES, *OPTIONAL)}
    system = f"{platform.system()} {platform.machine()}"
    lines = [f"python        {platform.python_version()} ({system})"]
    for name, version in versions.items():
        text = version or "not installed"
        if name in OPTIONAL and version is None:
            text += f" (needed only for parallel={name})"
        lines.append(f"{name:<13} {text}")
    report.section("libraries", lines)
    for name in LIBRARIES:
        if versions[name] is None and name not in OWN_SECTION:
            report.advice.append(f"{name} is not installed: run `make install` (pip install -e .).")
    return versions


def _launcher(report: Report, env: Mapping[str, str]) -> Machine | None:
    lines = [
        f"{var:<20}= {env[var]}" if var in env else f"{var:<20}(unset)" for var in DISTRIBUTED_VARS
    ]
    try:
        machine = detect_machine(env)
    except RecipeError as error:  # e.g. WORLD_SIZE=two: placement cannot be planned at all
        lines.append(f"problem: {error}")
        report.advice.append(f"{error} Fix or unset it; placement is not shown until then.")
        report.section("launcher", lines)
        return None
    lines.append(f"launcher detected: {machine.launched_by}")
    if machine.launched_by == "python":
        lines.append("  (a plain process: the engine itself decides single / model parallel / ddp)")
    elif machine.launched_by == "other":
        lines.append(
            "  WORLD_SIZE/LOCAL_RANK are set but no known launcher's marker is (torchrun sets "
            "TORCHELASTIC_RUN_ID, accelerate ACCELERATE_*, deepspeed CROSS_RANK): mpirun, a "
            "scheduler's own launch, or hand-set variables"
        )
        report.advice.append(
            "WORLD_SIZE/LOCAL_RANK are set without a known launcher: if this shell is not a "
            "distributed job, unset them; otherwise launch with `torchrun --nproc_per_node=N "
            "-m recipe_engine ...`."
        )
    else:
        lines.append(
            f"  {machine.launched_by} owns the processes: world size {machine.world_size}, "
            f"rank {machine.rank}, local rank {machine.local_rank}; no sharded device_map"
        )
    if machine.launched_by != "python" and not (env.get("MASTER_ADDR") and env.get("MASTER_PORT")):
        lines.append("  MASTER_ADDR / MASTER_PORT unset: torch.distributed cannot rendezvous")
        report.advice.append(
            "MASTER_ADDR/MASTER_PORT are unset, so the process group cannot start: launch with "
            "torchrun (it sets them) or export them."
        )
    report.section("launcher", lines)
    return machine


def _gpus(report: Report, machine: Machine | None, env: Mapping[str, str]) -> None:
    smi = shutil.which("nvidia-smi")
    lines = [f"nvidia-smi: {smi or 'not found'}"]
    gpus = machine.gpus if machine is not None else ()
    for gpu in gpus:
        memory = f"{gpu.memory_gib:.1f} GiB" if gpu.memory_gib > 0 else "memory unknown"
        lines.append(f"GPU {gpu.index}: {gpu.name}, {memory}")
    if not gpus:
        lines.append("no NVIDIA GPU listed")
    cvd = env.get("CUDA_VISIBLE_DEVICES")
    if cvd is None:
        lines.append("CUDA_VISIBLE_DEVICES (unset): every GPU is visible")
    else:
        lines.append(f"CUDA_VISIBLE_DEVICES={cvd!r} (set by the environment; gpus= may narrow it)")
        entries = [e.strip() for e in cvd.split(",") if e.strip()]
        if gpus and (not entries or entries[0].lstrip("-").isdigit() and int(entries[0]) < 0):
            report.advice.append(
                f"CUDA_VISIBLE_DEVICES={cvd!r} hides every GPU, so `auto` trains on CPU: unset it, "
                "or name the GPUs with gpus=..."
            )
    mps = machine.mps_available if machine is not None else False
    lines.append(f"Apple MPS: {'available' if mps else 'no (needs macOS on Apple Silicon)'}")
    report.section("devices", lines)


def _torch(
    report: Report, machine: Machine | None, versions: Mapping[str, str | None]
) -> TorchView:
    """What torch itself sees; imported after planning, as a real run would."""
    if versions["torch"] is None:
        return NO_TORCH
    seen = torch_view()
    cuda_build, cuda = seen.cuda_build, seen.cuda
    lines = [
        f"torch CUDA build: {cuda_build or 'none (CPU-only build)'}",
        f"torch.cuda.is_available(): {cuda}"
        + (f", {seen.device_count} device(s) visible" if cuda else ""),
        f"torch.backends.mps.is_available(): {seen.mps}",
    ]
    gpus = machine.gpus if machine is not None else ()
    if gpus and not cuda:
        if cuda_build is None:
            report.advice.append(
                "nvidia-smi lists GPUs but this torch is a CPU-only build: install a CUDA build "
                "(e.g. `make install TORCH_SPEC='torch torchvision' ` with the CUDA index URL), "
                "or keep device=cpu."
            )
        else:
            report.advice.append(
                f"nvidia-smi lists GPUs but torch (CUDA {cuda_build}) cannot use them: check that "
                "the driver supports this CUDA version (`nvidia-smi` header) and that "
                "CUDA_VISIBLE_DEVICES does not hide them."
            )
    report.section("torch", lines)
    return seen


def _bnb_files() -> tuple[Path | None, list[str], list[str]]:
    """bitsandbytes' folder, its native libraries and backend folders, without importing it."""
    spec = importlib.util.find_spec("bitsandbytes")  # finds the package, does not run it
    if spec is None or not spec.submodule_search_locations:
        return None, [], []
    folder = Path(next(iter(spec.submodule_search_locations)))
    libs = sorted(p.name for p in folder.glob("libbitsandbytes_*") if p.is_file())
    backends = sorted(
        p.name for p in (folder / "backends").glob("*") if p.is_dir() and p.name != "__pycache__"
    )
    return folder, libs, backends


def _cuda_library(libs: Sequence[str], cuda_build: str, env: Mapping[str, str]) -> str | None:
    """The CUDA library bitsandbytes would load for this torch (its own selection rule)."""
    available = {}
    for name in libs:
        # Named with a two-digit major, as bitsandbytes parses them: cuda124 = 12.4, cuda130 = 13.0.
        found = re.fullmatch(r"libbitsandbytes_cuda(\d\d)(\d+)\.\w+", name)
        if found:
            available[(int(found.group(1)), int(found.group(2)))] = name
    override = env.get("BNB_CUDA_VERSION")
    if override:
        digits = override.isdigit() and len(override) >= 3
        wanted = (int(override[:2]), int(override[2:])) if digits else None
        return available.get(wanted) if wanted else None
    major, minor = (int(x) for x in cuda_build.split(".")[:2])
    if (major, minor) in available:
        return available[(major, minor)]
    lower = [v for v in available if v[0] == major and v < (major, minor)]
    higher = [v for v in available if v[0] == major and v > (major, minor)]
    pick = max(lower) if lower else (min(higher) if higher else None)
    return available[pick] if pick else None


@dataclass(frozen=True)
class Here:
    """What the report learned of this machine before bitsandbytes' section."""

    versions: Mapping[str, str | None]
    torch_info: TorchView
    machine: Machine | None
    env: Mapping[str, str]


def _bitsandbytes(report: Report, here: Here, cfg: EngineConfig) -> None:
    versions, torch_info, machine, env = here.versions, here.torch_info, here.machine, here.env
    folder, libs, backends = _bnb_files()
    if versions["bitsandbytes"] is None or folder is None:
        report.section("bitsandbytes", ["not installed: 4-bit / 8-bit stages cannot load"])
        report.advice.append(
            "bitsandbytes is not installed, so recipes with `quantization` (r1, r3, r4) fail: "
            "pip install bitsandbytes, or drop the stage's quantization "
            "(stage.X.quantization=null)."
        )
        return
    cpu_lib = any(name.startswith("libbitsandbytes_cpu") for name in libs)
    lines = [
        f"version {versions['bitsandbytes']} at {folder}",
        f"backends shipped: {', '.join(backends) or 'none'}",
        f"CPU backend: {'yes' if cpu_lib and 'cpu' in backends else 'no'}"
        + (" (slow, but 4-bit/8-bit load and train on CPU)" if cpu_lib else ""),
    ]
    cuda_build = torch_info.cuda_build
    gpus = machine.gpus if machine is not None else ()
    if cuda_build:
        lib = _cuda_library(libs, cuda_build, env)
        lines.append(
            f"CUDA backend for torch CUDA {cuda_build}: {lib or 'NO matching library'}"
            + (" (BNB_CUDA_VERSION override)" if env.get("BNB_CUDA_VERSION") else "")
        )
        if lib is None and torch_info.cuda:
            report.advice.append(
                f"bitsandbytes {versions['bitsandbytes']} ships no library for CUDA {cuda_build}: "
                "upgrade bitsandbytes, or set BNB_CUDA_VERSION to a shipped version."
            )
    else:
        lines.append("CUDA backend: not used (torch has no CUDA); quantized stages run on CPU")
        if gpus:
            lines.append("  GPUs are present, but bitsandbytes follows torch: install a CUDA torch")
    mps = machine.mps_available if machine is not None else False
    if mps:
        lines.append(
            "MPS: the planner refuses bitsandbytes on MPS (stage.X.quantization.on_unsupported="
            "skip trains unquantized, recorded; or device=cpu)"
        )
    if cfg.device == "mps":
        report.advice.append(
            "device=mps with a quantized recipe is refused: set "
            "stage.X.quantization.on_unsupported=skip (trains unquantized) or device=cpu."
        )
    report.section("bitsandbytes", lines)


def _placement(report: Report, cfg: EngineConfig, machine: Machine, overrides: list[str]) -> None:
    """What the planner decides for a model that fits one GPU, unquantized and 4-bit, and for
    one that does not fit one GPU (when there are GPUs to size against)."""
    from recipe_engine.plan.placement import (
        MEMORY_FRACTION,
        PlacementRefused,
        describe,
        plan_placement,
    )
    from recipe_engine.plan.stage_context import placement_request  # the planner's own

    hardware = cfg.hardware
    where = f"hardware profile `{hardware.name}`" if not hardware.detect else "this machine"
    asked = [o for o in overrides if not o.startswith(("recipe=", "model=", "data="))]
    lines = [
        f"on {where}, device={cfg.device} parallel={cfg.parallel} "
        f"gpus={cfg.gpus} nproc={cfg.nproc}"
        + (f"  (overrides: {' '.join(asked)})" if asked else ""),
    ]
    gpus = machine.gpus if hardware.detect else profile_gpus(dataclasses.asdict(hardware))
    scenarios: list[tuple[str, str, float]] = [
        ("unquantized model that fits one GPU", "none", SMALL_MODEL_GIB),
        ("4-bit model that fits one GPU", "4bit", SMALL_MODEL_GIB),
    ]
    known = [g.memory_gib for g in gpus if g.memory_gib > 0]
    if known:
        big = round(1.5 * MEMORY_FRACTION * max(known), 1)
        scenarios.append((f"unquantized model of {big} GiB (larger than one GPU)", "none", big))
    for title, bits, gib in scenarios:
        quant = {"load_in_4bit": True} if bits == "4bit" else None
        request = placement_request(cfg, machine, StageConfig(quantization=quant), gib)
        lines.append("")
        lines.append(f"{title}:")
        try:
            plan = plan_placement(request)
        except PlacementRefused as refusal:
            lines.append(f"  REFUSED: {refusal}")
            if gib == SMALL_MODEL_GIB:  # the oversized case is hypothetical, not a problem here
                report.advice.append(f"placement refused: {refusal}")
            continue
        lines += [f"  {line}" for line in describe(plan)]
        if plan.quantization_fallback:
            report.advice.append(
                f"{title}: quantization falls back ({plan.quantization_fallback}); use device=cpu "
                "to keep it, or accept unquantized training."
            )
    lines += ["", "per-stage placement of a recipe: python -m recipe_engine plan recipe=NAME"]
    report.section("placement (what `auto` would choose)", lines)
