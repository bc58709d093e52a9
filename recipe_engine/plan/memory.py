"""Memory estimate: how much memory a stage needs per device, and of what.

Pure arithmetic over plain data (no torch): the model's shape (read from its config),
its parameter counts per component (from the policy), the stage's policy, its trainer and
its settings. `estimate_memory` returns the peak per device as a breakdown; `plan` prints it
and placement decides fit / refuse with it (`plan.memory_fit`), and `make bench-memory`
compares it with peaks measured on real runs.

The peak is the larger of two moments of a training step:

- the start of the backward pass: weights, optimizer state (kept from earlier steps), every
  saved activation and the logits with their loss buffers all live; gradients barely begun;
- the optimizer step: weights, every gradient, the optimizer state and its temporaries;
  the activations are freed by then.

Widths are the ones the stage's precision plan decided (`plan.precision`, which the run makes
so and checks): unquantized weights, frozen or trained in full, in the stage's dtype; LoRA's in
the plan's adapter dtype; torch optimizers keep their state in the parameter's dtype, and TRL's
fused LM head never materializes the logits (see VOCAB_TILE).

Preference trainers run a row as two sequences (prompt + chosen, prompt + rejected) in one
batch of 2 x batch, images repeated: activations and LM head buffers follow that batch. DPO
uses SFT's fused LM head; its reference forward (no_grad, after the policy's) stays below the
backward's top. KTO runs one sequence a row; its KL sequences (each prompt with another row's
completion) go through no_grad forwards, the policy's before its own forward and the
reference's after, so nothing of them is saved: at most a batch as SFT's on top of the policy's
saved activations, below the backward's top (measured: `make bench-memory`, the same peak as
SFT's plus the reference copy). A LoRA policy's reference is the adapter-disabled base; a full
fine-tune's a frozen copy of the starting weights (`reference`, sharded like them) unless
`precompute_ref_log_probs` scores the rows before training. ORPO materializes the logits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from recipe_engine.capabilities import FrozenModel
from recipe_engine.plan.model_shape import ModelShape

GIB = 2**30
WIDTH = {"float32": 4, "bfloat16": 2, "float16": 2}
# NF4 / FP4: half a byte per weight plus one absmax per block of 64 weights: fp32, or with
# double quantization an int8 per block plus one fp32 per 256 blocks (QLoRA paper, 3.1).
NF4_BLOCK = 64
NF4_BYTES = 0.5 + 4 / NF4_BLOCK
NF4_DOUBLE_QUANT_BYTES = 0.5 + 1 / NF4_BLOCK + 4 / (NF4_BLOCK * 256)
# LLM.int8: one byte per weight plus an fp32 scale per output row (SCB); rows ~ hidden size.
INT8_BYTES = 1.0
# Saved activations per token of one transformer layer, in hidden-size (h) and MLP-width (I)
# units. Trained layer: norm input and output, q and k after RoPE, v, the attention output
# (6h); the gated MLP's gate, activation, up and product (4I). A frozen layer that gradients
# only pass through saves no linear inputs: the element-wise ops keep 4h + 3I.
TRAINED_H, TRAINED_I = 6, 4
PASS_H, PASS_I = 4, 3
# Liger's SwiGLU kernel saves only the gate and up projections' outputs and recomputes the
# activation and product in the backward pass (liger_kernel/ops/swiglu.py).
LIGER_I = 2
# The attention implementations that keep a flattened batch's rows apart with a dense mask over
# the whole sequence; flash kernels read the row boundaries, flex_attention a block mask (a few
# bytes per 128 x 128 block of it).
DENSE_MASK_ATTENTION = ("sdpa", "eager")
# Logits are never materialized: TRL's SFTTrainer (>= 1.16) patches the model with a fused
# LM head (trl/kernels/chunked_logprob.py) that projects at most TOKEN_TILE tokens at a time
# onto one VOCAB_TILE-wide buffer, whatever the vocabulary (trl/trainer/utils.py
# _CHUNKED_LOGPROB_CHUNK_SIZE). Its backward pass, at the top of the peak, holds that buffer
# again, fp32 gradients of the hidden states (and of lm_head's weight when it is trained) and,
# without Triton (CPU), `_backward_tile`'s element-wise arrays over the tile's used width. At
# their most: y, z, log_p, p, grad and two temporaries of the target term in fp32 plus the
# bool target mask (29 bytes per element); for a 16-bit head, after them, fp32 copies of the
# tile and of the head's weight chunk (`_cpu_head_temporaries`).
TOKEN_TILE = 4096
VOCAB_TILE = 32768
CPU_TILE_BYTES = 7 * 4 + 1
# ORPO's plain forward: logits of every position of the 2 x batch sequences, kept (its log-prob
# gather saves them), the chosen half's NLL log-softmax, and the backward's logits gradients:
# ~ORPO_LOGITS logits-sized tensors at the top (CPU live tensors, fp32, SmolLM2-135M; not yet
# measured on CUDA, where TRL's Triton log-prob kernel replaces the torch gather).
ORPO_LOGITS = 4.5
# LoRA on every linear layer at r ~16 is ~1% of the weights (the advice's LoRA alternative).
LORA_SHARE = 100
# On CUDA the peak is what PyTorch's allocator holds (`max_memory_allocated`, what the run
# measures): tensors plus cuBLAS's workspace, which torch allocates through it (32 MiB per
# handle on Hopper; measured on an H100, docs/gpu/). The CUDA context and kernels live outside
# the allocator: they are taken off the card's capacity before the fit, not added to the peak.
# CPU peaks are measured from live tensor bytes: nothing to add there.
CUDA_WORKSPACE_GIB = 32 / 1024
CUDA_CONTEXT_GIB = 0.5
# Optimizer state bytes per trainable parameter, as multiples of the parameter's width
# ("param") or fixed bytes ("bytes"); unknown names count as AdamW (the common default).
OPTIMIZER_STATES = {
    "adamw": ("param", 2),
    "adam": ("param", 2),
    "sgd": ("param", 0),  # the HF Trainer's SGD has no momentum unless optim_args says so
    "adagrad": ("param", 1),
    "rmsprop": ("param", 1),
    "lion": ("param", 1),
    "adafactor": ("param", 0),  # factored second moments: rows + columns, negligible
    "8bit": ("bytes", 2),  # bitsandbytes 8-bit AdamW: two uint8 states (+ tiny quant maps)
    "lion_8bit": ("bytes", 1),
}


@dataclass(frozen=True)
class Sharding:
    """How one replica's memory is split over devices (see `_shares`)."""

    mode: str = "single"  # single | model_parallel | ddp | fsdp | deepspeed
    devices: int = 1
    zero_stage: int | None = None
    # DeepSpeed's gradient-reduction buckets (plan.trainer_settings.ZeroSettings): allocated
    # whole, whatever the model's size.
    bucket_bytes: int = 0


