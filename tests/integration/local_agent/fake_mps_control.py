#!/usr/bin/env python3
"""A stand-in for ``nvidia-cuda-mps-control`` (part of the fake GPU stack: CI has no GPU).

``-d`` starts a daemon in the background, as the real one does: it creates
``$CUDA_MPS_PIPE_DIRECTORY/control``, records its pid and the environment it was started with
(``$CUDA_MPS_LOG_DIRECTORY/started.json``, one JSON line per start) and waits until killed.
Without arguments it reads one command from stdin, as the real one: ``get_server_list``
answers (exit 0) while the daemon lives and fails (exit 1) otherwise; ``quit`` stops it.
"""

import json
import os
import signal
import sys
import time
from pathlib import Path


def main() -> int:
    pipe = Path(os.environ["CUDA_MPS_PIPE_DIRECTORY"])
    logs = Path(os.environ["CUDA_MPS_LOG_DIRECTORY"])
    pid_file = pipe / "daemon.pid"
    if sys.argv[1:] == ["-d"]:
        if os.fork():
            return 0
        os.setsid()
        devnull = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # a daemon lets go of its starter's output
            os.dup2(devnull, fd)
        pid_file.write_text(str(os.getpid()))
        with open(logs / "started.json", "a") as f:
            f.write(json.dumps({k: os.environ.get(k) for k in (
                "CUDA_VISIBLE_DEVICES", "CUDA_MPS_PIPE_DIRECTORY", "CUDA_MPS_LOG_DIRECTORY")}) + "\n")
        (pipe / "control").touch()
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
        while True:
            time.sleep(1)
    command = sys.stdin.readline().strip()
    try:
        pid = int(pid_file.read_text())
        os.kill(pid, 0)
    except (OSError, ValueError):
        print("Cannot find MPS control daemon process", file=sys.stderr)
        return 1
    if command == "get_server_list":
        return 0
    if command == "quit":
        os.kill(pid, signal.SIGTERM)
        return 0
    print(f"unknown command {command}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
