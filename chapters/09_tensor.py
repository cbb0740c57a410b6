# Chapter 09 - a `Tensor` type: shape, dtype and data
#
# What: `Tensor((2, 3), "float32")` describes a tensor, and its `data` can be
# set from a torch tensor. The setter checks the shape and dtype against the
# description and keeps a TVM view of the same memory, made through DLPack.
# `Tensor.of(t)` does both steps for a torch tensor `t`: describe it, hold it.
# The JIT also hands its results back as torch tensors, through DLPack again.
#
# Why: the compiler needs to know shapes and dtypes *before* it sees any data,
# because Relax types (and the loops TVM generates) are specialised to them.
# `Tensor` is that description; chapter 10 reads it from parameter
# annotations. The data lives in torch because that is where users have it.
# DLPack is the common in-memory tensor format that torch, TVM, numpy and
# others agree on: converting through it passes a pointer plus shape and
# strides, with no copy, so TVM computes directly on torch's memory.
#
# What to look at: a write through torch is visible through the TVM view
# (same memory), a wrongly shaped tensor is refused, and `one_plus_one()` from
# chapter 08 now returns `tensor(2, dtype=torch.int32)`.
#
# Run: python chapters/09_tensor.py
import importlib

import torch
import tvm

ch08 = importlib.import_module("08_run")


def dtype_name(value: torch.Tensor) -> str:
    return str(value.dtype).removeprefix("torch.")  # torch.float32 -> "float32", TVM's spelling


class Tensor:
    def __init__(self, shape, dtype):
        self.shape = tuple(shape)
        self.dtype = dtype
        self._data = None

    def __repr__(self):
        return f"Tensor({self.shape}, {self.dtype!r})"

    @classmethod
    def of(cls, value: torch.Tensor):
        """A Tensor described by a torch tensor and holding it."""
        tensor = cls(value.shape, dtype_name(value))
        tensor.data = value
        return tensor

    @property
    def data(self) -> tvm.runtime.Tensor:
        if self._data is None:
            raise ValueError(f"{self} has no data yet; assign a torch tensor to .data")
        return self._data

    @data.setter
    def data(self, value: torch.Tensor):
        if tuple(value.shape) != self.shape:
            raise ValueError(f"{self} cannot hold data of shape {tuple(value.shape)}")
        if dtype_name(value) != self.dtype:
            raise TypeError(f"{self} cannot hold data of dtype {value.dtype}")
        self._data = tvm.runtime.from_dlpack(value)


class JIT(ch08.JIT):
    def __call__(self, *args):
        out = super().__call__(*args)
        return torch.from_dlpack(out) if isinstance(out, tvm.runtime.Tensor) else out


jit = JIT.decorator


if __name__ == "__main__":
    x = Tensor((2, 3), "float32")
    source = torch.zeros(2, 3)
    x.data = source
    print(x, "holds", repr(x.data))

    source[0, 0] = 42.0  # write through torch ...
    print("after a write through torch, the TVM view reads", x.data.numpy()[0, 0])
    assert x.data.numpy()[0, 0] == 42.0  # ... and read through TVM: one buffer, no copy

    for wrong in (torch.zeros(3, 3), torch.zeros(2, 3, dtype=torch.float64)):
        try:
            x.data = wrong
            raise AssertionError("a mismatching tensor should be refused")
        except (ValueError, TypeError) as err:
            print("refused:", err)

    @jit
    def one_plus_one():
        return 1 + 1

    out = one_plus_one()
    print("one_plus_one() now returns", repr(out))
    held = Tensor.of(torch.ones(4, dtype=torch.int32))
    print("Tensor.of(torch.ones(4, dtype=torch.int32)) describes its data as", held)

    print("Checking: Tensor.of describes its data, and results come back as torch tensors")
    assert (held.shape, held.dtype) == ((4,), "int32")
    assert isinstance(out, torch.Tensor) and out.item() == 2
