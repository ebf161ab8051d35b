"""Harness for the CUDA interceptor's tests: build it, run its C test cases.

The build goes to ``$ALNAIR_CUDA_BUILD_DIR`` when set (a CI cache), else to a session
temporary directory; nothing is written into the repository. Each C case of
``native/cuda_intercept/tests/cases.txt`` runs through ``tests/run_tests.sh``, which gives
it a fresh workspace under ``<build>/<variant>/workspaces/<case>``; the region reader tests
decode the regions those runs leave behind.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
NATIVE = REPO / "native" / "cuda_intercept"
VARIANTS = ("release", "asan", "tsan")


def c_cases() -> list[str]:
    """Names of the C test cases, in file order."""
    names = []
    for line in (NATIVE / "tests" / "cases.txt").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            names.append(line.split()[0])
    return names


def sanitizer_runtime(variant: str) -> str:
    """Path of the sanitizer runtime that must be preloaded first ('' for release)."""
    if variant == "release":
        return ""
    lib = {"asan": "libasan.so", "tsan": "libtsan.so"}[variant]
    out = subprocess.run(["gcc", f"-print-file-name={lib}"], capture_output=True, text=True)
    return out.stdout.strip()


@dataclass
class NativeBuild:
    """Builds variants on demand and runs C cases, each at most once per session."""

    root: Path
    built: dict[str, Path] = field(default_factory=dict)
    ran: dict[tuple[str, str], subprocess.CompletedProcess[str]] = field(default_factory=dict)

    def make(self, *targets: str, variant: str = "release") -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["make", "-C", str(NATIVE), f"BUILD_DIR={self.root}", f"VARIANT={variant}", *targets],
            capture_output=True,
            text=True,
            timeout=600,
        )

    def out_dir(self, variant: str) -> Path:
        if variant not in self.built:
            result = self.make("tests", variant=variant)
            assert result.returncode == 0, f"make VARIANT={variant} tests failed:\n{result.stdout}\n{result.stderr}"
            self.built[variant] = self.root if variant == "release" else self.root / variant
        return self.built[variant]

    def run_case(self, variant: str, case: str, *, again: bool = False) -> subprocess.CompletedProcess[str]:
        """Run a C case once (cached: region reader tests reuse its workspace); ``again`` reruns."""
        key = (variant, case)
        if again or key not in self.ran:
            out = self.out_dir(variant)
            self.ran[key] = subprocess.run(
                [str(NATIVE / "tests" / "run_tests.sh"), str(out), sanitizer_runtime(variant), case],
                capture_output=True,
                text=True,
                timeout=300,
            )
        return self.ran[key]

    def workspace(self, variant: str, case: str) -> Path:
        result = self.run_case(variant, case)
        assert result.returncode == 0, result.stdout + result.stderr
        return self.out_dir(variant) / "workspaces" / case
