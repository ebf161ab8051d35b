"""``python rendezvous_host.py --run-id ID --dir DIR [--host H] [--port P] [--evict-dead-local]``

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

With ``--evict-dead-local`` (the local agent: its workers run on this machine) a member
whose process is gone is dropped at once: its last heartbeat is set to long ago, so the
survivors' next look at the state removes it the way torch removes a member whose keep-alive
lapsed — their new round need not wait ``keep_alive_interval × keep_alive_max_attempt`` for
it. Members of other machines (another address than this one's) are left to torch.

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
import socket
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
    state = _load(value)
    if not getattr(state, "complete", False):
        return None
    members = sorted([n.addr, int(n.pid), int(n.local_id)] for n in state.participants)
    return int(state.round) + 1, members


def _load(value: bytes):  # type: ignore[no-untyped-def]
    import io
    return _StateUnpickler(io.BytesIO(base64.b64decode(value))).load()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def evicted(value: bytes, here: str, alive=_alive) -> bytes | None:  # type: ignore[no-untyped-def]
    """The stored state with every member of address ``here`` whose process is gone marked
    as not heard from since 1970; None when there is none (or no state yet)."""
    if not value or value == _EMPTY:
        return None
    state = _load(value)
    long_ago = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
    gone = [n for n, heard in state.last_heartbeats.items()
            if heard != long_ago and n.addr == here and not alive(int(n.pid))]
    if not gone:
        return None
    for node in gone:
        state.last_heartbeats[node] = long_ago
    return base64.b64encode(pickle.dumps(state))


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
    parser.add_argument("--evict-dead-local", action="store_true",
                        help="drop a member of this machine as soon as its process is gone")
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
    here = socket.getfqdn()  # the address torch gives a worker of this machine
    while not stop:
        try:
            value = store.get(key) if store.check([key]) else b""
            if args.evict_dead_local:
                fresh = evicted(value, here)
                # Lost to a worker's own write: the next poll looks again.
                if fresh is not None and store.compare_set(key, value.decode(), fresh.decode()) == fresh:
                    print("dropped a member whose process is gone", flush=True)
            found = closed_round(value)
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
