"""The product as users combine it: every data format x model kind x stage family trains,
evaluates and compares through the command line, and a two-stage recipe runs on every
built-in VLM family.

Data files are written here in each format, as a user would bring them (their own column
names, images beside the file); no trainer flag is set by hand. A step or two per stage is
enough to prove the path: learning is shown by `make run` and the SmolLM2 test.
"""

from __future__ import annotations

import csv
import gc
import json
import math
from pathlib import Path

import pytest
from machines import CPU_ONLY
from PIL import Image, ImageDraw

from recipe_engine.cli.main import main
from recipe_engine.config.compose import compose_config
from recipe_engine.run.planning import plan_from_config

pytestmark = pytest.mark.usefixtures("judge_kept_between_runs")

ROOT = Path(__file__).resolve().parents[2]

QUICK = ["data.max_samples=12", "data.eval_fraction=0.25", "eval.max_samples=3"]
QUICK += ["eval.max_new_tokens=4"]
COLOURS = {"red": (220, 40, 40), "green": (40, 180, 60), "blue": (50, 80, 230)}
QUESTION = "What colour is the square?"
ASK = QUESTION


@pytest.fixture(autouse=True)
def _earlier_tests_frozen() -> None:
    """As tests/conftest.py freezes the heap before each file, here before each test too:
    every run here is in pytest's process, and each one's collections and memory tracker
    would walk what the earlier runs of this file left alive (measured with the freeze per
    test: a third of this file's CPU seconds). A run's own objects are never frozen."""
    gc.collect()  # earlier tests' garbage is freed here, not kept frozen
    gc.freeze()


def _pairs() -> list[tuple[str, str]]:
    return [(f"What is {a} + {b}?", str(a + b)) for a in range(4) for b in range(4)]


def _pictures(folder: Path) -> list[tuple[str, str]]:
    """(relative image path, colour name) for 16 small squares drawn here."""
    (folder / "pictures").mkdir(exist_ok=True)
    out = []
    for i in range(16):
        colour = list(COLOURS)[i % len(COLOURS)]
        image = Image.new("RGB", (56, 56), (20, 20, 20))
        ImageDraw.Draw(image).rectangle((8 + i % 4, 8, 44, 44), fill=COLOURS[colour])
        image.save(folder / "pictures" / f"{i:02d}.png")
        out.append((f"pictures/{i:02d}.png", colour))
    return out


def _jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def messages_file(folder: Path) -> tuple[Path, list[str]]:
    rows = [
        {"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}
        for q, a in _pairs()
    ]
    return _jsonl(folder / "chat.jsonl", rows), []


def prompt_completion_file(folder: Path) -> tuple[Path, list[str]]:
    path = folder / "pairs.csv"
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["prompt", "completion"])
        writer.writerows(_pairs())
    return path, []


def alpaca_file(folder: Path) -> tuple[Path, list[str]]:
    rows = [{"instruction": "Add the numbers.", "input": q, "output": a} for q, a in _pairs()]
    path = folder / "alpaca.json"
    path.write_text(json.dumps(rows))
    return path, []


def sharegpt_file(folder: Path) -> tuple[Path, list[str]]:
    rows = [
        {"conversations": [{"from": "human", "value": q}, {"from": "gpt", "value": a}]}
        for q, a in _pairs()
    ]
    return _jsonl(folder / "sharegpt.jsonl", rows), []


def vlm_messages_file(folder: Path) -> tuple[Path, list[str]]:
    rows = [
        {
            "images": [image],
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image"}, {"type": "text", "text": QUESTION}],
                },
                {"role": "assistant", "content": [{"type": "text", "text": colour}]},
            ],
        }
        for image, colour in _pictures(folder)
    ]
    return _jsonl(folder / "vlm.jsonl", rows), []


