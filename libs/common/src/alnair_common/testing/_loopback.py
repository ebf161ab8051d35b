"""Free TCP ports on the loopback interface.

The kernel picks the port (bind to port 0) so parallel test sessions on one machine do not
collide on fixed ports. The socket is closed before the server binds, which leaves a small
race with other processes; servers that lose it fail their readiness wait loudly.
"""

from __future__ import annotations

import socket

LOOPBACK = "127.0.0.1"


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])
