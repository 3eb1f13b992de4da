"""Helpers of the production-topology tier."""

from __future__ import annotations

import socket

BUCKET = "replay"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]