@dataclass(frozen=True)
class MemoryRequest:
    """One training stage on one device, as plain data (`plan.memory_inputs` fills it)."""

    shape: ModelShape
    param_counts: Mapping[str, int]  # component -> parameters
    trained: tuple[str, ...] = ()  # components trained in full
    lora_components: tuple[str, ...] = ()
    lora_params: int = 0
    quantized_components: tuple[str, ...] = ()
    quantized_params: int = 0  # weights stored in 4 or 8 bits
    bits: str = "none"  # none | 4bit | 8bit
    double_quant: bool = False
    dtype: str = "float32"  # the stage's weights and compute dtype
    adapter_dtype: str = "float32"  # LoRA's weights (plan.precision)
    accelerated: bool = False  # cuda / mps: TRL's fused head runs its Triton kernel
    batch: int = 8
    text_tokens: int = 512  # per row, the longest a batch pads to
    images_per_row: int = 0
    gradient_checkpointing: bool = False
    optim: str = "adamw_torch_fused"
    attention: str = "sdpa"  # eager also keeps the attention matrix
    # Padding-free (TRL's, or BFD packing): a batch runs as one sequence of its rows' tokens;
    # sdpa and eager then attend through a mask over the whole sequence (plan.packing).
    padding_free: bool = False
    liger: bool = False  # Liger's kernels (plan.kernels): the MLP saves less
    sharding: Sharding = field(default_factory=Sharding)
    overhead_gib: float = 0.0
    sequences_per_row: int = 1  # 2 for preference pairs: prompt + chosen, prompt + rejected
    # Models held frozen beside the policy (its capabilities': a full fine-tune's reference
    # copy, stored as the policy's weights and sharded alike; a teacher, at the stage's dtype
    # on each device). No gradients, no optimizer state; their no-grad forwards' activations
    # are not counted.
    frozen: tuple[FrozenModel, ...] = ()
    fused_head: bool = True  # TRL's fused LM head; False: ORPO's materialized logits
    # An online kind's generation: completions generated at once on this device (0: none),
    # each of `text_tokens` (the prompt and its longest completion), keeping a KV cache.
    generated_sequences: int = 0
    stage: str = ""  # the stage's name, for the advice


