"""Hydra's own flags on the run verb print and exit: nothing is planned, trained or written."""

from __future__ import annotations

import pytest

from recipe_engine.cli.argv import split_hydra_flags
from recipe_engine.cli.main import main


def test_cfg_and_info_take_their_values_as_flags_not_overrides():
    overrides, flags = split_hydra_flags(["--cfg", "job", "--info", "searchpath", "seed=3"])
    assert overrides == ["seed=3"] and flags == ["--cfg", "job", "--info", "searchpath"]
    overrides, flags = split_hydra_flags(["--info", "seed=3"])  # --info's topic is optional
    assert overrides == ["seed=3"] and flags == ["--info"]


@pytest.mark.parametrize(
    ("flags", "printed"),
    [
        (["--cfg", "job"], "name: text-lora"),
        (["--cfg", "all", "--resolve"], "hydra:"),
        (["--info", "searchpath"], "pkg://recipe_engine.conf"),  # the shipped configs
        (["--info"], "Hydra"),
    ],
)
def test_hydra_print_flags_print_and_write_nothing(flags, printed, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    try:
        code = main([*flags, "recipe=text-lora", "output_root=out"])
    except SystemExit as exited:  # Hydra's entry point may exit when it is done
        code = exited.code or 0
    assert code == 0
    assert printed in capsys.readouterr().out
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("verb", ["run", "plan", "compare", "diff", "doctor", "inspect", "runs"])
def test_every_verb_has_its_own_help(verb, capsys):
    assert main(["--help"]) == 0
    general = capsys.readouterr().out
    assert main([verb, "--help"]) == 0
    own = capsys.readouterr().out
    assert own != general and own.startswith("usage: recipe-engine")
    assert verb in own.splitlines()[0] or verb == "run"
