"""Each import-linter contract of pyproject.toml breaks when its rule is broken.

``test_contract_tooling`` proves the real tree keeps every contract; this proves the
contracts are not vacuous. Each case builds a tiny tree of stand-in packages with the
project's root-package names and one forbidden import, and runs ``lint-imports`` with the
project's own configuration on it: the contract named must be reported broken, and only it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
CONFIG = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
CONTRACTS = {c["name"] for c in CONFIG["contracts"]}

# (module path in the stand-in tree, its source, the contract it must break)
VIOLATIONS = [
    ("alnair_cli/_profile.py", "from alnair_profiler._store import open_store\n",
     "Private modules are imported only from within their own package"),
    ("alnair_cli/_logs.py", "import alnair_local_agent._workspace\n",
     "Private modules are imported only from within their own package"),
    ("alnair_scheduler/_engine.py", "import alnair_device_plugin\n",
     "Services never import each other"),
    ("alnair_common/bus.py", "import alnair_scheduler\n",
     "alnair_common depends on no service"),
    ("alnair_profiler/_prometheus.py", "import subprocess\n",
     "Brains talk to no outside world (no kubernetes, grpc, pynvml, subprocess)"),
    ("alnair_lifecycle/_publisher.py", "import alnair_local_agent\n",
     "Shared libraries depend on no service and not on the CLI"),
    ("alnair_gpu/_nvml.py", "import alnair_cli\n",
     "Shared libraries depend on no service and not on the CLI"),
    ("alnair_exporter/_service.py", "import alnair_cli\n",
     "No service imports the CLI"),
    ("alnair_exporter/_sources.py", "import nats\n",
     "Services reach NATS only through alnair_common.bus"),
    ("alnair_scheduler/_store.py", "from nats.js import JetStreamContext\n",
     "Services reach NATS only through alnair_common.bus"),
]


def lint(tree: Path) -> str:
    """lint-imports over ``tree`` with the project's contracts; its report."""
    config = tree / "pyproject.toml"
    config.write_text((ROOT / "pyproject.toml").read_text())
    env = {**os.environ, "PYTHONPATH": str(tree)}
    result = subprocess.run([str(BIN / "lint-imports"), "--no-cache", str(config)],
                            cwd=tree, env=env, capture_output=True, text=True, timeout=60)
    return result.stdout + result.stderr


def stand_in_tree(tmp_path: Path) -> Path:
    for package in CONFIG["root_packages"]:
        (tmp_path / package).mkdir()
        (tmp_path / package / "__init__.py").write_text("")
    (tmp_path / "alnair_profiler" / "_store.py").write_text("def open_store(): ...\n")
    (tmp_path / "alnair_local_agent" / "_workspace.py").write_text("")
    return tmp_path


def test_every_case_names_a_contract_that_exists() -> None:
    assert {name for _, _, name in VIOLATIONS} <= CONTRACTS


def test_clean_stand_in_tree_keeps_every_contract(tmp_path: Path) -> None:
    report = lint(stand_in_tree(tmp_path))
    assert f"Contracts: {len(CONTRACTS)} kept, 0 broken." in report, report


@pytest.mark.parametrize(("module", "source", "contract"), VIOLATIONS,
                         ids=[m for m, _, _ in VIOLATIONS])
def test_violation_breaks_its_contract(tmp_path: Path, module: str, source: str, contract: str) -> None:
    tree = stand_in_tree(tmp_path)
    (tree / module).write_text(source)
    report = lint(tree)
    assert f"{contract} BROKEN" in report, report
    assert f"Contracts: {len(CONTRACTS) - 1} kept, 1 broken." in report, report
