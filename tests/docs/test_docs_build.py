"""The user guide builds with MkDocs in strict mode, and a broken link fails that build."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MKDOCS = Path(sys.executable).parent / "mkdocs"


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(site)],
        cwd=root,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_guide_builds_strict(tmp_path):
    done = build(ROOT, tmp_path / "site")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "site" / "architecture" / "index.html").is_file()


def test_a_broken_link_or_a_page_left_out_fails_the_build(tmp_path):
    copy = tmp_path / "repo"
    shutil.copytree(ROOT / "docs", copy / "docs")
    shutil.copy(ROOT / "mkdocs.yml", copy / "mkdocs.yml")
    index = copy / "docs" / "index.md"
    index.write_text(index.read_text() + "\n[gone](no-such-page.md)\n")
    broken = build(copy, tmp_path / "site")
    assert broken.returncode != 0 and "no-such-page.md" in broken.stderr
    index.write_text(index.read_text().replace("[gone](no-such-page.md)", ""))
    (copy / "docs" / "orphan.md").write_text("# Not in the navigation\n")
    left_out = build(copy, tmp_path / "site")
    assert left_out.returncode != 0 and "orphan.md" in left_out.stderr
