"""`chat STAGE [prompt=TEXT] [image=PATH] [system=TEXT] [eval.KEY=V ...]`: talk to a committed
stage (`evaluate.chat`), in the terminal with the answers streamed, once for a script, or as
the web view's chat worker (`jsonl=true`: a JSON line per question in, JSON lines out)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from recipe_engine.cli.argv import config_dirs, split_hydra_flags
from recipe_engine.config.chat_options import ChatOptions, compose_chat, split_text_keys
from recipe_engine.errors import RecipeError
from recipe_engine.evaluate.chat import Chat, ChatModel, Question, check_question, find_model

USAGE = """\
usage: recipe-engine chat STAGE [prompt=TEXT] [image=PATH] [system=TEXT] [eval.KEY=V ...]

Talk to a committed stage: it is loaded as `compare` loads it (a full-weights stage as it is,
an adapter on its full-precision base) and answers each question as `compare` asks a probe
(the same chat template and generation settings, the run's own unless eval.* says otherwise),
so a question that is one of the run's probes gets the answer compare records for it. Each
question is asked on its own, with no history.

STAGE: RUN_DIR/STAGE (outputs/runs/<recipe>/<time>/llm) or RUN_DIR:STAGE, RUN_DIR/base (the
run's base model), a run folder (its last stage with weights), a store folder
(outputs/store/<key>) or a store key (its first characters will do). A stage that has not
committed is refused (exit 2).

  prompt=TEXT       one question: its answer is printed, then chat exits (for scripts);
                    without it, questions are read from the terminal and answers streamed
  image=PATH        a picture for a vision-language stage (in the terminal: /image PATH)
  system=TEXT       a system turn before every question
  eval.max_new_tokens=N eval.do_sample=true eval.temperature=T eval.top_p=P seed=N
                    how answers are generated (default: the run's own eval settings)
  jsonl=true        questions as JSON lines on stdin ({"prompt": ..., "image": ...}),
                    answers as JSON lines on stdout (what the web view's chat worker runs)
  output_root=DIR   where store keys are looked up (default: outputs)

examples:
  python -m recipe_engine chat outputs/runs/r3-two-stage/<time>/llm image=shape.png
  python -m recipe_engine chat outputs/runs/text-lora/<time>/llm prompt="What is 3 + 4?"
"""
QUIT = ("/quit", "/exit")


def main(args: list[str], multirun: bool) -> int:
    """The `chat` verb."""
    if multirun:
        raise RecipeError("`chat` takes no sweep: drop -m/--multirun.")
    options = parse_options(args)
    found = find_model(options.target, options.output_root, options.settings, options.seed)
    if options.jsonl:
        return serve_jsonl(found, options)
    question = _question(options, options.prompt or "")
    check_question(question, found.kind)
    if options.prompt is not None:
        print(Chat(found).answer(question), flush=True)
        return 0
    return converse(found, options)


def parse_options(args: list[str]) -> ChatOptions:
    """The one stage to talk to (the word without `=`), the free-text keys as typed, and
    chat's other keys composed by Hydra (`config.chat_options`)."""
    overrides, flags = split_hydra_flags(args)
    text, rest = split_text_keys(overrides)
    targets = [w for w in rest if "=" not in w and not w.startswith("~")]
    if len(targets) != 1:
        raise RecipeError(f"`chat` takes one stage, got {len(targets)}.\n{USAGE}")
    keys = [w for w in rest if w not in targets]
    return compose_chat(targets[0], text, keys, config_dirs(flags))


def _question(options: ChatOptions, prompt: str, image: Path | None = None) -> Question:
    return Question(prompt, options.system, image or options.image)


def converse(found: ChatModel, options: ChatOptions) -> int:
    """Questions from the terminal, each answer streamed; /image PATH changes the picture,
    /quit, end of input or Ctrl-C stops."""
    try:
        return _converse(found, options)
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 0


def _converse(found: ChatModel, options: ChatOptions) -> int:
    print(f"chatting with {found.label} ({found.kind}); loading ...", file=sys.stderr)
    chat = Chat(found)
    image = options.image
    print(
        f"generation: {found.settings_text()}\n"
        + (f"image: {image}\n" if image else "")
        + "Each question is asked on its own. "
        + ("/image PATH sets the picture, " if found.kind == "vlm" else "")
        + "/quit or Ctrl-D ends.",
        file=sys.stderr,
    )
    while True:
        try:
            line = input("> ").strip()
        except EOFError:
            print(file=sys.stderr)
            return 0
        if not line:
            continue
        if line in QUIT:
            return 0
        if line.startswith("/image"):
            image = Path(line.removeprefix("/image").strip()).expanduser()
            print(f"image: {image}", file=sys.stderr)
            continue
        try:
            chat.answer(_question(options, line, image), on_text=_Printed())
        except RecipeError as error:  # a picture that does not read: say so, keep talking
            print(f"error: {error}", file=sys.stderr)
            continue
        print(flush=True)


class _Printed:
    """Streamed text to stdout as it comes, without the whitespace the answer is stripped of
    (leading, and trailing until more text follows)."""

    def __init__(self) -> None:
        self.started = False
        self.held = ""

    def __call__(self, text: str) -> None:
        if not self.started:
            text = text.lstrip()
            self.started = bool(text)
        body = text.rstrip()
        if body:
            print(self.held + body, end="", flush=True)
            self.held = text[len(body) :]
        else:
            self.held += text


def serve_jsonl(found: ChatModel, options: ChatOptions) -> int:
    """The web view's chat worker: a `ready` line once loaded (what it talks to and how it
    generates), then for each question line `{"text": ...}` lines as the answer is generated
    and one `{"answer": ...}` (or `{"error": ...}`, and the worker goes on). End of input
    stops it."""
    chat = Chat(found)
    _send(
        {
            "ready": {
                "label": found.label,
                "name": found.name,
                "kind": found.kind,
                "generation": found.settings_text(),
            }
        }
    )
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            asked = json.loads(line)
            image = asked.get("image")
            question = Question(
                str(asked["prompt"]), asked.get("system"), Path(image) if image else None
            )
            answer = chat.answer(question, on_text=lambda text: _send({"text": text}))
        except RecipeError as error:
            _send({"error": str(error)})
            continue
        except (ValueError, KeyError, TypeError) as error:
            _send({"error": f'not a question line ({error}): send {{"prompt": TEXT}}'})
            continue
        _send({"answer": answer})
    return 0


def _send(event: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps(event) + "\n")
    sys.stdout.flush()
