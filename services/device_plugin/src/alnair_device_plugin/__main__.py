"""Entrypoint: ``alnair-device-plugin`` or ``python -m alnair_device_plugin``."""

from alnair_common import run_service

from ._service import DevicePluginService


def main() -> None:
    run_service(DevicePluginService)


if __name__ == "__main__":
    main()
