"""A local workload as submitted by `alnair run`, validated at the edge."""

from __future__ import annotations

import re
from dataclasses import dataclass

from alnair.v1 import common_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_common import PermanentError

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9_]{0,61}[a-z0-9])?$")


@dataclass(frozen=True)
class Submission:
    uid: str
    name: str
    command: tuple[str, ...]
    memory_gib: int
    compute_percent: int
    message: wl.Workload

    @classmethod
    def from_proto(cls, w: wl.Workload) -> Submission:
        problems = []
        if not re.fullmatch(r"[A-Za-z0-9_-]{1,64}", w.ref.uid):
            problems.append(f"uid {w.ref.uid!r} must be 1-64 letters, digits, '-' or '_'")
        if not _NAME.match(w.ref.name):
            problems.append(f"name {w.ref.name!r} must be lower-case letters, digits, '-' or "
                            "'_', 1-63 characters, starting and ending alphanumeric")
        if w.ref.mode != common_pb2.MODE_LOCAL:
            problems.append("ref.mode must be MODE_LOCAL for `alnair.workload.submit`")
        if not w.command or not w.command[0]:
            problems.append("command is empty: give the program to run after `--`")
        if not 1 <= w.request.compute_percent <= 100:
            problems.append(f"compute {w.request.compute_percent} % is outside 1..100 "
                            "(percent of one GPU)")
        if problems:
            raise PermanentError(f"workload {w.ref.name or w.ref.uid or '?'} rejected: "
                                 + "; ".join(problems))
        return cls(w.ref.uid, w.ref.name, tuple(w.command), w.request.memory_gib,
                   w.request.compute_percent, w)