def image_question_answer_parquet(folder: Path) -> tuple[Path, list[str]]:
    """A user's own column names: an image path plus question / answer columns."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    pictures = _pictures(folder)
    table = pa.table(
        {
            "img_path": [image for image, _ in pictures],
            "question": [QUESTION] * len(pictures),
            "answer": [colour for _, colour in pictures],
        }
    )
    path = folder / "vqa.parquet"
    pq.write_table(table, path)
    mapping = ["images=img_path", "prompt=question", "completion=answer"]
    return path, [f"data.columns.{m}" for m in mapping]


def sharegpt_images_file(folder: Path) -> tuple[Path, list[str]]:
    rows = [
        {
            "images": [image],
            "conversations": [{"from": "human", "value": QUESTION}, {"from": "gpt", "value": c}],
        }
        for image, c in _pictures(folder)
    ]
    return _jsonl(folder / "sharegpt_vlm.jsonl", rows), []


TEXT_FORMATS = {
    "messages": messages_file,
    "prompt_completion": prompt_completion_file,
    "alpaca": alpaca_file,
    "sharegpt": sharegpt_file,
}
VLM_FORMATS = {
    "vlm_messages": vlm_messages_file,
    "image_path_question_answer": image_question_answer_parquet,
    "sharegpt_images": sharegpt_images_file,
}
# Stage family -> (recipe, its stage, overrides), per model kind.
CAUSAL_LM_FAMILIES = {
    "full": ("text-lora", "llm", ["stage.llm.lora=null"]),
    "lora": ("text-lora", "llm", []),
    "qlora": ("text-lora", "llm", ["++stage.llm.quantization.load_in_4bit=true"]),
}
VLM_FAMILIES = {
    "full": ("r2-vision-only", "vision", []),
    "lora": ("r4-joint", "joint", ["stage.joint.quantization=null"]),
    "qlora": ("r1-llm-only", "llm", []),
}
MATRIX = [
    pytest.param("tiny-qwen2", fmt, family, id=f"causal_lm-{fmt}-{family}")
    for fmt in TEXT_FORMATS
    for family in CAUSAL_LM_FAMILIES
] + [
    pytest.param("tiny-qwen2-vl", fmt, family, id=f"vlm-{fmt}-{family}")
    for fmt in VLM_FORMATS
    for family in VLM_FAMILIES
]


def run_engine(output_root: Path, *overrides: str, flags: tuple[str, ...] = ()) -> Path:
    """One `python -m recipe_engine ...` run in this process; returns its run folder."""
    assert main([*flags, f"output_root={output_root}", *QUICK, *overrides]) == 0
    runs = [run for recipe in (output_root / "runs").iterdir() for run in recipe.iterdir()]
    return max(runs, key=lambda run: run.stat().st_mtime)


def assert_trained_evaluated_compared(run_dir: Path, stages: list[str]) -> None:
    summary = json.loads((run_dir / "summary.json").read_text())
    rows = {row["stage"]: row for row in summary["stages"]}
    assert list(rows) == stages
    for row in rows.values():
        assert row["status"] == "trained" and row["steps"] >= 1, row
        assert row["eval"].startswith("acc "), row  # held-out exact match was computed
    metrics = json.loads((run_dir / "compare_metrics.json").read_text())
    assert set(metrics) == {"base", *stages}
    for scores in metrics.values():
        assert scores["n"] >= 1 and math.isfinite(scores["exact_match"]), scores
    assert (run_dir / "compare.md").is_file()


def run_family(
    tmp_path: Path, model: str, family: str, data: tuple[Path, list[str]], trainer: str = "sft"
) -> tuple[Path, str]:
    """One step of the family's recipe on `data` (a file and its column mapping) with
    `trainer`; the run folder and the stage's name."""
    kind_families = CAUSAL_LM_FAMILIES if model == "tiny-qwen2" else VLM_FAMILIES
    recipe, stage, family_overrides = kind_families[family]
    path, mapping = data
    run_dir = run_engine(
        tmp_path / "out",
        f"recipe={recipe}",
        f"model={model}",
        "data.source=local",
        f"data.path={path}",
        *mapping,
        f"stage.{stage}.trainer={trainer}",
        f"stage.{stage}.train.max_steps=1",
        *family_overrides,
    )
    return run_dir, stage


