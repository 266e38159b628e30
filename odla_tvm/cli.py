"""The ``odla-tvm`` command."""

from __future__ import annotations

import argparse
import sys

from . import demo
from .device import allocate_device, available_devices, get_device_info
from .types import ODLA_API_VERSION, DeviceInfo, OdlaError
from .version import __version__


def info(_args) -> None:
    import relay_bridge
    import targets

    print(f"odla-tvm {__version__}")
    print(f"ODLA API {ODLA_API_VERSION}")
    print(f"TVM {targets.tvm_version()}")
    print("devices:")
    for name in available_devices():
        device = allocate_device(None, name, 0)
        memory = get_device_info(device, DeviceInfo.TOTAL_MEMORY) / 2**30
        print(f"  {name.name} (index 0): {get_device_info(device, DeviceInfo.DEV_TYPE)}, "
              f"{memory:.1f} GiB, target {device.target.name}")
    print("targets:")
    for spec in targets.available_targets():
        print(f"  {spec.name}: {spec.target} ({spec.description})")
    ops = relay_bridge.registered_ops()
    print(f"ops lowered: {len(ops)}: {', '.join(ops)}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="odla-tvm", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("info", help="versions, devices and targets of this machine")
    demo_parser = commands.add_parser(
        "demo", help="build a small CNN through the ODLA API, compile it for this CPU, run and time it"
    )
    demo_parser.add_argument("--batch", type=int, default=1)
    demo_parser.add_argument("--runs", type=int, default=50)
    args = parser.parse_args(argv)
    try:
        if args.command == "info":
            info(args)
        else:
            demo.main(args.batch, args.runs)
    except OdlaError as err:
        print(f"odla-tvm: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
