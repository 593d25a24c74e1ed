"""Ports the embedded server picks for itself."""

from __future__ import annotations

from tritonkit.serve.install import free_port


def test_free_ports_are_never_handed_twice_in_a_row() -> None:
    # the OS may hand a port just released again; a server given one port for two listeners fails
    ports = [free_port() for _ in range(200)]
    assert len(set(ports)) == len(ports)