@pytest.mark.parametrize(("model", "fmt", "family"), MATRIX)
def test_every_format_trains_evaluates_and_compares(model, fmt, family, tmp_path):
    write = {**TEXT_FORMATS, **VLM_FORMATS}[fmt]
    run_dir, stage = run_family(tmp_path, model, family, write(tmp_path))
    assert_trained_evaluated_compared(run_dir, [stage])


@pytest.mark.parametrize(
    "model", ["tiny-qwen2-vl", "tiny-qwen2.5-vl", "tiny-llava", "tiny-idefics3"]
)
def test_the_two_stage_recipe_runs_on_every_built_in_vlm_family(model, tmp_path):
    path, _ = vlm_messages_file(tmp_path)
    run_dir = run_engine(
        tmp_path / "out",
        "recipe=r3-two-stage",
        f"model={model}",
        "data.source=local",
        f"data.path={path}",
        "stage.vision.train.max_steps=1",
        "stage.llm.train.max_steps=1",
    )
    assert_trained_evaluated_compared(run_dir, ["vision", "llm"])


USER_RECIPES = str(Path(__file__).resolve().parents[1] / "fixtures" / "recipes")


@pytest.mark.parametrize("recipe", ["user-idefics3-declared", "user-idefics3-patterns"])
def test_idefics3_trains_two_stages_from_declared_components_or_regexes_alone(recipe, tmp_path):
    """Components declared in the user's model entry, or no map at all (freeze.patterns and
    target_modules only): both stages train, hand off, evaluate and compare."""
    from recipe_engine.store.records import Manifest

    run_dir = run_engine(
        tmp_path / "out",
        f"recipe={recipe}",
        "stage.vision.train.max_steps=2",
        "stage.llm.train.max_steps=2",
        flags=("--config-dir", USER_RECIPES),
    )
    assert_trained_evaluated_compared(run_dir, ["vision", "llm"])
    llm = Manifest.load(max((tmp_path / "out" / "store").glob("*/COMPLETE"), key=_mtime).parent)
    assert llm.stage == "llm" and llm.handoff.counts.checked > 0
    assert llm.bits == "4bit"


def _mtime(path: Path) -> float:
    return path.stat().st_mtime


# --------------------------------------------------------------------------- preference stages


def preference_file(folder: Path) -> tuple[Path, list[str]]:
    """Text pairs in a user's own column names: question, good, bad."""
    rows = [{"question": q, "good": a, "bad": str(int(a) + 1)} for q, a in _pairs()]
    mapping = ["prompt=question", "chosen=good", "rejected=bad"]
    return _jsonl(folder / "pairs.jsonl", rows), [f"data.columns.{m}" for m in mapping]


def vlm_preference_file(folder: Path) -> tuple[Path, list[str]]:
    wrong = {"red": "green", "green": "blue", "blue": "red"}
    rows = [
        {"images": [image], "prompt": QUESTION, "chosen": colour, "rejected": wrong[colour]}
        for image, colour in _pictures(folder)
    ]
    return _jsonl(folder / "vlm_pairs.jsonl", rows), []


PREFERENCE_MATRIX = [
    pytest.param("tiny-qwen2", trainer, family, id=f"causal_lm-{trainer}-{family}")
    for trainer in ("dpo", "orpo")
    for family in CAUSAL_LM_FAMILIES
] + [
    pytest.param("tiny-qwen2-vl", "dpo", family, id=f"vlm-dpo-{family}") for family in VLM_FAMILIES
]


