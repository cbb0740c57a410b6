"""Bytes kept for the backward per call, and CPU forward+backward time, for corpus.BACKWARD at medium
size: babytriton (saving small forward values, or recomputing with BABYTRITON_SAVE_FOR_BACKWARD=0)
against torch eager. `PYTHONPATH=$PWD python benchmarks/saved_memory.py` (CPU; times are noisy)."""
import os
import sys
import time

import torch

import babytriton as bt

sys.path.insert(0, os.path.dirname(__file__))
import corpus  # noqa: E402


def saved_bytes(fn, args) -> int:
    """What autograd keeps for one call's backward (torch.autograd.graph.saved_tensors_hooks)."""
    kept = []

    def pack(t):
        kept.append(t)
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn(*args)
    seen, total = set(), 0
    for t in kept:   # an input saved twice is one buffer
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape))
        if key not in seen:
            seen.add(key)
            total += t.numel() * t.element_size()
    del out
    return total


def step_time(fn, args, repeat=10) -> float:
    def step():
        for a in args:
            a.grad = None
        out = fn(*args)
        out.backward(torch.ones_like(out))
    step()
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        step()
        best = min(best, time.perf_counter() - t)
    return best


def main(size="medium"):
    torch.set_num_threads(1)   # steadier on a shared machine; babytriton's pool follows torch's
    torch.manual_seed(0)
    for name in corpus.BACKWARD:
        w = corpus.by_name(name)
        args = [a.requires_grad_(a.is_floating_point()) for a in w.make(size, "cpu")]
        f = bt.jit(target="cpu")(w.bt_fn)
        ours, theirs = saved_bytes(f, args), saved_bytes(w.torch_fn, args)
        t_ours, t_theirs = step_time(f, args), step_time(w.torch_fn, args)
        shapes = " ".join("x".join(map(str, a.shape)) for a in args)
        print(f"{name:14s} {shapes:22s} saved: babytriton {ours / 2**20:8.3f} MiB  torch {theirs / 2**20:8.3f} MiB"
              f"   fwd+bwd: babytriton {t_ours * 1e3:7.2f} ms  torch {t_theirs * 1e3:7.2f} ms", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
