"""What users and the bus write is printed as it is: a "[/x]" in a name, path or message used
to kill the command with rich's MarkupError, and "[link=…]" turned text into a link."""

from __future__ import annotations

import pytest

from alnair.v1 import cache_pb2, common_pb2, platform_pb2
from alnair.v1 import workload_pb2 as wl
from alnair_cli._dataset import datasets_table
from alnair_cli._options import err, fail, out
from alnair_cli._profile import workload_view
from alnair_cli._ps import ps_table
from alnair_cli._status import status_table

HOSTILE = "x[/y] [link=http://evil.example]click[/link] [bold]b[/bold]"


def printed(renderable, width: int = 200) -> str:  # type: ignore[no-untyped-def]
    """What the commands' console prints, on one line (wrapped cells joined)."""
    before = out.width
    out.width = width
    try:
        with out.capture() as captured:
            out.print(renderable)
    finally:
        out.width = before
    return " ".join(captured.get().split())


def test_an_error_message_is_printed_as_written() -> None:
    with err.capture() as captured:
        exit_ = fail(f"cannot read file:///data/{HOSTILE}", 2)
    assert exit_.exit_code == 2
    assert f"error: cannot read file:///data/{HOSTILE}" in " ".join(captured.get().split())


@pytest.mark.parametrize("width", [80, 200])
def test_tables_print_names_paths_and_messages_as_written(width: int) -> None:
    w = wl.Workload(ref=common_pb2.WorkloadRef(uid="70b465f314404f58", name="job[/x]",
                                               mode=common_pb2.MODE_LOCAL),
                    phase=wl.WORKLOAD_PHASE_FAILED, message=HOSTILE)
    text = printed(ps_table([wl.WorkloadEvent(workload=w)], width), width)
    assert "job[/x]" in text and "[link=http://evil.example]click[/link]" in text, text
    status = cache_pb2.CacheDatasetStatus(dataset="d", phase=cache_pb2.CACHE_PHASE_FAILED,
                                          source=f"file:///data/{HOSTILE}", message=HOSTILE)
    text = printed(datasets_table([status], width), width)
    assert f"file:///data/{HOSTILE}".replace(" ", "") in text.replace(" ", ""), text
    platform = platform_pb2.PlatformStatus(nats_url="nats://127.0.0.1:4222", services=[
        platform_pb2.SupervisedService(name="cache-hydrator", state=platform_pb2.PROCESS_STATE_RUNNING,
                                       health=platform_pb2.HealthReport(checks={"tier": HOSTILE}))])
    text = printed(status_table(platform, width), width)
    assert "tier: x[/y]" in text and "[link=http://evil.example]click" in text, text


def test_a_profile_prints_its_names_as_written() -> None:
    text = printed(workload_view({"namespace": "local", "name": "n[/x]", "uid": "u",
                                  "owners": [{"kind": "Job", "name": HOSTILE}]}))
    assert "local/n[/x]" in text and f"Job/{HOSTILE}" in text, text
