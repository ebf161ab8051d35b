"""``python -I -S _reaper.py EXIT_FILE -- CMD...``: run CMD, record its exit code.

Each workload runs under this small parent, in its own session, so that the workload's exit
code survives an agent that died or restarted meanwhile: the reaper writes it to EXIT_FILE
(atomically) and the agent, or its successor, reads it. Ctrl-C sent to the workload's
process group reaches the command with its default meaning; the reaper itself only waits.
A command killed by signal N is recorded as 128+N, as a shell reports it. Before the exit
code, what the reaped processes used in all (``getrusage`` of the children: CPU time, the
largest peak resident memory, block I/O) goes to ``usage.json`` beside EXIT_FILE: a workload
that ends within one of the exporter's sampling periods has no series, but has these.

The command's pid goes to ``child.pid`` beside EXIT_FILE (a training worker's torchrun is
known by it in its rendezvous). The reaper is the workload's child subreaper: processes the
command left behind — a trainer that torchrun started in a session of its own, orphaned when
torchrun was killed — are reparented to it and ended when the command ends (SIGTERM, then
SIGKILL after two seconds), so a workload's processes end with it, as a container's do.
"""

import ctypes
import json
import os
import resource
import signal
import subprocess
import sys
import time

PR_SET_CHILD_SUBREAPER = 36


def _become_subreaper() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # not Linux: leftovers go to init, as before


def _children(pid: int) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            found.append(int(entry))
    return found


def _reap_all() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _end_leftovers() -> None:
    """End what the command left behind, whose parent this process became."""
    me = os.getpid()
    deadline = time.monotonic() + 2.0
    sig = signal.SIGTERM
    while True:
        _reap_all()
        left = _children(me)
        if not left:
            return
        if time.monotonic() > deadline:
            sig = signal.SIGKILL
        for pid in left:
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def _write_atomically(path: str, text: str) -> None:
    with open(f"{path}.tmp", "w") as f:
        f.write(text)
    os.replace(f"{path}.tmp", path)


def _record_usage(exit_file: str) -> None:
    """The reaped children's totals (the command and every process reaped here or by a
    process that waited for it), as the kernel counted them."""
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    usage = {"cpu_user_seconds": ru.ru_utime, "cpu_system_seconds": ru.ru_stime,
             "max_rss_bytes": ru.ru_maxrss * 1024,  # Linux counts KiB
             "disk_read_bytes": ru.ru_inblock * 512, "disk_write_bytes": ru.ru_oublock * 512}
    _write_atomically(os.path.join(os.path.dirname(exit_file), "usage.json"), json.dumps(usage) + "\n")


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -I -S _reaper.py EXIT_FILE -- CMD...", file=sys.stderr)
        return 2
    exit_file, command = argv[0], argv[2:]
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        # A handler (not SIG_IGN): the command gets the default disposition after exec.
        signal.signal(sig, lambda *_: None)
    _become_subreaper()
    try:
        env = dict(os.environ)
        preload = env.pop("ALNAIR_REAPER_LD_PRELOAD", None)
        if preload:
            env["LD_PRELOAD"] = preload
        child = subprocess.Popen(command, env=env)
    except OSError as e:
        print(f"alnair: cannot start {command[0]!r}: {e.strerror}", file=sys.stderr, flush=True)
        code = 127 if isinstance(e, FileNotFoundError) else 126
    else:
        _write_atomically(os.path.join(os.path.dirname(exit_file), "child.pid"), f"{child.pid}\n")
        while True:
            try:
                returncode = child.wait()
                break
            except InterruptedError:
                continue
        code = returncode if returncode >= 0 else 128 - returncode
        _end_leftovers()
        try:
            _record_usage(exit_file)
        except OSError as e:  # the exit code matters more: record it regardless
            print(f"alnair: cannot record the workload's usage: {e}", file=sys.stderr, flush=True)
    _write_atomically(exit_file, f"{code}\n")
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
