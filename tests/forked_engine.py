"""`python -m recipe_engine ...` as a process forked from one that imported the engine once.

A command that trains pays 8-10 CPU s of imports (torch, transformers, TRL, PEFT with
bitsandbytes) before its first line of work, the same seconds in every one of its runs. This
script pays them once: it imports what a run imports, then forks one child per request. Each
child becomes what `python -m recipe_engine ARGS` in CWD with ENV would be: that working
folder, exactly those variables, the module run as `__main__` (runpy, as `-m` does), stdin
empty, stdout and stderr into files, and the interpreter's own shutdown (atexit, flushing,
non-daemon threads) when the command returns. Every child starts from this freshly imported
state, never from an earlier child's.

The variables a library reads while it is imported (HF_ENDPOINT, HF_HOME, OMP_NUM_THREADS,
...) are this server's: `tests/engine_cli.ForkedEngine` starts another server when a command's
variables differ from them, and runs a test's own variables, or a test that asks for a fresh
process (each process's own hash seed, say), as a fresh interpreter instead.

Requests are JSON lines on stdin: {"args", "cwd", "env", "stdout", "stderr", "timeout",
"prelude"}; `prelude` is an optional Python file the child runs first (tests/run/test_faults.py
arms its faults there). Each answer is a JSON line: {"rc", "timed_out"} (rc negative: the
signal that ended the child; a command past its timeout ends with SIGKILL).
"""

from __future__ import annotations

import gc
import importlib
import importlib.util
import json
import os
import runpy
import signal
import sys
import tempfile
import threading

ANSWERS = os.fdopen(os.dup(1), "w")  # the protocol's own channel
sys.path[0] = os.getcwd()  # as `python -m` has it: not this script's folder (tests/)
os.dup2(2, 1)  # anything an import prints goes to stderr, never into the answers

# What a training run imports, once. OpenMP is on one thread (the suite's setting): a child
# forked after a thread pool started could hang in its first parallel region.
PRELOADED = (
    "torch",
    "datasets",
    "peft",
    "transformers",
    "trl",
    "recipe_engine.cli.main",
    "recipe_engine.cli.run",
    "recipe_engine.run.recipe",
    "recipe_engine.run.stage",
)
# Where installed, a run imports these when it gets there: accelerate imports deepspeed as it
# wraps the model, and the end-of-run report draws the loss plot with matplotlib.
OPTIONAL = ("deepspeed", "matplotlib.pyplot")
for name in PRELOADED:
    importlib.import_module(name)
for name in OPTIONAL:
    if importlib.util.find_spec(name.split(".")[0]) is not None:
        importlib.import_module(name)
assert threading.active_count() == 1, "an import started a thread: forking would be unsafe"
# What the imports made is frozen out of the garbage collector, as `gc.freeze` is meant for
# before a fork: a child's collections, and its interpreter's shutdown, no longer walk the
# million objects of the imported stack (measured: a forked `plan` 2.6 s against 0.7 s, 2.4 s
# of it the child's shutdown), nor touch their pages. What the child makes is collected as in
# a fresh process.
gc.freeze()


def serve() -> dict:
    """Answer requests until stdin ends; in a child, return its request."""
    while line := sys.stdin.readline():
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            return request
        code, timed_out = wait(pid, request["timeout"])
        answer({"rc": code, "timed_out": timed_out})
    raise SystemExit(0)


def answer(message: dict) -> None:
    ANSWERS.write(json.dumps(message) + "\n")
    ANSWERS.flush()


def wait(pid: int, timeout: float) -> tuple[int, bool]:
    """The child's exit code, and whether it ran past `timeout` seconds (its process group is
    then killed)."""
    killed = threading.Event()
    timer = threading.Timer(timeout, kill_group, (pid, killed))
    timer.start()
    try:
        _, status = os.waitpid(pid, 0)
    finally:
        timer.cancel()
        timer.join()  # no thread of ours is left when the next child is forked
    return os.waitstatus_to_exitcode(status), killed.is_set()


def kill_group(pid: int, killed: threading.Event) -> None:
    killed.set()
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:  # it ended as the time ran out
        pass


def become(request: dict) -> None:
    """This child turns into the requested command's process (its own process group, so a
    timeout ends whatever it started too)."""
    ANSWERS.close()
    os.setsid()
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    tempfile.tempdir = None  # an import here settled it; a fresh interpreter reads TMPDIR anew
    redirect(0, os.devnull, os.O_RDONLY)
    redirect(1, request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    redirect(2, request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    if os.environ.get("PYTHONUNBUFFERED"):
        sys.stdout.reconfigure(write_through=True)
        sys.stderr.reconfigure(write_through=True)
    sys.path[0] = os.getcwd()  # as `python -m` puts it
    sys.argv = ["-m", *request["args"]]  # runpy puts the module's path first, as `-m` does


def redirect(fd: int, path: str, flags: int) -> None:
    opened = os.open(path, flags, 0o644)
    os.dup2(opened, fd)
    os.close(opened)


REQUEST = serve()
become(REQUEST)
if REQUEST.get("prelude"):  # its namespace lives on in the functions it patches in
    source = open(REQUEST["prelude"]).read()
    exec(compile(source, REQUEST["prelude"], "exec"), {"__name__": "prelude"})
runpy.run_module("recipe_engine", run_name="__main__", alter_sys=True)