@dataclass(frozen=True)
class MemoryEstimate:
    """The peak on one device, in GiB, by what holds it."""

    weights: float
    lora: float
    gradients: float
    optimizer: float
    activations: float
    logits: float
    overhead: float
    phase: str  # backward | optimizer step: the moment the peak falls in
    devices: int = 1
    buckets: float = 0.0  # DeepSpeed's gradient-reduction buckets, held through the step
    generation: float = 0.0  # an online kind's KV cache while it generates a batch
    frozen: tuple[tuple[str, float], ...] = ()  # each frozen model beside the policy, by label

    def of(self, label: str) -> float:
        """A frozen model's share (0: none of that label)."""
        return sum(value for name, value in self.frozen if name == label)

    @property
    def peak(self) -> float:
        return sum(value for _, value in self._named())

    def parts(self) -> list[tuple[str, float]]:
        return [(n, v) for n, v in self._named() if v > 0]

    def _named(self) -> list[tuple[str, float]]:
        return [
            ("weights", self.weights),
            *self.frozen,
            ("lora", self.lora),
            ("gradients", self.gradients),
            ("optimizer", self.optimizer),
            ("activations", self.activations),
            ("logits", self.logits),
            ("KV cache", self.generation),
            ("DeepSpeed buckets", self.buckets),
            ("overhead", self.overhead),
        ]


# --------------------------------------------------------------------------- estimate


def estimate_memory(req: MemoryRequest) -> MemoryEstimate:
    """The peak per device of one training step, by what holds it."""
    weights = _weights(req)
    lora = req.lora_params * _trainable_width(req, lora=True)
    grads = _trainable_params(req) * _trainable_width(req) + lora
    optimizer = _optimizer(req, _trainable_params(req), lora)
    sequences = replace(req, batch=req.batch * req.sequences_per_row)  # the batch run
    activations = _activations(sequences)
    logits = _logits(sequences)
    full = {"weights": weights, "lora": lora, "gradients": grads, "optimizer": optimizer}
    shared = _shares(req.sharding, full)
    frozen = tuple((model.label, _frozen(req, model)) for model in req.frozen)
    model_parallel = req.sharding.mode == "model_parallel"
    act_share = activations / req.sharding.devices if model_parallel else activations
    backward = act_share + logits  # logits live on the device holding lm_head
    step = shared["gradients"] + _step_temporaries(req, shared["optimizer"])
    generation = _kv_cache(req)
    phase = max(
        (("backward", backward), ("optimizer step", step), ("generation", generation)),
        key=lambda moment: moment[1],
    )[0]
    return MemoryEstimate(
        weights=shared["weights"] / GIB,
        lora=shared["lora"] / GIB,
        gradients=(step if phase == "optimizer step" else 0.0) / GIB,
        optimizer=shared["optimizer"] / GIB,
        activations=(act_share if phase == "backward" else 0.0) / GIB,
        logits=(logits if phase == "backward" else 0.0) / GIB,
        generation=(generation if phase == "generation" else 0.0) / GIB,
        overhead=req.overhead_gib,
        phase=phase,
        devices=req.sharding.devices,
        buckets=req.sharding.bucket_bytes / GIB,
        frozen=frozen,
    )


