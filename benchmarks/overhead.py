"""Cached-call overhead of a @jit function on tiny tensors, next to the raw VM call and torch.add."""
import sys
import timeit

import torch
import tvm

import babytriton as bt


def per_call_us(stmt, env, number):
    best = min(timeit.repeat(stmt, globals=env, number=number, repeat=5))
    return best / number * 1e6


def main(device="cpu"):
    target = "gpu" if device == "cuda" else "cpu"

    @bt.jit(target=target)
    def add(a: bt.Tensor((2, 3), "float32"), b: bt.Tensor((2, 3), "float32")):
        return a + b

    a, b = torch.ones(2, 3, device=device), torch.ones(2, 3, device=device)
    add(a, b)
    kernel = add.compile(a, b)
    raw = kernel.vm_function(0)
    ta, tb = tvm.runtime.from_dlpack(a), tvm.runtime.from_dlpack(b)
    env = dict(add=add, a=a, b=b, raw=raw, ta=ta, tb=tb, torch=torch)
    number = 20000
    rows = {
        "babytriton cached call (torch in, torch out)": per_call_us("add(a, b)", env, number),
        "raw VM call (tvm tensors)": per_call_us("raw(ta, tb)", env, number),
        "torch.add": per_call_us("torch.add(a, b)", env, number),
    }
    for name, us in rows.items():
        print(f"{device:5s} {name:48s} {us:7.2f} us")
    return rows


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "cpu")


def breakdown(device="cuda"):
    """Where a cached call's time goes: key, argument conversion, VM call, result wrapping."""
    a = torch.ones(2, 3, device=device)
    v = tvm.runtime.from_dlpack(a)
    env = dict(a=a, v=v, tvm=tvm, torch=torch)
    for stmt in ("(a.dtype, a.shape, a.device)", "tvm.runtime.from_dlpack(a)", "torch.from_dlpack(v)"):
        print(f"{device:5s} {stmt:48s} {per_call_us(stmt, env, 20000):7.2f} us")
