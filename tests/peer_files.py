"""Data files written the way the tools users come from document them: one writer per format
of LLaMA-Factory (data/README.md and its demo files), Axolotl (docs/rlhf.qmd, the dataset
formats pages), ms-swift (Customization/Custom-dataset.md), Qwen-VL (README.md, Finetuning) and
TRL (dataset_formats.md). The
structure is each document's; the rows are small arithmetic questions (and coloured squares
for images) so that a few steps train on them. Shared by the data tests (tests/resolve) and
the command-line runs (tests/cli): `PEER_FILES` lists them all.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from PIL import Image, ImageDraw

ROWS = 24  # enough for the automatic held-out share and a few training steps
COLOURS = {"red": (220, 40, 40), "green": (40, 180, 60), "blue": (50, 80, 230)}
QUESTION = "What colour is the square?"
SYSTEM = "Answer briefly."


@dataclass(frozen=True)
class PeerFile:
    tool: str  # the tool whose documentation the file follows
    documented: str  # where that tool documents the format
    kind: str  # the model kind it is for: causal_lm | vlm
    trainer: str  # the trainer its rows are for: sft | dpo | kto
    shape: str  # the TRL row shape it becomes
    write: Callable[[Path], Path]  # folder -> the data file written in it
    # The chat template its model needs (a family's, as TRL ships it in trl/chat_templates):
    # "" for the tiny model's own.
    template: str = ""


def sums() -> list[tuple[str, str]]:
    """(question, answer) pairs: `What is 1 + 1?` -> `2`, ..."""
    return [(f"What is {1 + i % 6} + {1 + i // 6}?", str(2 + i % 6 + i // 6)) for i in range(ROWS)]


def near_miss(answer: str) -> str:
    return str(int(answer) + 1)


def squares(folder: Path, under: str = "pictures") -> list[tuple[str, str]]:
    """(image path relative to `folder`, colour) for ROWS small squares drawn here."""
    (folder / under).mkdir(parents=True, exist_ok=True)
    out = []
    for i in range(ROWS):
        colour = list(COLOURS)[i % len(COLOURS)]
        image = Image.new("RGB", (56, 56), (20, 20, 20))
        ImageDraw.Draw(image).rectangle((8 + i % 4, 8, 44, 44), fill=COLOURS[colour])
        image.save(folder / under / f"{i:02d}.png")
        out.append((f"{under}/{i:02d}.png", colour))
    return out


def wrong_colour(colour: str) -> str:
    return {"red": "green", "green": "blue", "blue": "red"}[colour]


def json_list(path: Path, rows: list[dict[str, Any]]) -> Path:
    """A JSON file holding a list of rows (LLaMA-Factory's demo files are so)."""
    path.write_text(json.dumps(rows, indent=2))
    return path


def json_lines(path: Path, rows: list[dict[str, Any]]) -> Path:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


def chat(*turns: tuple[str, Any]) -> list[dict[str, Any]]:
    return [{"role": role, "content": content} for role, content in turns]


def sharegpt(*turns: tuple[str, str]) -> list[dict[str, str]]:
    return [{"from": who, "value": text} for who, text in turns]


def labelled() -> list[tuple[str, str, bool]]:
    """(question, answer, desirable): the right sum every other row, a near miss between."""
    return [(q, a if i % 2 == 0 else near_miss(a), i % 2 == 0) for i, (q, a) in enumerate(sums())]


# --------------------------------------------------------------------------- LLaMA-Factory


def lf_alpaca(folder: Path) -> Path:
    rows = [{"instruction": q, "input": "", "output": a} for q, a in sums()]
    rows[1] |= {"system": SYSTEM, "history": [["What is 1 + 1?", "2"]]}
    return json_list(folder / "alpaca_demo.json", rows)


def lf_sharegpt(folder: Path) -> Path:
    rows = [
        {"conversations": sharegpt(("human", q), ("gpt", a)), "system": SYSTEM} for q, a in sums()
    ]
    return json_list(folder / "sharegpt_demo.json", rows)


def lf_openai(folder: Path) -> Path:
    rows = [
        {"messages": chat(("system", SYSTEM), ("user", q), ("assistant", a))} for q, a in sums()
    ]
    return json_list(folder / "openai_demo.json", rows)


def lf_alpaca_preference(folder: Path) -> Path:
    rows = [
        {"instruction": "Add the numbers.", "input": q, "chosen": f"It is {a}.", "rejected": a}
        for q, a in sums()
    ]
    return json_list(folder / "alpaca_pairs.json", rows)


def lf_sharegpt_preference(folder: Path) -> Path:
    """dpo_en_demo.json: the conversation ends with the user's turn; each answer one message."""
    rows = [
        {
            "conversations": sharegpt(("human", q)),
            "chosen": {"from": "gpt", "value": f"It is {a}."},
            "rejected": {"from": "gpt", "value": near_miss(a)},
        }
        for q, a in sums()
    ]
    return json_list(folder / "dpo_demo.json", rows)


def lf_alpaca_kto(folder: Path) -> Path:
    rows = [{"instruction": q, "input": "", "output": a, "kto_tag": ok} for q, a, ok in labelled()]
    return json_list(folder / "alpaca_kto.json", rows)


def lf_kto(folder: Path) -> Path:
    """kto_en_demo.json: role/content messages whose last reply a boolean `label` judges."""
    rows = [
        {"messages": chat(("user", q), ("assistant", a)), "label": ok} for q, a, ok in labelled()
    ]
    return json_list(folder / "kto_demo.json", rows)


def lf_content_parts(folder: Path) -> Path:
    """v1_sft_demo.jsonl: content parts spelled `{"type": "text", "value": ...}`."""
    rows = [
        {
            "messages": [
                {"role": "user", "content": [{"type": "text", "value": q}], "loss_weight": 0.0},
                {
                    "role": "assistant",
                    "content": [{"type": "text", "value": a}],
                    "loss_weight": 1.0,
                },
            ]
        }
        for q, a in sums()
    ]
    return json_lines(folder / "v1_sft_demo.jsonl", rows)


def lf_chosen_rejected_messages(folder: Path) -> Path:
    """v1_dpo_demo.jsonl: whole chosen / rejected conversations of content parts."""

    def turn(role: str, text: str) -> dict[str, Any]:
        return {"role": role, "content": [{"type": "text", "value": text}], "loss_weight": 0.0}

    rows = [
        {
            "chosen_messages": [turn("system", SYSTEM), turn("user", q), turn("assistant", a)],
            "rejected_messages": [
                turn("system", SYSTEM),
                turn("user", q),
                turn("assistant", near_miss(a)),
            ],
        }
        for q, a in sums()
    ]
    return json_lines(folder / "v1_dpo_demo.jsonl", rows)


def lf_mllm(folder: Path) -> Path:
    """mllm_demo.json: `<image>` marks in role/content messages, one `images` entry each."""
    rows = [
        {
            "messages": chat(
                ("user", f"<image>{QUESTION}"),
                ("assistant", colour),
                ("user", "And this one?<image>"),
                ("assistant", colour),
            ),
            "images": [image, image],
        }
        for image, colour in squares(folder, "mllm_demo_data")
    ]
    return json_list(folder / "mllm_demo.json", rows)


def lf_image_url_parts(folder: Path) -> Path:
    """v1_multimodal_demo.jsonl: `image_url` parts whose `value` is a path written from the
    project's root (`data/...`), the file itself under `data/`."""
    data = folder / "data"
    data.mkdir(exist_ok=True)
    rows = [
        {
            "messages": [
                {
                    "role": "user",
                    "content": [
                        {"type": "image_url", "value": f"data/{image}"},
                        {"type": "text", "value": QUESTION},
                    ],
                },
                {"role": "assistant", "content": [{"type": "text", "value": colour}]},
            ]
        }
        for image, colour in squares(data, "mllm_demo_data")
    ]
    return json_lines(data / "v1_multimodal_demo.jsonl", rows)


def lf_sharegpt_image_preference(folder: Path) -> Path:
    rows = [
        {
            "conversations": sharegpt(("human", f"<image>{QUESTION}")),
            "chosen": {"from": "gpt", "value": colour},
            "rejected": {"from": "gpt", "value": wrong_colour(colour)},
            "images": [image],
        }
        for image, colour in squares(folder)
    ]
    return json_list(folder / "mllm_dpo_demo.json", rows)


def lf_alpaca_images(folder: Path) -> Path:
    rows = [
        {"instruction": QUESTION, "input": "", "output": colour, "images": [image]}
        for image, colour in squares(folder)
    ]
    return json_list(folder / "alpaca_images.json", rows)


# --------------------------------------------------------------------------- Axolotl


def ax_chatml_intel(folder: Path) -> Path:
    rows = [
        {"system": SYSTEM, "question": q, "chosen": f"It is {a}.", "rejected": near_miss(a)}
        for q, a in sums()
    ]
    return json_lines(folder / "intel.jsonl", rows)


def ax_chatml_argilla(folder: Path) -> Path:
    rows = [
        {
            "system": SYSTEM,
            "instruction": q,
            "chosen_response": f"It is {a}.",
            "rejected_response": near_miss(a),
        }
        for q, a in sums()
    ]
    return json_lines(folder / "argilla.jsonl", rows)


def ax_chatml_icr(folder: Path) -> Path:
    rows = [
        {"system": SYSTEM, "input": q, "chosen": f"It is {a}.", "rejected": near_miss(a)}
        for q, a in sums()
    ]
    return json_lines(folder / "icr.jsonl", rows)


def ax_chatml_prompt_pairs(folder: Path) -> Path:
    rows = [
        {"system": SYSTEM, "prompt": q, "chosen": f"It is {a}.", "rejected": near_miss(a)}
        for q, a in sums()
    ]
    return json_lines(folder / "prompt_pairs.jsonl", rows)


def ax_chatml_argilla_chat(folder: Path) -> Path:
    rows = [
        {
            "chosen": chat(("user", q), ("assistant", f"It is {a}.")),
            "rejected": chat(("user", q), ("assistant", near_miss(a))),
        }
        for q, a in sums()
    ]
    return json_lines(folder / "argilla_chat.jsonl", rows)


def ax_chatml_ultra(folder: Path) -> Path:
    """A prompt column beside whole chosen / rejected conversations that repeat it."""
    rows = [
        {
            "system": SYSTEM,
            "prompt": q,
            "chosen": chat(("user", q), ("assistant", f"It is {a}.")),
            "rejected": chat(("user", q), ("assistant", near_miss(a))),
        }
        for q, a in sums()
    ]
    return json_lines(folder / "ultra.jsonl", rows)


def ax_chat_template_default(folder: Path) -> Path:
    rows = [
        {
            "messages": chat(("system", SYSTEM), ("user", q)),
            "chosen": {"role": "assistant", "content": f"It is {a}."},
            "rejected": {"role": "assistant", "content": near_miss(a)},
        }
        for q, a in sums()
    ]
    return json_lines(folder / "chat_template_default.jsonl", rows)


def ax_kto_intel(folder: Path) -> Path:
    rows = [
        {"system": SYSTEM, "question": q, "completion": a, "label": ok} for q, a, ok in labelled()
    ]
    return json_lines(folder / "kto_intel.jsonl", rows)


def ax_kto_argilla_chat(folder: Path) -> Path:
    """`completion` is the whole conversation; its last turn is judged."""
    rows = [
        {"completion": chat(("user", q), ("assistant", a)), "label": ok} for q, a, ok in labelled()
    ]
    return json_lines(folder / "kto_argilla_chat.jsonl", rows)


# --------------------------------------------------------------------------- ms-swift


def ms_query_response(folder: Path) -> Path:
    rows = [{"system": SYSTEM, "query": q, "response": a} for q, a in sums()]
    return json_lines(folder / "query_response.jsonl", rows)


def ms_query_response_history(folder: Path) -> Path:
    """ms-swift 2's (and Qwen's older) rows: the earlier exchanges as [query, response] pairs."""
    rows = [
        {"system": SYSTEM, "query": q, "response": a, "history": [["Hello", "Ask me a sum."]]}
        for q, a in sums()
    ]
    return json_lines(folder / "query_response_history.jsonl", rows)


def ms_alpaca(folder: Path) -> Path:
    rows = [
        {"system": SYSTEM, "instruction": "Add the numbers.", "input": q, "output": a}
        for q, a in sums()
    ]
    return json_lines(folder / "swift_alpaca.jsonl", rows)


def ms_rejected_response(folder: Path) -> Path:
    """`messages` end with the chosen reply; `rejected_response` is the other (text)."""
    rows = [
        {
            "messages": chat(("system", SYSTEM), ("user", q), ("assistant", f"It is {a}.")),
            "rejected_response": near_miss(a),
        }
        for q, a in sums()
    ]
    return json_lines(folder / "swift_dpo.jsonl", rows)


def ms_rejected_messages(folder: Path) -> Path:
    rows = [
        {
            "messages": chat(("user", q), ("assistant", f"It is {a}.")),
            "rejected_messages": chat(("user", q), ("assistant", near_miss(a))),
        }
        for q, a in sums()
    ]
    return json_lines(folder / "swift_dpo_messages.jsonl", rows)


def ms_kto(folder: Path) -> Path:
    rows = [
        {"messages": chat(("system", SYSTEM), ("user", q), ("assistant", a)), "label": ok}
        for q, a, ok in labelled()
    ]
    return json_lines(folder / "swift_kto.jsonl", rows)


def ms_openai_image_url(folder: Path) -> Path:
    """OpenAI chat format: `image_url` parts holding `data:` URIs (ms-swift reads them)."""
    rows = []
    for image, colour in squares(folder):
        uri = "data:image/png;base64," + base64.b64encode((folder / image).read_bytes()).decode()
        content = [
            {"type": "text", "text": QUESTION},
            {"type": "image_url", "image_url": {"url": uri}},
        ]
        rows.append({"messages": chat(("user", content), ("assistant", colour))})
    return json_lines(folder / "openai_images.jsonl", rows)


def ms_image_rejected_response(folder: Path) -> Path:
    rows = [
        {
            "messages": chat(("user", f"<image>{QUESTION}"), ("assistant", colour)),
            "images": [image],
            "rejected_response": wrong_colour(colour),
        }
        for image, colour in squares(folder)
    ]
    return json_lines(folder / "swift_image_dpo.jsonl", rows)


def ms_pretrain(folder: Path) -> Path:
    """Pretraining rows (ms-swift's Custom-dataset.md): one `response` text a row, alone."""
    rows = [{"response": f"{q} {a}"} for q, a in sums()]
    return json_lines(folder / "swift_pretrain.jsonl", rows)


def ms_qwen_vl_query_response(folder: Path) -> Path:
    """ms-swift's Qwen-VL rows: `query` text naming its picture with an inline `<img>` tag."""
    rows = [
        {"query": f"Picture 1: <img>{image}</img>\n{QUESTION}", "response": colour}
        for image, colour in squares(folder)
    ]
    return json_lines(folder / "qwen_vl_query_response.jsonl", rows)


# --------------------------------------------------------------------------- Qwen-VL


def qwen_vl_conversations(folder: Path) -> Path:
    """Qwen-VL's own fine-tuning file (its README, "Finetuning"): a JSON list of `id` +
    `conversations` of `from` user / assistant turns, pictures named by `<img>` tags."""
    rows = [
        {
            "id": f"identity_{i}",
            "conversations": sharegpt(
                ("user", f"Picture 1: <img>{image}</img>\n{QUESTION}"), ("assistant", colour)
            ),
        }
        for i, (image, colour) in enumerate(squares(folder))
    ]
    return json_list(folder / "qwen_vl_finetune.json", rows)


# --------------------------------------------------------------------------- TRL


def trl_implicit_text(folder: Path) -> Path:
    """Standard preference with an implicit prompt: the text both answers begin with."""
    rows = [{"chosen": f"{q} It is {a}.", "rejected": f"{q} {near_miss(a)}"} for q, a in sums()]
    return json_lines(folder / "implicit.jsonl", rows)


def trl_unpaired(folder: Path) -> Path:
    rows = [{"prompt": q, "completion": a, "label": ok} for q, a, ok in labelled()]
    return json_lines(folder / "unpaired.jsonl", rows)


def trl_chat_unpaired(folder: Path) -> Path:
    rows = [
        {"prompt": chat(("user", q)), "completion": chat(("assistant", a)), "label": ok}
        for q, a, ok in labelled()
    ]
    return json_lines(folder / "chat_unpaired.jsonl", rows)


def hh_dialogues(folder: Path) -> Path:
    """Anthropic HH-RLHF: whole dialogues as text, `\\n\\nHuman:` / `\\n\\nAssistant:`."""
    rows = [
        {
            "chosen": f"\n\nHuman: {q}\n\nAssistant: It is {a}.",
            "rejected": f"\n\nHuman: {q}\n\nAssistant: {near_miss(a)}",
        }
        for q, a in sums()
    ]
    return json_lines(folder / "hh.jsonl", rows)


# --------------------------------------------------------------------------- Firefly


def firefly(folder: Path) -> Path:
    """Firefly's (README, firefly-train-1.1M): one {human, assistant} object per exchange."""
    greeting = {"human": "Hello", "assistant": "Ask me a sum."}
    rows = [
        {
            "conversation_id": i,
            "category": "Arithmetic",
            "conversation": [greeting, {"human": q, "assistant": a}],
        }
        for i, (q, a) in enumerate(sums())
    ]
    return json_lines(folder / "firefly.jsonl", rows)


def trl_language_modeling(folder: Path) -> Path:
    """TRL's language modeling type, standard format: the whole sequence in one `text`."""
    rows = [{"text": f"{q} {a}"} for q, a in sums()]
    return json_lines(folder / "language_modeling.jsonl", rows)


ADD_TOOL = {
    "type": "function",
    "function": {
        "name": "add",
        "description": "Adds two whole numbers.",
        "parameters": {
            "type": "object",
            "properties": {
                "a": {"type": "integer", "description": "The first number."},
                "b": {"type": "integer", "description": "The second number."},
            },
            "required": ["a", "b"],
        },
    },
}


def trl_tool_calling(folder: Path) -> Path:
    """TRL's tool calling: the assistant calls a function (`tool_calls`), a `tool` turn gives
    the result, the assistant answers; `tools` holds the functions' JSON schemas."""
    rows = []
    for i, (q, a) in enumerate(sums()):
        call = {"name": "add", "arguments": {"a": 1 + i % 6, "b": 1 + i // 6}}
        messages = [
            {"role": "user", "content": q},
            {"role": "assistant", "tool_calls": [{"type": "function", "function": call}]},
            {"role": "tool", "name": "add", "content": f"The sum is {a}."},
            {"role": "assistant", "content": a},
        ]
        rows.append({"messages": messages, "tools": [ADD_TOOL]})
    return json_lines(folder / "tool_calling.jsonl", rows)


def model_with_template(folder: Path, template: str) -> Path:
    """The tiny Qwen2 saved again with a family's chat template as TRL ships it
    (trl/chat_templates/<template>.jinja, e.g. `qwen2_5`, which renders tools)."""
    import importlib.util
    import shutil

    from recipe_engine.resolve.tiny import build_tiny_model

    trl = importlib.util.find_spec("trl")
    assert trl is not None and trl.submodule_search_locations
    shipped = Path(next(iter(trl.submodule_search_locations))) / "chat_templates"
    copy = folder / f"tiny-qwen2-{template}"
    shutil.copytree(build_tiny_model("tiny-qwen2"), copy)
    (copy / "chat_template.jinja").write_text((shipped / f"{template}.jinja").read_text())
    config = json.loads((copy / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)  # the file is the template
    (copy / "tokenizer_config.json").write_text(json.dumps(config))
    return copy


def _peer(tool: str, documented: str, kind: str, trainer: str, shape: str, write: Any) -> PeerFile:
    return PeerFile(tool, documented, kind, trainer, shape, write)


LF, AX, MS, TRL = "LLaMA-Factory", "Axolotl", "ms-swift", "TRL"
LF_DOC, AX_DOC = "data/README.md", "docs/rlhf.qmd"
MS_DOC, TRL_DOC = "Customization/Custom-dataset.md", "docs/source/dataset_formats.md"
TEXT, VLM = "causal_lm", "vlm"
PEER_FILES = {
    "lf-alpaca": _peer(LF, LF_DOC, TEXT, "sft", "messages", lf_alpaca),
    "lf-sharegpt": _peer(LF, LF_DOC, TEXT, "sft", "messages", lf_sharegpt),
    "lf-openai": _peer(LF, LF_DOC, TEXT, "sft", "messages", lf_openai),
    "lf-alpaca-preference": _peer(LF, LF_DOC, TEXT, "dpo", "chat_preference", lf_alpaca_preference),
    "lf-sharegpt-preference": _peer(
        LF, "data/dpo_en_demo.json", TEXT, "dpo", "chat_preference", lf_sharegpt_preference
    ),
    "lf-alpaca-kto": _peer(LF, LF_DOC, TEXT, "kto", "chat_unpaired", lf_alpaca_kto),
    "lf-kto": _peer(LF, "data/kto_en_demo.json", TEXT, "kto", "chat_unpaired", lf_kto),
    "lf-content-parts": _peer(
        LF, "data/v1_sft_demo.jsonl", TEXT, "sft", "messages", lf_content_parts
    ),
    "lf-chosen-rejected-messages": _peer(
        LF, "data/v1_dpo_demo.jsonl", TEXT, "dpo", "chat_preference", lf_chosen_rejected_messages
    ),
    "lf-mllm": _peer(LF, "data/mllm_demo.json", VLM, "sft", "vlm", lf_mllm),
    "lf-image-url-parts": _peer(
        LF, "data/v1_multimodal_demo.jsonl", VLM, "sft", "vlm", lf_image_url_parts
    ),
    "lf-sharegpt-image-preference": _peer(
        LF, LF_DOC, VLM, "dpo", "vlm_preference", lf_sharegpt_image_preference
    ),
    "lf-alpaca-images": _peer(LF, LF_DOC, VLM, "sft", "vlm", lf_alpaca_images),
    "ax-chatml.intel": _peer(AX, AX_DOC, TEXT, "dpo", "chat_preference", ax_chatml_intel),
    "ax-chatml.argilla": _peer(AX, AX_DOC, TEXT, "dpo", "chat_preference", ax_chatml_argilla),
    "ax-chatml.icr": _peer(AX, AX_DOC, TEXT, "dpo", "chat_preference", ax_chatml_icr),
    "ax-chatml.prompt_pairs": _peer(
        AX, AX_DOC, TEXT, "dpo", "chat_preference", ax_chatml_prompt_pairs
    ),
    "ax-chatml.argilla_chat": _peer(
        AX, AX_DOC, TEXT, "dpo", "chat_preference", ax_chatml_argilla_chat
    ),
    "ax-chatml.ultra": _peer(AX, AX_DOC, TEXT, "dpo", "chat_preference", ax_chatml_ultra),
    "ax-chat_template.default": _peer(
        AX, AX_DOC, TEXT, "dpo", "chat_preference", ax_chat_template_default
    ),
    "ax-kto-chatml.intel": _peer(AX, AX_DOC, TEXT, "kto", "chat_unpaired", ax_kto_intel),
    "ax-kto-argilla_chat": _peer(AX, AX_DOC, TEXT, "kto", "chat_unpaired", ax_kto_argilla_chat),
    "ms-query-response": _peer(
        MS, MS_DOC, TEXT, "sft", "chat_prompt_completion", ms_query_response
    ),
    "ms-query-response-history": _peer(
        MS, MS_DOC, TEXT, "sft", "chat_prompt_completion", ms_query_response_history
    ),
    "ms-alpaca": _peer(MS, MS_DOC, TEXT, "sft", "messages", ms_alpaca),
    "ms-rejected-response": _peer(MS, MS_DOC, TEXT, "dpo", "chat_preference", ms_rejected_response),
    "ms-rejected-messages": _peer(MS, MS_DOC, TEXT, "dpo", "chat_preference", ms_rejected_messages),
    "ms-kto": _peer(MS, MS_DOC, TEXT, "kto", "chat_unpaired", ms_kto),
    "ms-openai-image-url": _peer(MS, MS_DOC, VLM, "sft", "vlm", ms_openai_image_url),
    "ms-image-rejected-response": _peer(
        MS, MS_DOC, VLM, "dpo", "vlm_preference", ms_image_rejected_response
    ),
    "ms-pretrain": _peer(MS, MS_DOC, TEXT, "sft", "language_modeling", ms_pretrain),
    "qwen-vl": _peer("Qwen-VL", "README.md", VLM, "sft", "vlm", qwen_vl_conversations),
    "trl-implicit-text": _peer(TRL, TRL_DOC, TEXT, "dpo", "chat_preference", trl_implicit_text),
    "trl-unpaired": _peer(TRL, TRL_DOC, TEXT, "kto", "chat_unpaired", trl_unpaired),
    "trl-chat-unpaired": _peer(TRL, TRL_DOC, TEXT, "kto", "chat_unpaired", trl_chat_unpaired),
    "trl-language-modeling": _peer(
        TRL, TRL_DOC, TEXT, "sft", "language_modeling", trl_language_modeling
    ),
    # Qwen2.5's chat template renders tools (the tiny model's does not: `plan` refuses it).
    "trl-tool-calling": PeerFile(
        TRL, TRL_DOC, TEXT, "sft", "tool_messages", trl_tool_calling, template="qwen2_5"
    ),
    "firefly": _peer("Firefly", "README.md", TEXT, "sft", "messages", firefly),
    "anthropic-hh": _peer(
        "Anthropic HH-RLHF",
        "TRL examples/datasets/hh-rlhf-helpful-base.py",
        TEXT,
        "dpo",
        "chat_preference",
        hh_dialogues,
    ),
}
