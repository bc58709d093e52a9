"""Verify an adapter parent's merge: the merged model computes what the adapter model computed.

Merges can go silently wrong (the adapter not applied, or a whole component such as the vision
tower left out of the saved folder: PEFT #2586, ms-swift #9187), and a child would then train
on a model its parent never was. Two checks, on the merged folder exactly as a child loads it:

- logits: the merged model against the un-merged adapter model (PeftModel on the same base),
  both upcast to float32 on CPU, on a fixed token batch (`probe_ids`);
- tensors: every tensor of the base is present in the merged model, and those the adapter
  does not touch (everything but LoRA-targeted weights and `modules_to_save`) are bitwise equal.

One model is in memory at a time; the adapter model is upcast to float32 for its logits, so the
check needs about twice the memory of a half-precision merge, on CPU like the merge itself.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from recipe_engine.errors import StageFailed
from recipe_engine.store.stage_records import MergeCheck

MERGE_CHECK = "merge_check.json"
PEFT_PREFIX = "base_model.model."
PROBE_SHAPE = (2, 24)  # batch x tokens: a few hundred positions, milliseconds on a tiny model

# Largest |merged - adapter| logit allowed, relative to the largest |adapter logit|. A float32
# merge only reorders float sums (W x + B A x becomes (W + B A) x): measured 4e-7 relative on
# tiny-qwen2 (user-adapter-chain). A half-precision merge also rounds W + B A to the saved dtype
# once: measured 2.4e-3 (bfloat16) and 2.7e-4 (float16) there. Each bound is ~10-250x above
# what was measured and far below what a merge that ignores the adapter leaves there (0.7
# relative; every check records the adapter's own effect, `adapter_effect`, beside it). Where an
# adapter moves the logits less than a half-precision bound, the tensor check still refuses a
# merge that changed none of the LoRA-targeted weights.
RELATIVE_TOLERANCE = {"float32": 1e-4, "bfloat16": 2e-2, "float16": 5e-3}


@dataclass(frozen=True)
class Reference:
    """The adapter model's side of the comparison, measured before the merged model loads."""

    logits: torch.Tensor
    base_logits: torch.Tensor
    checksums: dict[str, str]  # every base tensor, in the dtype it is loaded in
    lora_targets: frozenset[str]  # base weights the merge changes to W + B A
    saved_modules: frozenset[str] = frozenset()  # `modules_to_save`: replaced by trained copies

    @property
    def adapted(self) -> frozenset[str]:
        """Base tensors the merge may change; every other one must arrive bitwise equal."""
        return self.lora_targets | self.saved_modules


def probe_ids(config: Any) -> torch.Tensor:
    """A fixed token batch spread over the text vocabulary.

    Deterministic and independent of any child's data, because one merged folder serves every
    child of the parent; spread over the vocabulary so that embedding rows and the LM head
    are exercised beyond the first few ids.
    """
    text = getattr(config, "text_config", None) or config
    vocab = int(text.vocab_size)
    count = PROBE_SHAPE[0] * PROBE_SHAPE[1]
    ids = (torch.arange(count, dtype=torch.long) * 7919 + 13) % vocab  # 7919: a prime stride
    return ids.reshape(PROBE_SHAPE)


def probe_logits(model: Any, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids).logits.float()


def tensor_bytes_hash(tensor: torch.Tensor) -> str:
    """sha256 (16 hex digits) of the tensor's bytes as stored: its dtype is part of it."""
    data = tensor.detach().to("cpu").contiguous().flatten().view(torch.uint8)
    return hashlib.sha256(data.numpy().tobytes()).hexdigest()[:16]


def state_checksums(model: Any) -> dict[str, str]:
    """A hash of every tensor of the model's state dict (parameters and persistent buffers)."""
    return {name: tensor_bytes_hash(tensor) for name, tensor in model.state_dict().items()}