def _kv_cache(req: MemoryRequest) -> float:
    """An online kind's generation batch: every completion keeps its keys and values for the
    prompt and every generated token, in every layer, at the compute width (no gradients)."""
    per_token = req.shape.num_layers * req.shape.cached_per_token_layer * WIDTH[req.dtype]
    return float(req.generated_sequences * req.text_tokens * per_token)


def _frozen(req: MemoryRequest, model: FrozenModel) -> float:
    """A frozen model in GiB: a copy of the starting weights is stored as the stage loads them
    (its dtype, quantized weights as quantized) and sharded as the policy's weights are (TRL
    prepares the reference like the policy); another model is its parameters at the stage's
    dtype, whole on each device."""
    if not model.same_storage:
        return model.params * WIDTH[req.dtype] / GIB
    shared = "weights" in _sharded(req.sharding)
    return (
        _stored(req, WIDTH[req.dtype], copies=False) / (req.sharding.devices if shared else 1) / GIB
    )


def _weights(req: MemoryRequest) -> float:
    """Every stored weight at its width; trained components under LoRA are copied
    (PEFT's modules_to_save) and the copy is trainable."""
    return _stored(req, WIDTH[req.dtype], copies=True)


def _stored(req: MemoryRequest, plain_width: int, copies: bool) -> float:
    total = 0.0
    for component, count in req.param_counts.items():
        quantized = 0
        if component in req.quantized_components:
            quantized = _quantized_share(req, component, count)
        total += quantized * _quant_bytes(req) + (count - quantized) * plain_width
        if copies and component in req.trained and req.lora_components:
            total += count * _trainable_width(req)
    return total


def _quantized_share(req: MemoryRequest, component: str, count: int) -> int:
    """The quantized weights of one component: the planned total split by component size."""
    sizes = {c: req.param_counts.get(c, 0) for c in req.quantized_components}
    total = sum(sizes.values()) or 1
    return min(count, round(req.quantized_params * sizes[component] / total))


def _quant_bytes(req: MemoryRequest) -> float:
    if req.bits == "4bit":
        return NF4_DOUBLE_QUANT_BYTES if req.double_quant else NF4_BYTES
    if req.bits == "8bit":
        return INT8_BYTES + 4 / req.shape.hidden_size
    return WIDTH[req.dtype]


def _trainable_params(req: MemoryRequest) -> int:
    """Parameters trained in full (LoRA's own counted apart)."""
    return sum(req.param_counts.get(c, 0) for c in req.trained)


def _trainable_width(req: MemoryRequest, lora: bool = False) -> int:
    """A trained weight's width: LoRA's in the plan's adapter dtype, the rest in the stage's."""
    return WIDTH[req.adapter_dtype if lora else req.dtype]


def _optimizer(req: MemoryRequest, full_params: int, lora_params: int) -> float:
    kind, amount = optimizer_states(req.optim)
    if kind == "bytes":
        return (full_params + lora_params) * amount
    return amount * (
        full_params * _trainable_width(req) + lora_params * _trainable_width(req, True)
    )


