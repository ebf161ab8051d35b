"""Answering commands (``alnair.cmd.*``): kube-bridge and the local agent each carry out the
commands about their own objects and answer every one of them on ``alnair.cmd.result`` in the
same way, with the same checks."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable

from alnair.v1 import commands_pb2

from . import subjects
from .annotations import PREFIX as ANNOTATION_PREFIX
from .bus import Bus, publish_error
from .errors import PermanentError
from .logs import get_logger

log = get_logger("alnair.commands")


async def answer(bus: Bus, command_id: str, ref: commands_pb2.ObjectRef,
                 work: Callable[[], Awaitable[None]], *, obj: str) -> None:
    """Runs ``work`` and publishes the command's result: ok, or the reason of the
    PermanentError it raised (also published as an error about ``obj``). A TemporaryError
    propagates: the consumer retries the command later."""
    result = commands_pb2.CommandResult(command_id=command_id, object=ref, ok=True)
    try:
        await work()
    except PermanentError as e:
        result.ok, result.reason, result.permanent = False, str(e), True
        log.warning("command failed", command_id=command_id, reason=str(e))
        await publish_error(bus, code="command-failed", message=str(e), obj=obj)
    await bus.publish(subjects.cmd_result(), result, msg_id=f"result:{command_id}:{int(result.ok)}")


def check_annotation_keys(keys: Iterable[str]) -> None:
    """An AnnotateCommand must name at least one key, every one under ``ai.centaurus.io/``."""
    keys = list(keys)
    bad = [k for k in keys if not k.startswith(ANNOTATION_PREFIX)]
    if bad or not keys:
        raise PermanentError(f"annotations must be non-empty and under {ANNOTATION_PREFIX!r}; "
                             f"got {sorted(bad) or 'none'}")