@pytest.mark.parametrize(("model", "trainer", "family"), PREFERENCE_MATRIX)
def test_every_preference_trainer_trains_evaluates_and_compares(model, trainer, family, tmp_path):
    """DPO (text and VLM) and ORPO (text: TRL's is text-only) on each policy family, from a
    user's pair file; the run's comparison judges every model on the held-out pairs."""
    write = preference_file if model == "tiny-qwen2" else vlm_preference_file
    run_dir, stage = run_family(tmp_path, model, family, write(tmp_path), trainer)
    assert_trained_evaluated_compared(run_dir, [stage])
    summary = json.loads((run_dir / "summary.json").read_text())
    [row] = summary["stages"]
    if trainer == "dpo":
        assert "reward acc" in row["eval"], row  # TRL's reward accuracy, held out
    metrics = json.loads((run_dir / "compare_metrics.json").read_text())
    for name, scores in metrics.items():
        judged = scores["preference"]
        assert judged["pairs"] >= 1 and 0.0 <= judged["pair_accuracy"] <= 1.0, name
        assert 0.0 <= judged["win_rate"] <= 1.0
    assert "reward_accuracy" in metrics[stage]["preference"]  # against the base
    # A LoRA policy's reference is the adapter-disabled base: TRL's "ref" adapter copy is
    # dropped, so none is saved with the stage.
    assert not list((tmp_path / "out").glob("store/*/ref")), "a reference adapter was saved"


# --------------------------------------------------------------------------- KTO


def feedback_file(folder: Path) -> tuple[Path, list[str]]:
    """TRL's unpaired rows (prompt / completion / label) as JSON lines: the sum in a sentence
    labelled true, one off labelled false, in turn."""
    rows = [
        {
            "prompt": q,
            "completion": f"It is {a}." if i % 2 == 0 else f"It is {int(a) + 1}.",
            "label": i % 2 == 0,
        }
        for i, (q, a) in enumerate(_pairs())
    ]
    return _jsonl(folder / "feedback.jsonl", rows), []


def vlm_feedback_file(folder: Path) -> tuple[Path, list[str]]:
    wrong = {"red": "green", "green": "blue", "blue": "red"}
    rows = [
        {
            "images": [image],
            "prompt": QUESTION,
            "completion": colour if i % 2 == 0 else wrong[colour],
            "label": i % 2 == 0,
        }
        for i, (image, colour) in enumerate(_pictures(folder))
    ]
    return _jsonl(folder / "vlm_feedback.jsonl", rows), []


KTO_MATRIX = [
    pytest.param("tiny-qwen2", family, id=f"causal_lm-kto-{family}")
    for family in CAUSAL_LM_FAMILIES
] + [pytest.param("tiny-qwen2-vl", "qlora", id="vlm-kto-qlora")]


@pytest.mark.parametrize(("model", "family"), KTO_MATRIX)
def test_kto_trains_evaluates_and_compares_on_a_users_unpaired_rows(model, family, tmp_path):
    """KTO (text, and TRL's vision rows on the tiny Qwen2-VL) on each policy family, from a
    user's prompt / completion / label file: the stage records TRL's held-out rewards, and the
    run's comparison judges every model on the held-out rows against the base."""
    write = feedback_file if model == "tiny-qwen2" else vlm_feedback_file
    run_dir, stage = run_family(tmp_path, model, family, write(tmp_path), "kto")
    assert_trained_evaluated_compared(run_dir, [stage])
    summary = json.loads((run_dir / "summary.json").read_text())
    [row] = summary["stages"]
    assert "reward margin" in row["eval"] and "kto loss" in row["eval"], row
    metrics = json.loads((run_dir / "compare_metrics.json").read_text())
    for name, scores in metrics.items():
        judged = scores["preference"]
        assert judged["judged"] == "unpaired" and judged["rows"] == 3, name
        assert 0.0 <= judged.get("desirable_match", 0.0) <= 1.0
    assert 0.0 <= metrics[stage]["preference"]["label_accuracy"] <= 1.0  # against the base
    assert "label_accuracy" not in metrics["base"]["preference"]
    assert not list((tmp_path / "out").glob("store/*/ref")), "a reference adapter was saved"


