"""An engine's memory as SGLang's memory saver holds it, for the gpu tests: torch_memory_saver regions.

Run under torch_memory_saver's preload hook (``configure_subprocess()`` in the parent, as SGLang starts its
scheduler). The ``weights`` region (CPU backup on, as ``--enable-weights-cpu-backup``) holds a small
deterministic language model (float32, seeded) plus ``--filler-gib`` GiB of patterned bytes that stand for the
rest of the weights; the ``kv_cache`` region (no backup) ``--kv-gib`` GiB. Prints ``ready <pid> <uuid>``, then
reads commands from stdin, one answer line each:

* ``fingerprint`` -> ``fingerprint <json>``: greedy tokens and their logprobs for three fixed prompts, in the
  shape :class:`servectl.service.fingerprint.Fingerprint` reads, plus ``checksum`` of the filler.
* ``release`` -> ``released <seconds>``: pause ``kv_cache`` then ``weights`` (SGLang's order).
* ``resume`` -> ``resumed <seconds>``: resume ``weights`` then ``kv_cache``.
* ``flip`` (while released) -> ``flipped``: one weight of the model's first layer written in the CPU backup.
* ``exit``.

``--misuse pause-twice|resume-unpaused`` does that instead and should not come back: the library ends the
process (exit 1), as it ends SGLang's scheduler.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")

import torch
import torch_memory_saver

SAVER = torch_memory_saver.torch_memory_saver
PROMPTS = ((11, 42, 7), (3, 1999, 512, 77, 8), (1024,))
VOCAB, HIDDEN, LAYERS, TOKENS = 8192, 1024, 4, 8


class Model:
    def __init__(self, device: str) -> None:
        gen = torch.Generator(device="cpu").manual_seed(38)
        scale = HIDDEN**-0.5
        self.embed = (torch.randn(VOCAB, HIDDEN, generator=gen) * 1.0).to(device)
        self.layers = [(torch.randn(HIDDEN, HIDDEN, generator=gen) * 2 * scale).to(device) for _ in range(LAYERS)]
        self.out = (torch.randn(HIDDEN, VOCAB, generator=gen) * 4 * scale).to(device)

    @torch.no_grad()
    def greedy(self, prompt: tuple[int, ...]) -> dict[str, object]:
        context = list(prompt)
        tokens, logprobs = [], []
        for _ in range(TOKENS):
            h = self.embed[torch.tensor(context, device=self.embed.device)].mean(dim=0)
            for w in self.layers:
                h = torch.tanh(h @ w)
            lp = torch.log_softmax(h @ self.out, dim=-1)
            nxt = int(torch.argmax(lp))
            tokens.append(str(nxt))
            logprobs.append(float(lp[nxt]))
            context.append(nxt)
        return {"prompt": " ".join(map(str, prompt)), "tokens": tokens, "logprobs": logprobs}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--card", type=int, default=0)
    parser.add_argument("--filler-gib", type=float, default=8.0)
    parser.add_argument("--kv-gib", type=float, default=4.0)
    parser.add_argument("--misuse", choices=("pause-twice", "resume-unpaused"))
    args = parser.parse_args()
    torch.cuda.set_device(args.card)
    device = f"cuda:{args.card}"
    with SAVER.region(tag="weights", enable_cpu_backup=True):
        model = Model(device)
        filler = torch.arange(int(args.filler_gib * 2**30) // 8, dtype=torch.int64, device=device)
        filler.mul_(2654435761)  # in place: a temporary would stay cached in the region's pool
    with SAVER.region(tag="kv_cache"):
        kv = torch.zeros(int(args.kv_gib * 2**30), dtype=torch.uint8, device=device)
    torch.cuda.synchronize()
    uuid = str(torch.cuda.get_device_properties(args.card).uuid)
    print(f"ready {os.getpid()} {uuid}", flush=True)
    if args.misuse == "pause-twice":
        SAVER.pause("weights")
        SAVER.pause("weights")
        print("survived", flush=True)
        return
    if args.misuse == "resume-unpaused":
        SAVER.resume("weights")
        print("survived", flush=True)
        return
    for line in sys.stdin:
        command = line.strip()
        if command == "fingerprint":
            samples = [model.greedy(p) for p in PROMPTS]
            checksum = int(filler[::4096].sum())  # every 4096th of the filler's words
            print("fingerprint " + json.dumps({"samples": samples, "checksum": checksum}), flush=True)
        elif command == "release":
            torch.cuda.synchronize()
            began = time.perf_counter()
            SAVER.pause("kv_cache")
            SAVER.pause("weights")
            torch.cuda.synchronize()
            print(f"released {time.perf_counter() - began:.4f}", flush=True)
        elif command == "resume":
            began = time.perf_counter()
            SAVER.resume("weights")
            SAVER.resume("kv_cache")
            torch.cuda.synchronize()
            print(f"resumed {time.perf_counter() - began:.4f}", flush=True)
        elif command == "flip":
            backup = SAVER.get_cpu_backup(model.layers[0], zero_copy=True)
            backup[0, 0] = 1.0e4  # one weight, written where the resume copies from
            print("flipped", flush=True)
        elif command == "exit":
            break
    del kv, filler, model


if __name__ == "__main__":
    main()
