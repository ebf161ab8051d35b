"""Alnair's dataset CSI node plugin (``alnair-dataset-csi``): see _node.py."""

from ._node import DatasetNode
from ._server import serve
from ._settings import DatasetCsiSettings

__all__ = ["DatasetCsiSettings", "DatasetNode", "serve"]