def optimizer_states(optim: str) -> tuple[str, int]:
    """(unit, amount) of state per trainable parameter for an HF `optim` name."""
    name = optim.lower()
    if "lion" in name and "8bit" in name:
        return OPTIMIZER_STATES["lion_8bit"]
    if "8bit" in name:
        return OPTIMIZER_STATES["8bit"]
    for key in ("sgd", "adagrad", "rmsprop", "lion", "adafactor", "adamw", "adam"):
        if key in name:
            return OPTIMIZER_STATES[key]
    return OPTIMIZER_STATES["adamw"]


def _step_temporaries(req: MemoryRequest, optimizer_bytes: float) -> float:
    """torch's foreach AdamW allocates a state-sized temporary; fused and 8-bit ones do not."""
    name = req.optim.lower()
    if "fused" in name or "8bit" in name or optimizer_bytes == 0:
        return 0.0
    return optimizer_bytes / 2


def _shares(sharding: Sharding, full: Mapping[str, float]) -> dict[str, float]:
    """Per-device share of weights, LoRA, gradients and optimizer state.

    model_parallel: a balanced device_map spreads the layers (and with them everything
    else) evenly; ddp: a full replica each; fsdp: all three sharded; DeepSpeed ZeRO-1
    shards the optimizer state, ZeRO-2 also the gradients, ZeRO-3 also the weights.
    """
    n, sharded = max(sharding.devices, 1), _sharded(sharding)
    return {k: v / n if k in sharded else v for k, v in full.items()}


def _sharded(sharding: Sharding) -> set[str]:
    """What a mode splits over its devices (the rest is whole on each)."""
    if sharding.mode in ("model_parallel", "fsdp"):
        return {"weights", "lora", "gradients", "optimizer"}
    if sharding.mode == "deepspeed":
        stage = 2 if sharding.zero_stage is None else sharding.zero_stage
        return {
            0: set(),
            1: {"optimizer"},
            2: {"optimizer", "gradients"},
            3: {"optimizer", "gradients", "weights", "lora"},
        }[stage]
    return set()


def _tokens(req: MemoryRequest) -> int:
    vision = req.shape.vision
    image = req.images_per_row * vision.tokens_per_image if vision else 0
    return req.batch * (req.text_tokens + image)


def _activations(req: MemoryRequest) -> float:
    """Saved activations of the vision tower and the language model, plus the batch."""
    width = WIDTH[req.dtype]
    flows = _gradient_flows(req)
    total = 0.0
    vision = req.shape.vision
    if vision and req.images_per_row:
        vision_tokens = req.batch * req.images_per_row * vision.patches_per_image
        if flows.vision_tower:
            tower = Stack(
                vision_tokens,
                vision.hidden_size,
                vision.intermediate_size,
                vision.num_layers,
                heads=1,
                trained=True,
            )
            total += _stack(req, tower)
        pixels = req.batch * req.images_per_row * vision.pixel_values_per_image
        total += pixels * 4  # pixel_values arrive in fp32
    if flows.language_model != "none":
        shape = req.shape
        language = Stack(
            _tokens(req),
            shape.hidden_size,
            shape.intermediate_size,
            shape.num_layers,
            heads=shape.num_heads,
            trained=flows.language_model == "trained",
        )
        total += _stack(req, language)
        total += 2 * _tokens(req) * shape.hidden_size * width  # final norm, lm_head input
        if req.padding_free and req.attention in DENSE_MASK_ATTENTION:
            total += _packed_rows_mask(req, width)
    return total


def _packed_rows_mask(req: MemoryRequest, width: int) -> float:
    """The mask keeping a flattened batch's rows apart (sdpa and eager; flash reads the row
    boundaries instead): transformers builds it boolean, once a step, over the whole sequence.
    Eager adds it in the activations' dtype; sdpa turns it into an additive mask in the query's
    dtype in every layer and keeps that for the layer's backward (torch's saved tensors): 60 GiB
    for SmolLM2's 30 layers at 32,768 packed tokens, and with them the estimate met an H200's
    measured peak within 1%."""
    tokens, layers = _tokens(req), req.shape.num_layers
    if req.attention == "eager":
        return tokens**2 * width
    kept = 1 if req.gradient_checkpointing else layers  # recomputed one layer at a time
    return tokens**2 * (1 + kept * width)


