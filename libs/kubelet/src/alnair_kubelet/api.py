"""The generated kubelet API modules, under stable names.

``deviceplugin`` / ``deviceplugin_grpc``: device plugin API v1beta1 (proto package
``v1beta1``); ``podresources`` / ``podresources_grpc``: PodResources API v1 (package ``v1``);
``csi`` / ``csi_grpc``: the Container Storage Interface v1.11 (package ``csi.v1``).
"""

from ._api import csi_v1_pb2 as csi
from ._api import csi_v1_pb2_grpc as csi_grpc
from ._api import deviceplugin_v1beta1_pb2 as deviceplugin
from ._api import deviceplugin_v1beta1_pb2_grpc as deviceplugin_grpc
from ._api import podresources_v1_pb2 as podresources
from ._api import podresources_v1_pb2_grpc as podresources_grpc

API_VERSION = "v1beta1"

__all__ = ["API_VERSION", "csi", "csi_grpc", "deviceplugin", "deviceplugin_grpc", "podresources", "podresources_grpc"]