def adapted_names(peft_model: Any) -> tuple[frozenset[str], frozenset[str]]:
    """Base tensor names the merge may change: (LoRA-targeted weights, `modules_to_save`).

    Names are mapped from PEFT's `base_model.model.` prefix to the base model's own; a targeted
    layer's weight is `<module>.base_layer.weight` in the PEFT model and `<module>.weight` after
    the merge.
    """
    targets, saved = set(), set()
    for name, _ in peft_model.named_parameters():
        base = name.removeprefix(PEFT_PREFIX)
        if ".lora_" in base:
            targets.add(f"{base.split('.lora_')[0]}.weight")
        elif ".modules_to_save.default." in base:
            saved.add(base.replace(".modules_to_save.default.", "."))
    return frozenset(targets), frozenset(saved)


def reference(base: Any, load_adapter: Callable[[Any], Any]) -> Reference:
    """The adapter model's logits (and its base's, with the adapter disabled), in float32."""
    checksums = state_checksums(base)
    peft_model = load_adapter(base.float())
    ids = probe_ids(base.config)
    logits = probe_logits(peft_model, ids)
    with peft_model.disable_adapter():
        base_logits = probe_logits(peft_model, ids)
    return Reference(logits, base_logits, checksums, *adapted_names(peft_model))


def tensor_problems(ref: Reference, merged: dict[str, str]) -> tuple[list[str], list[str], int]:
    """(missing, changed-but-not-adapted, LoRA-targeted-and-changed) from base to merged."""
    missing = [name for name in ref.checksums if name not in merged]
    changed = [
        name
        for name, digest in ref.checksums.items()
        if name in merged and name not in ref.adapted and merged[name] != digest
    ]
    adapted = sum(
        1 for name in ref.lora_targets if name in merged and merged[name] != ref.checksums.get(name)
    )
    return missing, changed, adapted


def check_merge(ref: Reference, merged: Any, dtype: str, parent: str) -> MergeCheck:
    """Compare the merged model (loaded as a child loads it) with the reference; refuse a bad
    merge with one message naming the parent stage, what differed and the fix."""
    missing, changed, adapted = tensor_problems(ref, state_checksums(merged))
    logits = probe_logits(merged.float(), probe_ids(merged.config))
    check = MergeCheck(
        max_abs_logit_diff=float((logits - ref.logits).abs().max()),
        adapter_effect=float((ref.logits - ref.base_logits).abs().max()),
        tolerance=RELATIVE_TOLERANCE[dtype] * float(ref.logits.abs().max()),
        tensors_checked=len(ref.checksums) - len(missing),
        changed_as_expected=adapted,
        probe=f"{PROBE_SHAPE[0]}x{PROBE_SHAPE[1]} fixed token ids, float32 logits on CPU",
    )
    problem = _problem(check, missing, changed)
    if problem:
        raise StageFailed(
            f"The merge of stage `{parent}`'s adapter into its base is wrong: {problem}. "
            "The merged folder was discarded and the child was not trained; the parent's "
            "adapter is kept in the store. Check the peft/transformers versions (a merge that "
            "drops tensors or ignores the adapter is a library bug) and run again."
        )
    return check


def _problem(check: MergeCheck, missing: list[str], changed: list[str]) -> str | None:
    if missing:
        return f"{len(missing)} tensor(s) of the base are missing from it, e.g. {missing[:3]}"
    if changed:
        return (
            f"{len(changed)} tensor(s) the adapter does not touch changed (or were left out of "
            f"the saved folder and re-initialised on load), e.g. {changed[:3]}"
        )
    if check.adapter_effect > 0 and check.changed_as_expected == 0:
        return (
            "the adapter was not merged: none of the weights it targets changed, and the "
            f"logits differ from the adapter model's by {check.max_abs_logit_diff:.3g} "
            f"(tolerance {check.tolerance:.3g})"
        )
    if check.max_abs_logit_diff > check.tolerance:
        return (
            f"its logits differ from the adapter model's by {check.max_abs_logit_diff:.3g} "
            f"(tolerance {check.tolerance:.3g}; the adapter itself moves them by "
            f"{check.adapter_effect:.3g})"
        )
    return None
