"""What the engine commits is as readable as the user's umask allows, never more.

safetensors (like mkstemp and mkdtemp) writes private 0600 files; without a fix a store
shared by a group holds weights only their writer can read.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from recipe_engine.files import current_umask, share_as_umask
from recipe_engine.store.store import Store


@pytest.fixture
def umask(request) -> Iterator[int]:
    """The process umask set to the test's parameter, restored afterwards."""
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def private_output(folder: Path) -> Path:
    """A stage output as save_pretrained leaves it: a 0600 weights file, a 0700 subfolder."""
    (folder / "sub").mkdir(parents=True)
    for file in (folder / "model.safetensors", folder / "sub" / "config.json"):
        file.write_bytes(b"{}")
        file.chmod(0o600)
    (folder / "sub").chmod(0o700)
    folder.chmod(0o700)
    return folder


@pytest.mark.parametrize(
    ("umask", "file_mode", "dir_mode"),
    [(0o022, 0o644, 0o755), (0o027, 0o640, 0o750), (0o077, 0o600, 0o700)],
    indirect=["umask"],
)
def test_a_commit_gives_files_and_folders_the_umask_modes(umask, file_mode, dir_mode, tmp_path):
    assert current_umask() == umask
    store = Store(tmp_path / "outputs")
    built = private_output(store.make_work_dir("f" * 40) / "final")
    entry = store.commit("f" * 40, built)
    assert mode(entry) == dir_mode and mode(entry / "sub") == dir_mode
    for file in (entry / "model.safetensors", entry / "sub" / "config.json", entry / "COMPLETE"):
        assert mode(file) == file_mode, file


@pytest.mark.parametrize("umask", [0o002], indirect=True)
def test_group_writable_only_when_the_umask_says_so_and_never_world_writable(umask, tmp_path):
    folder = private_output(tmp_path / "out")
    share_as_umask(folder)
    assert mode(folder / "model.safetensors") == 0o664 and mode(folder / "sub") == 0o775


def test_a_symlink_out_of_the_folder_is_not_followed(tmp_path):
    outside = tmp_path / "outside"
    outside.write_text("x")
    outside.chmod(0o600)
    folder = private_output(tmp_path / "out")
    (folder / "link").symlink_to(outside)
    share_as_umask(folder)
    assert mode(outside) == 0o600
