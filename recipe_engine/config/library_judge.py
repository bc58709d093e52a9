"""The libraries' judge: one process that imports the training stack once and judges each
plan's settings in a child forked from it (`python -m recipe_engine.config.library_judge`).

A fresh interpreter pays TRL's, PEFT's and transformers' imports (about 7 CPU s) before it
builds a single settings object; a plan's verdict takes a fraction of a second after them.
This process pays them once for every verdict its engine process asks for (`run.preflight`):
each request is judged by a child forked from the freshly imported state, never from an
earlier verdict's, with the requester's variables as its own, so a verdict is what a clean
process would say, and a library that crashes ends that child, not the judge.

Requests are JSON lines on stdin: {"stages": [...], "env": {...}}. Each answer is a JSON
line: {"verdict": {...}} (`library_objects.judge`'s), or {"exit": code} when the child ended
without one (its traceback is on stderr). After `IDLE_ARGUMENT` seconds without a request,
or when stdin ends, the judge exits (code 0); with `ONE_VERDICT_ARGUMENT`, after its first
answer, judged in itself.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import select
import sys
import traceback
from typing import Any

from recipe_engine.config import library_objects

IDLE_ARGUMENT = "--idle-seconds"
# macOS's system frameworks, which torch loads there, are not safe to fork: each judge then
# judges one verdict itself and ends, a fresh process per verdict as before the judge.
ONE_VERDICT_ARGUMENT = "--one-verdict"
FORK_IS_SAFE = hasattr(os, "fork") and sys.platform != "darwin"


def main(idle_seconds: float, one_verdict: bool) -> None:
    answers = os.fdopen(os.dup(1), "w")  # the protocol's own channel
    os.dup2(2, 1)  # what a library prints goes to stderr, never into the answers
    library_objects.import_libraries()
    # The imported stack is frozen out of the collector, as `gc.freeze` is meant for before
    # forking: no child walks (and so copies) its million objects' pages.
    gc.freeze()
    while select.select([sys.stdin], [], [], idle_seconds)[0]:
        line = sys.stdin.readline()
        if not line:
            return  # the engine process ended
        request = json.loads(line)
        answer = _judged_here(request) if one_verdict else _judged_in_child(request)
        answers.write(json.dumps(answer) + "\n")
        answers.flush()
        if one_verdict:
            return


def _judged_in_child(request: dict[str, Any]) -> dict[str, Any]:
    """The request's verdict from a child forked for it, or its exit code if it gave none."""
    read, write = os.pipe()
    sys.stdout.flush()
    sys.stderr.flush()
    pid = os.fork()
    if pid == 0:  # the child: it ends with `os._exit`, so nothing of the judge's shutdown runs
        code = 1
        try:
            os.close(read)
            answer = _judged_here(request)
            if "verdict" in answer:
                with os.fdopen(write, "w") as channel:
                    channel.write(json.dumps(answer["verdict"]))
                code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read) as channel:
        said = channel.read()
    code = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    return {"verdict": json.loads(said)} if code == 0 and said else {"exit": code or 1}


def _judged_here(request: dict[str, Any]) -> dict[str, Any]:
    """The verdict judged in this process as the requester's environment, or {"exit": 1}
    when a library raised what is no refusal (its traceback on stderr)."""
    try:
        os.environ.clear()
        os.environ.update(request["env"])
        importlib.invalidate_caches()  # a tracker installed since the judge started is found
        return {"verdict": library_objects.judge(request["stages"])}
    except BaseException:
        traceback.print_exc()
        return {"exit": 1}
    finally:
        sys.stderr.flush()


if __name__ == "__main__":
    idle = float(sys.argv[sys.argv.index(IDLE_ARGUMENT) + 1])
    main(idle, one_verdict=ONE_VERDICT_ARGUMENT in sys.argv)
