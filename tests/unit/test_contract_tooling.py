"""The committed generated code matches the .proto files; the contract and layering lint clean."""

from __future__ import annotations

import filecmp
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def test_generated_code_is_current(tmp_path: Path) -> None:
    subprocess.run([str(ROOT / "scripts" / "gen-proto"), str(tmp_path)], check=True,
                   env={"PATH": f"{BIN}:/usr/bin:/bin"}, capture_output=True)
    fresh = sorted(p.name for p in (tmp_path / "alnair" / "v1").iterdir())
    committed = ROOT / "proto" / "alnair" / "v1"
    assert fresh, "protoc generated nothing"
    stale = [n for n in fresh if not filecmp.cmp(tmp_path / "alnair" / "v1" / n, committed / n,
                                                  shallow=False)]
    assert stale == [], f"generated code is stale, run scripts/gen-proto: {stale}"
    generated = {p.name for p in committed.iterdir() if p.suffix in (".py", ".pyi")}
    assert generated == set(fresh), "a generated file has no .proto (or the reverse)"


def test_proto_files_pass_buf_lint() -> None:
    buf = shutil.which("buf", path=str(BIN)) or "buf"
    result = subprocess.run([buf, "lint"], cwd=ROOT / "proto", capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_layering_contracts_hold() -> None:
    result = subprocess.run([str(BIN / "lint-imports")], cwd=ROOT, capture_output=True,
                            text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 broken" in result.stdout


def test_no_service_touches_the_raw_jetstream_context() -> None:
    """import-linter sees imports, not attributes: ``bus.js``/``bus.nc`` are the bus package's."""
    import ast

    found = []
    for path in sorted((ROOT / "services").glob("*/src/**/*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Attribute) and node.attr in ("js", "nc"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: .{node.attr}")
    assert found == [], "use alnair_common.bus (DurableConsumer, StreamFollower, TypedKV.watch): " \
        + ", ".join(found)