@dataclass(frozen=True)
class GradientFlow:
    """Which stacks keep activations: a trained one; a frozen one only when something
    trained sits before it (gradients pass through on their way back)."""

    vision_tower: bool  # trained: its activations are kept
    language_model: str  # "trained" | "pass" (gradients only pass through) | "none"


def _gradient_flows(req: MemoryRequest) -> GradientFlow:
    trained = set(req.trained) | set(req.lora_components)
    upstream = bool(trained & {"vision_tower", "projector", "embeddings"})
    if "language_model" in trained:
        language = "trained"
    elif upstream:
        language = "pass"
    else:
        language = "none"
    return GradientFlow(vision_tower="vision_tower" in trained, language_model=language)


@dataclass(frozen=True)
class Stack:
    """A stack of transformer layers as its saved activations see it."""

    tokens: int
    hidden: int
    mlp: int
    layers: int
    heads: int
    trained: bool  # else gradients only pass through it


def _stack(req: MemoryRequest, stack: Stack) -> float:
    """A stack of layers: every layer's saved activations, or under gradient checkpointing
    each layer's input plus one layer recomputed at a time."""
    width, tokens = WIDTH[req.dtype], stack.tokens
    h, i = (TRAINED_H, TRAINED_I) if stack.trained else (PASS_H, PASS_I)
    per_layer = tokens * (h * stack.hidden + (LIGER_I if req.liger else i) * stack.mlp) * width
    if req.attention == "eager":  # the softmax matrix (fp32 upcast) and its output
        sequences = 1 if req.padding_free else max(req.batch, 1)
        seq = tokens // sequences
        per_layer += sequences * stack.heads * seq * seq * (4 + width)
    if req.gradient_checkpointing:
        return stack.layers * tokens * stack.hidden * width + per_layer
    return stack.layers * per_layer


def _cpu_head_temporaries(req: MemoryRequest, rows: int, width: int) -> float:
    """What TRL's fused head holds on the CPU besides its tile, at the larger of two moments of
    its backward over a tile: `_backward_tile`'s element-wise arrays (CPU_TILE_BYTES an
    element), then, freed of those, its fp32 accumulation of a 16-bit head (`_addmm_fp32`:
    `addmm_(tile.float(), w_chunk.float())`), which copies the tile and the head's chunk of
    weights to fp32 (measured: 112 MiB of a (32768, 896) float32 chunk at the peak of a
    Qwen2.5-0.5B-wide LoRA stage in bf16)."""
    columns = min(req.shape.vocab_size, VOCAB_TILE)
    fold = CPU_TILE_BYTES * rows * columns
    accumulate = 4 * (rows + req.shape.hidden_size) * columns if width != 4 else 0
    return max(fold, accumulate)


def _logits(req: MemoryRequest) -> float:
    """TRL's fused LM head at the start of the backward pass (see VOCAB_TILE), or ORPO's
    materialized logits (see ORPO_LOGITS)."""
    tokens, shape = _tokens(req), req.shape
    if not req.fused_head:  # and a trained lm_head's gradient, the backward's first
        head = shape.vocab_size * shape.hidden_size * _trainable_width(req)
        head = head if "lm_head" in req.trained else 0
        return ORPO_LOGITS * tokens * shape.vocab_size * WIDTH[req.dtype] + head
    rows, width = min(tokens, TOKEN_TILE), WIDTH[req.dtype]
    tile = rows * VOCAB_TILE * width
    element_wise = 0 if req.accelerated else _cpu_head_temporaries(req, rows, width)
    grad_hidden = tokens * shape.hidden_size * 4
    grad_weight = shape.vocab_size * shape.hidden_size * 4 if "lm_head" in req.trained else 0
    return tile + element_wise + grad_hidden + grad_weight
