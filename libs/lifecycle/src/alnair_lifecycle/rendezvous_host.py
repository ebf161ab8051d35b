"""``python rendezvous_host.py --run-id ID --dir DIR [--host H] [--port P]``

Hosts one gang's torch elastic c10d rendezvous outside its workers: the TCPStore server
that torchrun's ``--rdzv-backend=c10d`` would otherwise start inside one of the workers, so
any worker may die without taking the rendezvous with it. Run by the adapter with the job's
own Python (it needs torch and the standard library only: no Alnair package, no bus
credentials).

It writes ``DIR/endpoint`` (``host:port``, once listening; port 0 picks a free one) and
appends every round that closes to ``DIR/rounds.jsonl`` as one JSON object per line:
``{"round": n, "members": [[addr, pid, local_id], ...]}`` (torchrun's node descriptors:
the worker's host name and its torchrun process id; rounds numbered from 1, torch's own
count plus one, so that a round can never be confused with "none yet"). The adapter relays those rounds on the
bus. SIGTERM stops it.

The rendezvous state is a pickle that the workers write into the store; it is read here
with an unpickler that admits only the classes a rendezvous state is made of, so a process
that writes something else into the store cannot run code in this one.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import json
import os
import pickle
import signal
import sys
import time

_RENDEZVOUS = "torch.distributed.elastic.rendezvous.dynamic_rendezvous"
_ALLOWED = {(_RENDEZVOUS, "_RendezvousState"), (_RENDEZVOUS, "_NodeDesc"),
            ("datetime", "datetime"), ("datetime", "timedelta"), ("datetime", "timezone"),
            ("builtins", "set"), ("builtins", "dict")}
_EMPTY = b"Y2FuaW1hZGFt"  # what the c10d backend writes before the first state


class _StateUnpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str):  # type: ignore[no-untyped-def]
        if (module, name) in _ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a rendezvous state")


def closed_round(value: bytes) -> tuple[int, list[list]] | None:
    """(round, members) of a stored rendezvous state that is complete; None otherwise."""
    if not value or value == _EMPTY:
        return None
    import io
    state = _StateUnpickler(io.BytesIO(base64.b64decode(value))).load()
    if not getattr(state, "complete", False):
        return None
    members = sorted([n.addr, int(n.pid), int(n.local_id)] for n in state.participants)
    return int(state.round) + 1, members


def _write_atomically(path: str, text: str) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--dir", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--poll-seconds", type=float, default=0.2)
    args = parser.parse_args(argv)

    from torch.distributed import TCPStore

    stop = []
    signal.signal(signal.SIGTERM, lambda *_: stop.append(True))
    store = TCPStore(args.host, args.port, is_master=True, wait_for_workers=False,
                     multi_tenant=True, timeout=datetime.timedelta(seconds=30))
    _write_atomically(os.path.join(args.dir, "endpoint"), f"{args.host}:{store.port}\n")
    print(f"rendezvous {args.run_id} hosted on {args.host}:{store.port}", flush=True)
    key = f"torch.rendezvous.{args.run_id}"
    last = None
    rounds = os.path.join(args.dir, "rounds.jsonl")
    while not stop:
        try:
            found = closed_round(store.get(key)) if store.check([key]) else None
        except (pickle.UnpicklingError, ValueError, EOFError, AttributeError) as e:
            print(f"rendezvous state unreadable, skipped: {e}", file=sys.stderr, flush=True)
            found = None
        if found is not None and found[0] != last:
            last = found[0]
            with open(rounds, "a") as f:
                f.write(json.dumps({"round": found[0], "members": found[1]}) + "\n")
        time.sleep(args.poll_seconds)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
