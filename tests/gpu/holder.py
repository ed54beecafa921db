"""Hold memory on one GPU for the gpu tests (a stand-in for a foreign process on the card).

Allocates ``--gib`` GiB on card ``--card`` (NVML numbering: CUDA_DEVICE_ORDER=PCI_BUS_ID), then prints
``ready <pid> <uuid>``. It then either sleeps ``--hold-seconds``, or reads commands from stdin:
``meminfo`` answers ``meminfo <free_bytes> <total_bytes>`` from ``torch.cuda.mem_get_info``; ``release``
frees the block and empties torch's cache (cudaFree: the process keeps only its CUDA context, as an engine
that released its memory occupation does) and answers ``released``; ``take <gib>`` allocates a new block of
that size and answers ``taken``; ``exit`` or end of input ends it.
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
    held: torch.Tensor | None = block
    del block
    for line in sys.stdin:
        words = line.split()
        command, rest = (words[0], words[1:]) if words else ("", [])
        if command == "meminfo":
            free, total = torch.cuda.mem_get_info(args.card)
            print(f"meminfo {free} {total}", flush=True)
        elif command == "release":
            held = None
            torch.cuda.synchronize()
            torch.cuda.empty_cache()  # hands the cached blocks back to the driver (cudaFree)
            print("released", flush=True)
        elif command == "take":
            held = torch.empty(int(float(rest[0]) * 2**30), dtype=torch.uint8, device=f"cuda:{args.card}")
            held.zero_()
            torch.cuda.synchronize()
            print("taken", flush=True)
        elif command == "exit":
            break
    del held


if __name__ == "__main__":
    main()
