"""Every command a page of the user guide shows in a `console` block runs as the page says.

Each `$` line runs from an empty folder (so it writes nothing into the checkout) and must exit
0, or the code its `# exit N` comment names. `python` is this interpreter. A development script
(`python -m tools.NAME`, run from the checkout's root, the pages say) has the root on its path."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
BLOCK = re.compile(r"```console\n(.*?)```", re.S)
EXIT = re.compile(r"\s+#\s*exit\s+(\d+)\s*$")


def page_commands() -> list[tuple[str, str, int]]:
    found = []
    for page in sorted(DOCS.rglob("*.md")):
        for block in BLOCK.findall(page.read_text()):
            for line in block.splitlines():
                if line.startswith("$ "):
                    expected = EXIT.search(line)
                    command = EXIT.sub("", line[2:]).strip()
                    found.append((page.name, command, int(expected[1]) if expected else 0))
    return found


COMMANDS = page_commands()


def test_every_page_shows_a_command_a_test_runs():
    pages = {p.name for p in DOCS.glob("*.md")}
    assert pages == {name for name, _, _ in COMMANDS}


@pytest.mark.parametrize(("page", "command", "code"), COMMANDS, ids=lambda v: str(v)[:60])
def test_the_command_runs_as_the_page_says(page, command, code, tmp_path):
    argv = shlex.split(command)
    argv[0] = sys.executable if argv[0] == "python" else argv[0]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    if argv[1:2] == ["-m"] and argv[2].startswith("tools."):  # the checkout's tools/
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == code, f"{page}: {command}\n{done.stdout[-2000:]}{done.stderr[-2000:]}"
    assert "Traceback" not in done.stderr
