"""A kernel's values while it compiles. A block value is its element type, its shape (constexpr
sizes; () for a scalar) and how to compute its element at an index: a TIR expression that the
consumer inlines, or a read of the buffer it was materialised in. A pointer block is the tensor's
flat buffer and an int64 element offset per element. Python numbers stay Python numbers (they type
as Triton's Python scalars) until they meet a block."""
from __future__ import annotations

import dataclasses
from typing import Callable

import tvm
from tvm import tirx

from ..language import core


@dataclasses.dataclass(frozen=True)
class Block:
    dtype: core.dtype                       # the element type; a pointer_type for pointer blocks
    shape: tuple[int, ...]
    at: Callable[[tuple], tvm.ir.PrimExpr]  # the element (a pointer's: its int64 offset) at an index
    base: object = None                     # pointer blocks: the tensor's flat buffer
    buffer: object = None                   # where it was materialised, if it was

    @property
    def is_pointer(self) -> bool:
        return isinstance(self.dtype, core.pointer_type)

    @property
    def numel(self) -> int:
        n = 1
        for size in self.shape:
            n *= size
        return n

    def element(self, index: tuple) -> tvm.ir.PrimExpr:
        """The element at `index`, an index of a shape this block broadcasts to."""
        return self.at(broadcast_index(self.shape, index))


def broadcast_index(shape: tuple[int, ...], index: tuple) -> tuple:
    """The index into a block of `shape` of the element at `index` of a broadcast shape (aligned on
    the right; a size-1 axis reads its only element)."""
    index = tuple(index)[len(index) - len(shape):] if shape else ()
    return tuple(tirx.IntImm("int32", 0) if size == 1 else i for size, i in zip(shape, index))


def const(value, dtype: core.dtype) -> tvm.ir.PrimExpr:
    """A Python number as a TIR constant of `dtype`."""
    if dtype.is_bool():
        return tirx.const(bool(value), "bool")
    if dtype.is_floating():
        return tirx.const(float(value), dtype.tvm)
    return tirx.const(int(value), dtype.tvm)


def cast(expr: tvm.ir.PrimExpr, dtype: core.dtype) -> tvm.ir.PrimExpr:
    """`expr` converted to `dtype`; to int1 a comparison with zero (as Triton's cast to bool)."""
    if str(expr.ty.dtype) == dtype.tvm:
        return expr
    if dtype.is_bool():
        return expr != tirx.const(0, str(expr.ty.dtype))
    return tirx.Cast(dtype.tvm, expr)


def scalar(dtype: core.dtype, expr: tvm.ir.PrimExpr) -> Block:
    """A scalar (shape ()) block whose value is `expr`."""
    return Block(dtype, (), lambda index: expr)


def converted(block: Block, dtype: core.dtype) -> Block:
    """`block` with its elements converted to `dtype`."""
    if block.dtype == dtype:
        return block
    return Block(dtype, block.shape, lambda index: cast(block.at(index), dtype))


def reshaped(block: Block, shape: tuple[int, ...], at: Callable) -> Block:
    """A view of `block` with another shape: `at` maps its index to `block`'s."""
    return Block(block.dtype, shape, lambda index: block.at(at(index)), block.base)