def test_a_full_kto_stage_with_precomputed_reference_log_probs_is_evaluated(tmp_path):
    """A full fine-tune keeps no reference once its log-probs are precomputed, and TRL refuses
    held-out rows given after training: the stage evaluates the rows prepared with it."""
    path, _ = feedback_file(tmp_path)
    run_dir = run_engine(
        tmp_path / "out",
        "recipe=text-lora",
        "data.source=local",
        f"data.path={path}",
        "stage.llm.trainer=kto",
        "stage.llm.train.max_steps=1",
        "stage.llm.lora=null",
        "++stage.llm.train.precompute_ref_log_probs=true",
    )
    assert_trained_evaluated_compared(run_dir, ["llm"])
    [row] = json.loads((run_dir / "summary.json").read_text())["stages"]
    assert "reward margin" in row["eval"] and "evaluation failed" not in row["status"], row


# --------------------------------------------------------------------------- bfloat16

# Every shipped recipe and its stages: the VLM recipes run on each built-in VLM layout, the
# text recipes on each built-in text layout (SmolLM2's recipe on the tiny Llama, its layout).
VLM_RECIPES = {
    "r1-llm-only": ["llm"],
    "r2-vision-only": ["vision"],
    "r3-two-stage": ["vision", "llm"],
    "r4-joint": ["joint"],
    "r5-sft-dpo": ["vision", "llm", "dpo"],
    "r9-vlm-grpo": ["vision", "llm", "grpo"],
}
TEXT_RECIPES = {
    "text-lora": ["llm"],
    "r5-sft-dpo-text": ["llm", "dpo"],
    "r5-sft-dpo-smollm2": ["llm", "dpo"],
    "r6-sft-kto-text": ["llm", "kto"],
    "r7-sft-grpo": ["llm", "grpo"],
}
# The distillation recipe's teacher is a larger model with tiny-qwen2's tokenizer: its student
# is tiny-qwen2 (another family's tokenizer is refused with the teacher's).
SAME_TOKENIZER_RECIPES = {"r8-distill-text": ["llm", "teacher", "distill"]}
# What a recipe needs on the 12 rows these runs read: a generation batch of at most 12 prompts.
ON_FEW_ROWS = {"r8-distill-text": ["stage.distill.train.per_device_train_batch_size=4"]}
LAYOUTS = {
    **{vlm: VLM_RECIPES for vlm in ("tiny-qwen2-vl", "tiny-qwen2.5-vl", "tiny-llava")},
    "tiny-idefics3": VLM_RECIPES,
    "tiny-qwen2": {**TEXT_RECIPES, **SAME_TOKENIZER_RECIPES},
    "tiny-llama": TEXT_RECIPES,
}
# The bfloat16 runs: every recipe once, on a layout it runs on, and every layout, rather than
# every pair (35 runs): r3's QLoRA stage with a frozen vision tower (the stage whose tower was
# upcast to float32, FIELD-NOTES.md section 10) on each VLM layout, the other recipes spread over
# them (a recipe's stages that r3 trained are reused from the layout's store, as a user's are;
# a run whose stages are all reused compares nothing, so none comes after the run that trained
# them all).
# Float32 runs every recipe elsewhere (tests/run/test_recipe.py, the matrices above).
BFLOAT16_RUNS = {
    "tiny-qwen2-vl": ["r3-two-stage", "r1-llm-only", "r9-vlm-grpo"],
    "tiny-qwen2.5-vl": ["r2-vision-only", "r3-two-stage"],  # r2 first: its stage is r3's first
    "tiny-llava": ["r3-two-stage", "r4-joint"],
    "tiny-idefics3": ["r3-two-stage", "r5-sft-dpo"],
    "tiny-qwen2": ["r5-sft-dpo-text", "r6-sft-kto-text", "r8-distill-text"],
    "tiny-llama": ["text-lora", "r5-sft-dpo-smollm2", "r7-sft-grpo"],
}


