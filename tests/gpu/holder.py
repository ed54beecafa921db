"""Hold memory on one GPU for the gpu tests (a stand-in for a foreign process on the card).

Allocates ``--gib`` GiB on card ``--card`` (NVML numbering: CUDA_DEVICE_ORDER=PCI_BUS_ID), then prints
``ready <pid> <uuid>``. It then either sleeps ``--hold-seconds``, or reads commands from stdin:
``meminfo`` answers ``meminfo <free_bytes> <total_bytes>`` from ``torch.cuda.mem_get_info``; ``exit`` or
end of input ends it.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")

import torch  # the device order must be set before CUDA initialises


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--card", type=int, default=0)
    parser.add_argument("--gib", type=float, default=4.0)
    parser.add_argument("--hold-seconds", type=float, default=None)
    args = parser.parse_args()
    torch.cuda.set_device(args.card)
    block = torch.empty(int(args.gib * 2**30), dtype=torch.uint8, device=f"cuda:{args.card}")
    block.zero_()
    torch.cuda.synchronize()
    uuid = str(torch.cuda.get_device_properties(args.card).uuid)
    print(f"ready {os.getpid()} {uuid}", flush=True)
    if args.hold_seconds is not None:
        time.sleep(args.hold_seconds)
        return
    for line in sys.stdin:
        command = line.strip()
        if command == "meminfo":
            free, total = torch.cuda.mem_get_info(args.card)
            print(f"meminfo {free} {total}", flush=True)
        elif command == "exit":
            break
    del block


if __name__ == "__main__":
    main()
