"""``python -I -S _reaper.py EXIT_FILE -- CMD...``: run CMD, record its exit code.

Each workload runs under this small parent, in its own session, so that the workload's exit
code survives an agent that died or restarted meanwhile: the reaper writes it to EXIT_FILE
(atomically) and the agent, or its successor, reads it. Ctrl-C sent to the workload's
process group reaches the command with its default meaning; the reaper itself only waits.
A command killed by signal N is recorded as 128+N, as a shell reports it.
"""

import os
import signal
import subprocess
import sys


def main(argv: list[str]) -> int:
    if len(argv) < 3 or argv[1] != "--":
        print("usage: python -I -S _reaper.py EXIT_FILE -- CMD...", file=sys.stderr)
        return 2
    exit_file, command = argv[0], argv[2:]
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        # A handler (not SIG_IGN): the command gets the default disposition after exec.
        signal.signal(sig, lambda *_: None)
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
        while True:
            try:
                returncode = child.wait()
                break
            except InterruptedError:
                continue
        code = returncode if returncode >= 0 else 128 - returncode
    tmp = f"{exit_file}.tmp"
    with open(tmp, "w") as f:
        f.write(f"{code}\n")
    os.replace(tmp, exit_file)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
