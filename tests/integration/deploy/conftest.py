"""The deployment tests share the manifest helpers of tests/unit/deploy (deploy_render)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "unit" / "deploy"))
