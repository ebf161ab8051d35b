"""The gang cycle knows the engine only through ``GangHost``, and the engine is one.

No type checker runs in CI, so this pins what a checker would: the engine has every member
the protocol names, with the same parameters, and ``_gang_cycle`` does not import the
engine (the circle between them stays broken).
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import alnair_scheduler._gang_cycle as gang_cycle
from alnair_scheduler._engine import Engine
from alnair_scheduler._gang_cycle import GangHost

MEMBERS = [n for n in vars(GangHost) if not n.startswith("_")]


def test_engine_has_every_member_of_the_gang_host() -> None:
    assert MEMBERS, "GangHost names no members"
    engine = Engine(None, None, instance="t", default_profile=None,  # type: ignore[arg-type]
                    scheduler_name="alnair-scheduler")
    for name in MEMBERS:
        assert hasattr(engine, name), f"Engine lacks GangHost.{name}"
        declared = vars(GangHost)[name]
        if isinstance(declared, property):
            continue
        want = list(inspect.signature(declared).parameters.values())
        got = list(inspect.signature(getattr(Engine, name)).parameters.values())
        assert [(p.name, p.kind, p.default) for p in got] == \
            [(p.name, p.kind, p.default) for p in want], f"Engine.{name} differs from GangHost"
        assert inspect.iscoroutinefunction(getattr(Engine, name)) == \
            inspect.iscoroutinefunction(declared), f"Engine.{name}: async or not differs"


def test_gang_cycle_does_not_import_the_engine() -> None:
    tree = ast.parse(Path(gang_cycle.__file__).read_text())
    imported = {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    imported |= {a.name for node in ast.walk(tree) if isinstance(node, ast.Import)
                 for a in node.names}
    assert not any(m and m.rsplit(".", 1)[-1] == "_engine" for m in imported), imported
