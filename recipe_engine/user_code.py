"""Code of the user's that a stage runs (a reward function, a plug-in), found the way users
name it and keyed by its content.

A function is named `package.module:function` (imported from where the engine runs, as
PYTHONPATH has it) or `path/to/file.py:function` (as ms-swift and Axolotl spell it; a relative
path from where the engine runs). A file is imported once a process as a module named by its
path and content, without writing `__pycache__` beside it; an edited file is a new module. The
sha256 of a function's module source is what enters a stage key, and what a node of a cluster
must find again.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.machinery
import importlib.util
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from recipe_engine.errors import RecipeError, did_you_mean


def find_function(key: str, target: str) -> Callable[..., Any]:
    """The function `target` names: `package.module:function` or `path/file.py:function`."""
    where, _, name = target.rpartition(":")
    if not where or not name:
        raise RecipeError(
            f"`{key}.fn` is {target!r}; write `package.module:function` or "
            "`path/to/file.py:function`.",
            key=f"{key}.fn",
        )
    module = _module(key, where)
    function = getattr(module, name, None)
    if not callable(function):
        names = [n for n, v in vars(module).items() if callable(v) and not n.startswith("_")]
        raise RecipeError(
            f"`{key}.fn`: {where} has no function `{name}`.{did_you_mean(name, names)}",
            key=f"{key}.fn",
        )
    return function


def _module(key: str, where: str) -> Any:
    if where.endswith(".py"):
        path = Path(where).expanduser().resolve()
        if not path.is_file():
            raise RecipeError(
                f"`{key}.fn`: the file {path} does not exist (a relative path is read from "
                f"{Path.cwd()}).",
                key=f"{key}.fn",
            )
        # Named by the file and its content: `plan`'s check and `run` find the functions of one
        # content in one module, executed once a process; an edited file is a new module.
        content = hashlib.sha256(str(path).encode() + path.read_bytes()).hexdigest()[:16]
        name = f"recipe_user_code_{content}"
        if name in sys.modules:
            return sys.modules[name]
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # dataclasses and pickling look their module up
        # Nothing is written beside the user's file (no __pycache__ in their folder).
        writes, sys.dont_write_bytecode = sys.dont_write_bytecode, True
        try:
            _executed(key, lambda: spec.loader.exec_module(module))
        finally:
            sys.dont_write_bytecode = writes
        return module
    return _executed(key, lambda: importlib.import_module(where))


def _executed(key: str, load: Callable[[], Any]) -> Any:
    try:
        return load()
    except ModuleNotFoundError as error:
        raise RecipeError(
            f"`{key}.fn`: no module {error.name!r} can be imported from here (is it on "
            "PYTHONPATH, or is the file's path right?).",
            key=f"{key}.fn",
        ) from None
    except Exception as error:  # the user's module failed as it was imported
        raise RecipeError(
            f"`{key}.fn`: importing it failed with {type(error).__name__}: {error}",
            key=f"{key}.fn",
        ) from None


def function_digest(key: str, target: str) -> str:
    """sha256 of the source of the module `target` names, found from here as `plan` finds it
    (a node that runs the stage must find the same)."""
    return module_digest(find_function(key, target))


def module_digest(function: Callable[..., Any]) -> str:
    """sha256 of the source of the module defining `function` (what it calls beside it)."""
    module = inspect.getmodule(function)
    return source_digest(module if module is not None else function)


def source_digest(code: Any) -> str:
    """sha256 of the source of a module (or of a function without one)."""
    return hashlib.sha256(inspect.getsource(code).encode()).hexdigest()


def code_outside(target: str, root: Path) -> str | None:
    """Why the function `target` names may not run where only code under `root` may (the web
    view's runs): its file or module is elsewhere, or the name is not a function's; None when
    it lies under `root`. Nothing is imported."""
    where, _, _ = target.rpartition(":")
    if not where:
        return f"`{target}`: write FILE.py:FUNCTION or MODULE:FUNCTION"
    if where.endswith(".py") or "/" in where:
        path = (root / where).resolve()
    else:
        spec = importlib.machinery.PathFinder.find_spec(where.split(".")[0], [str(root)])
        if spec is None or spec.origin is None:
            return f"`{target}`: `{where.split('.')[0]}` is not a module in {root}"
        path = Path(spec.origin).resolve()
    if not path.is_relative_to(root):
        return f"`{target}` is code outside {root}"
    return None