def test_the_bfloat16_runs_cover_every_recipe_and_layout_and_r3_on_every_vlm() -> None:
    ran = [(model, recipe) for model, recipes in BFLOAT16_RUNS.items() for recipe in recipes]
    assert {recipe for _, recipe in ran} == {r for recipes in LAYOUTS.values() for r in recipes}
    assert set(BFLOAT16_RUNS) == set(LAYOUTS)
    assert all(recipe in LAYOUTS[model] for model, recipe in ran)  # each on a layout it runs on
    vlms = {model for model, recipes in LAYOUTS.items() if recipes is VLM_RECIPES}
    assert {model for model, recipe in ran if recipe == "r3-two-stage"} == vlms


def test_the_shipped_recipes_cover_every_recipe_file() -> None:
    shipped = {path.stem for path in (ROOT / "recipes" / "recipe").glob("*.yaml")}
    assert shipped == set(VLM_RECIPES) | set(TEXT_RECIPES) | set(SAME_TOKENIZER_RECIPES)


@pytest.mark.parametrize("model", list(LAYOUTS))
def test_every_recipe_plans_a_bfloat16_model_of_every_layout(model):
    """The pairs the bfloat16 runs leave out, as `plan` decides them (no weight loads): every
    recipe's stages on every layout it runs on, each holding its unquantized weights and
    computing in bfloat16."""
    for recipe, stages in LAYOUTS[model].items():
        overrides = [f"recipe={recipe}", f"model={model}", "model.dtype=bfloat16"]
        result = plan_from_config(compose_config([*overrides, *ON_FEW_ROWS.get(recipe, [])]),
                                  CPU_ONLY)  # fmt: skip
        assert list(result.graph.order) == stages, recipe
        for stage in result.stages.values():
            precision = stage.precision
            assert (stage.dtype, precision.weights, precision.activations) == ("bfloat16",) * 3


@pytest.mark.parametrize("model", list(BFLOAT16_RUNS))
def test_every_shipped_recipe_trains_evaluates_and_compares_a_bfloat16_model(model, tmp_path):
    """Real checkpoints are bfloat16: each recipe runs to exit 0 with its evaluation and
    compare, and exports its last stage, on a bfloat16 model of every built-in layout (one
    store, as a user's: stages the recipes share train once), and no stage holds a frozen
    weight in another dtype (a QLoRA stage's frozen vision tower was upcast to float32; its
    evaluation then died on the dtype: FIELD-NOTES.md, section 10)."""
    for recipe in BFLOAT16_RUNS[model]:
        stages = LAYOUTS[model][recipe]
        steps = [f"stage.{stage}.train.max_steps=1" for stage in stages]
        run_dir = run_engine(
            tmp_path / "out",
            f"recipe={recipe}",
            f"model={model}",
            "model.dtype=bfloat16",
            *steps,
            *ON_FEW_ROWS.get(recipe, []),
        )
        summary = json.loads((run_dir / "summary.json").read_text())
        assert [row["stage"] for row in summary["stages"]] == stages, recipe
        assert all(row["status"] in ("trained", "cached") for row in summary["stages"]), summary
        metrics = json.loads((run_dir / "compare_metrics.json").read_text())
        assert set(metrics) == {"base", *stages}, recipe
        exported = tmp_path / "exports" / recipe
        assert main(["export", str(run_dir), f"to={exported}"]) == 0
        assert json.loads((exported / "config.json").read_text())["dtype"] == "bfloat16"
    for path in (tmp_path / "out").glob("store/*/manifest.json"):
        manifest = json.loads(path.read_text())
        assert manifest["dtype"] == "bfloat16"
        for component in manifest["frozen_components"]:
            held = manifest["census"].get(component, {}).get("dtype", {})
            assert set(held) <= {"torch.bfloat16"}, (manifest["stage"], component, held)
