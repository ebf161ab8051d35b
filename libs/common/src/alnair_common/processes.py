"""Child processes that do not outlive their parent.

A supervisor killed with SIGKILL (a CI time-out, the OOM killer, ``kill -9`` of
``alnair up``) runs no clean-up; its children, each in its own session, would be re-parented
to init and keep running, holding ports and GPUs. Linux's parent-death signal
(``PR_SET_PDEATHSIG``) has the kernel deliver a signal to each child when its parent dies.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
import threading
from collections.abc import Callable

_PR_SET_PDEATHSIG = 1


def die_with_parent(sig: signal.Signals = signal.SIGKILL) -> Callable[[], None] | None:
    """A pre-exec hook arming ``sig`` on parent death, or None where it cannot apply.

    The hook only calls an already-resolved libc function, which is safe between fork and
    exec even with other threads around. The signal fires when the *thread* that forked
    exits, so it is armed only from the main thread (where the event loop runs).
    """
    if not sys.platform.startswith("linux"):
        return None
    if threading.current_thread() is not threading.main_thread():
        return None
    libc_name = ctypes.util.find_library("c")
    if libc_name is None:
        return None
    prctl = ctypes.CDLL(libc_name, use_errno=True).prctl
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong,
                      ctypes.c_ulong]

    parent = os.getpid()

    def arm() -> None:
        prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:  # the parent died between fork and here: no signal comes
            os.kill(os.getpid(), sig)

    return arm
