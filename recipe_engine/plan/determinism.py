"""Whether a stage's weights are repeatable, and at what cost: decided before anything trains.

A stage key names a result only if two trainings of it give the same weights. What the engine
controls everywhere: every random draw is seeded before it is made (LoRA and head
initialisation right before the policies, dropout and data order by the Trainer's `seed` /
`data_seed`). What the device decides:

- CPU: torch's CPU kernels are deterministic for a given instruction set and thread count
  (this project's tests train each stage kind twice and compare weight hashes). Another CPU
  or thread count may round differently: the manifest's platform says which it was.
- CUDA: cuBLAS and the atomic-add kernels (scatter, index_add, embedding backward) vary run to
  run unless `deterministic=true` turns on the Trainer's `full_determinism`
  (`torch.use_deterministic_algorithms`, `CUBLAS_WORKSPACE_CONFIG`, cuDNN deterministic,
  `CUDA_LAUNCH_BLOCKING=1`), which costs speed. bitsandbytes' 4/8-bit CUDA kernels are not
  governed by torch's switch. MPS has no deterministic mode.

Pure data in and out (no torch): `plan` prints it and the manifest records it.
"""

from __future__ import annotations

from dataclasses import dataclass

# The environment and switches `deterministic=true` sets, through the Trainer's
# `full_determinism` (transformers.trainer_utils.enable_full_determinism).
CUDA_SWITCHES = (
    "torch.use_deterministic_algorithms(True)",
    "CUBLAS_WORKSPACE_CONFIG=:16:8",
    "cudnn.deterministic",
    "CUDA_LAUNCH_BLOCKING=1",
)
CUDA_COST = (
    "slower: kernel launches are serialised and atomic-add kernels replaced; an op with no "
    "deterministic CUDA kernel stops the stage with torch's error naming it"
)
CPU_COST = (
    "slower (torch's deterministic CPU kernels), and nothing gained: CPU stages repeat bitwise "
    "without it"
)
BNB_CUDA = "bitsandbytes' 4/8-bit CUDA kernels (outside torch's deterministic switch)"
CPU_SCOPE = "bitwise on this CPU's instruction set and thread count (the manifest's platform)"


@dataclass(frozen=True)
class Determinism:
    """What a stage's weights can be trusted to repeat, and why."""

    repeatable: bool  # two trainings of this key on this platform give identical weights
    deterministic_kernels: bool  # `deterministic=true`: the Trainer's full_determinism
    scope: str  # in which sense (same platform), or why not
    not_covered: tuple[str, ...] = ()  # libraries whose kernels no switch makes deterministic
    cost: str = ""  # what the switch costs, where it costs anything

    def describe(self) -> str:
        """One line for `plan`."""
        head = "repeatable" if self.repeatable else "not repeatable"
        parts = [f"{head}: {self.scope}"]
        if self.not_covered:
            parts.append("not covered: " + "; ".join(self.not_covered))
        if self.cost:
            parts.append(f"cost: {self.cost}")
        return "; ".join(parts)


def decide_determinism(device: str, *, deterministic: bool, quantized: bool) -> Determinism:
    """The determinism of a stage placed on `device` (cpu | cuda | mps)."""
    if device == "cpu":
        # Measured (README, "Caching and reruns"): a QLoRA stage about 1.6x slower on 2 cores.
        cost = CPU_COST if deterministic else ""
        return Determinism(True, deterministic, CPU_SCOPE, cost=cost)
    if device == "mps":
        return Determinism(False, deterministic, "MPS has no deterministic mode in torch")
    if not deterministic:
        return Determinism(
            False,
            False,
            "cuBLAS and atomic-add CUDA kernels vary run to run; deterministic=true makes "
            "torch's kernels deterministic",
        )
    not_covered = (BNB_CUDA,) if quantized else ()
    scope = "torch's deterministic CUDA kernels (" + ", ".join(CUDA_SWITCHES) + ")"
    return Determinism(not not_covered, True, scope, not_covered, CUDA_COST)
