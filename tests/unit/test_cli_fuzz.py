"""Any argument list to any `alnair` command: a message and a non-zero exit, never a traceback.

The commands run in-process (typer's runner) against a data directory where no platform
runs, so every input is judged by the validation before the bus; `up` is only given
``--gpus`` values that are not a simulated spec, so it never starts a platform.
"""

from __future__ import annotations

import atexit
import re
import shutil
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from alnair_cli.__main__ import app

DATA_DIR = Path(tempfile.mkdtemp(prefix="alnair-fuzz-"))
atexit.register(shutil.rmtree, DATA_DIR, ignore_errors=True)  # made at import: no fixture
OPTIONS = ["--gpu-memory", "--gpu-compute", "--name", "--wait", "--subject", "--count",
           "--requests", "--no-requests", "--json", "--all", "-a", "--follow", "-f",
           "--nats-url", "--mongo-url", "--database", "--collection", "--", "-x", "--bogus"]
NUMBERS = st.one_of(st.integers(-(2**70), 2**70), st.floats(allow_nan=True)).map(str)
TEXT = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=20)
WORDS = st.one_of(st.sampled_from(OPTIONS), NUMBERS, TEXT,
                  st.sampled_from(["", ".", "foo..bar", "alnair.>", ">.x", "*", "sim:2x80",
                                   "sim:abc", "nats://", "mongodb://x", "train", "-1", "0"]))
COMMANDS = ["run", "ps", "logs", "status", "events", "profile"]
runner = CliRunner()


def invoke(argv: list[str]):  # type: ignore[no-untyped-def]
    return runner.invoke(app, argv, env={"ALNAIR_HOME": str(DATA_DIR), "ALNAIR_NATS_URL": "",
                                         "COLUMNS": "200"})


def assert_clean_refusal(argv: list[str]) -> None:
    result = invoke(argv)
    shown = result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), (
        f"alnair {argv!r} raised {result.exception!r}\n{shown}")
    assert "Traceback" not in shown, f"alnair {argv!r} printed a traceback:\n{shown}"
    if "--help" not in argv:
        assert result.exit_code != 0, f"alnair {argv!r} exited 0 with no platform:\n{shown}"
        assert shown.strip(), f"alnair {argv!r} failed without saying why"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(command=st.sampled_from(COMMANDS), args=st.lists(WORDS, max_size=6))
def test_any_arguments_to_any_command(command: str, args: list[str]) -> None:
    assert_clean_refusal([command, *args])


@settings(max_examples=100, deadline=None)
@given(spec=st.one_of(TEXT, st.from_regex(r"sim:[0-9a-z]{0,6}x?[0-9a-z-]{0,6}", fullmatch=True)))
def test_up_refuses_a_bad_gpu_spec_before_starting(spec: str) -> None:
    good = re.fullmatch(r"sim:(\d+)x(\d+)", spec.strip())
    if good and 1 <= int(good.group(1)) <= 64 and 1 <= int(good.group(2)) <= 4096:
        return  # a valid spec would start a platform
    result = invoke(["up", "--data-dir", str(DATA_DIR / "up"), "--gpus", spec])
    assert result.exit_code == 2, result.output
    assert "--gpus" in result.output and "Traceback" not in result.output
    assert not (DATA_DIR / "up" / "run" / "platform.json").exists()


def test_the_inputs_that_gave_tracebacks() -> None:
    for argv, says in [
        (["run", "--gpu-memory", "4294967296", "--", "true"], "0..4096"),
        (["run", "--gpu-memory", "99999999999999999999", "--", "true"], "0..4096"),
        (["events", "--subject", "foo..bar", "--count", "1"], "empty token"),
        (["events", "--subject", "", "--count", "1"], "is empty"),
        (["up", "--gpus", "sim:abc"], "not a simulated GPU spec"),
    ]:
        result = invoke(argv)
        assert result.exit_code == 2, (argv, result.output)
        assert says in " ".join(result.output.split()), (argv, result.output)
