"""Session fixture: one build of the CUDA interceptor per variant (see interceptor_harness)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from interceptor_harness import NativeBuild


@pytest.fixture(scope="session")
def native_build(tmp_path_factory: pytest.TempPathFactory) -> NativeBuild:
    if shutil.which("gcc") is None or shutil.which("make") is None:
        pytest.fail("the interceptor tests need gcc and make (apt-get install build-essential)")
    cache = os.environ.get("ALNAIR_CUDA_BUILD_DIR")
    root = Path(cache) if cache else tmp_path_factory.mktemp("cuda_intercept")
    return NativeBuild(root=root)
