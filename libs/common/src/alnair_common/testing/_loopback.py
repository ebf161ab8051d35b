"""Loopback address and free ports for the test servers (one implementation: natsd's)."""

from __future__ import annotations

from ..natsd import free_port

LOOPBACK = "127.0.0.1"

__all__ = ["LOOPBACK", "free_port"]
