"""The job side of a SLURM stage that needs no scheduler to check: a multi-node stage's first
node refuses a rendezvous port another program holds (the scheduler itself: tests/cluster)."""

from __future__ import annotations

import socket

import pytest

from recipe_engine.launchers.slurm_submit import refuse_a_taken_port


def test_a_taken_rendezvous_port_stops_the_first_node_naming_the_key():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
        holder.bind(("", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(RuntimeError, match=f"port {port} .* slurm.master_port"):
            refuse_a_taken_port(port, "llm")


def test_a_free_rendezvous_port_passes_and_stays_free():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as finder:
        finder.bind(("", 0))
        port = finder.getsockname()[1]
    refuse_a_taken_port(port, "llm")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as after:
        after.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        after.bind(("", port))  # the check held nothing
