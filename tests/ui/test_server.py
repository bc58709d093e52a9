"""`recipe-engine ui` as a user starts it: it binds to 127.0.0.1 unless told otherwise, warns
when told otherwise, and refuses bad options with one message (exit 2)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from engine_cli import free_port

from recipe_engine.errors import EXIT_USER_ERROR

LISTEN = "0A"  # the TCP state of a listening socket in /proc/net/tcp


def listening_addresses(port: int) -> set[str]:
    """The IPv4 addresses a socket listens on at `port`, as the kernel reports them."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        local, state = line.split()[1], line.split()[3]
        address, at = local.split(":")
        if int(at, 16) == port and state == LISTEN:
            found.add(socket.inet_ntoa(bytes.fromhex(address)[::-1]))
    return found


@contextmanager
def serving(root: Path, *args: str) -> Iterator[tuple[subprocess.Popen, str]]:
    """The verb started as a user starts it; yields the process and its first line once up."""
    server = subprocess.Popen(
        [sys.executable, "-m", "recipe_engine", "ui", f"output_root={root}", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        line = server.stdout.readline() if server.stdout else ""
        yield server, line
    finally:
        server.terminate()
        server.wait(timeout=30)


def wait_for(url: str) -> int:
    for _ in range(100):
        try:
            with urllib.request.urlopen(url, timeout=5) as answer:
                return answer.status
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"nothing answered at {url}")


def test_it_binds_to_the_loopback_address_by_default(tmp_path):
    (tmp_path / "runs").mkdir()
    port = free_port()
    with serving(tmp_path, f"ui.port={port}") as (server, line):
        assert line.startswith(f"serving {tmp_path} at http://127.0.0.1:{port}/"), line
        assert wait_for(f"http://127.0.0.1:{port}/") == 200
        assert listening_addresses(port) == {"127.0.0.1"}
        server.terminate()
        _, stderr = server.communicate(timeout=30)
    assert "warning" not in stderr


def test_another_address_is_served_only_with_a_warning(tmp_path):
    (tmp_path / "runs").mkdir()
    port = free_port()
    with serving(tmp_path, "ui.host=0.0.0.0", f"ui.port={port}") as (server, _):
        assert wait_for(f"http://127.0.0.1:{port}/") == 200
        assert listening_addresses(port) == {"0.0.0.0"}
        server.terminate()
        _, stderr = server.communicate(timeout=30)
    assert "warning: serving on 0.0.0.0, not 127.0.0.1" in stderr
    assert "ssh -L" in stderr  # what to do instead


def run_ui(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "recipe_engine", "ui", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_bad_options_are_one_message_and_exit_2(tmp_path):
    cases = {
        "ui.port=http": "Invalid value for `ui.port`",
        "ui.port=0": "`ui.port=0` is not a port",
        "ui.colour=red": "Unknown key `ui.colour`. Valid keys there: host, port",
    }
    for option, message in cases.items():
        done = run_ui(f"output_root={tmp_path}", option)
        assert done.returncode == EXIT_USER_ERROR, (option, done.stderr)
        assert done.stderr.startswith(f"error: {message}") and "Traceback" not in done.stderr
    sweep = run_ui("-m", f"output_root={tmp_path}")
    assert sweep.returncode == EXIT_USER_ERROR and "`ui` takes no sweep" in sweep.stderr
    missing = run_ui(f"output_root={tmp_path / 'nowhere'}")
    assert missing.returncode == EXIT_USER_ERROR
    assert "nothing has run there yet" in missing.stderr


def test_a_port_already_taken_is_one_message_and_exit_2(tmp_path):
    (tmp_path / "runs").mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        done = run_ui(f"output_root={tmp_path}", f"ui.port={taken.getsockname()[1]}")
    assert done.returncode == EXIT_USER_ERROR, done.stderr
    assert done.stderr.startswith("error: Cannot serve at http://127.0.0.1:")
    assert "Choose another port" in done.stderr and "Traceback" not in done.stderr
