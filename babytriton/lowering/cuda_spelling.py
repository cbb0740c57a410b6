"""A CUDA kernel's TIR written in forms TVM's CUDA code generator prints as code nvcc accepts, once
nothing simplifies it any more (the last pass before code generation)."""
from __future__ import annotations

import torch
import tvm
import tvm_ffi
from tvm import tirx

_REINTERPRET = tvm.ir.Op.get("tirx.reinterpret")


def nvcc_spellings(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """A CUDA kernel's reinterprets of literals folded into the literals they make, and its vector
    `~x` written as `x ^ -1`. TVM's simplifier leaves a literal under a reinterpret (`kept(x - x)`,
    folded to `kept(0.0)` only while lowering), which the code generator prints as the address of a
    literal (`*(int *)(&(0x0p+0f))`: "expression must be an lvalue"); and it prints a vector `~` on
    CUDA's vector struct (`~longlong2`: "no operator"), where `^` it writes lane by lane; and a
    Broadcast of bytes or 16-bit integers as 32-bit words of their copies (`_narrow_as_words`)."""
    target = func.attrs.get("target") if func.attrs is not None else None
    if target is None or target.kind.name != "cuda":
        return func
    return func.with_body(tvm_ffi.structural_map(func.body, [(tvm.ir.Call, _spelled),
                                                             (tvm.ir.prim.expr.BitwiseNot, _not_as_xor),
                                                             (tirx.Broadcast, _narrow_as_words)]))


def _spelled(call):
    """A reinterpret of a literal as the literal of its bits; any other call as it is."""
    if not (isinstance(call.op, tvm.ir.Op) and call.op.same_as(_REINTERPRET)) or \
            not isinstance(call.args[0], (tirx.IntImm, tirx.FloatImm, tirx.Broadcast)) or \
            not hasattr(call.ty, "dtype"):
        return call   # a reinterpret to a pointer (a Triton kernel's address arithmetic) keeps its form
    folded = _literal_bits(call.args[0], call.ty.dtype)
    return call if folded is None else folded


def _not_as_xor(node):
    """A vector `~x` of integers as `x ^ -1`, the same bits."""
    dtype = node.ty.dtype
    if dtype.lanes == 1 or not str(dtype.with_lanes(1)).startswith(("int", "uint")):
        return node
    ones = tirx.const(-1 if str(dtype).startswith("int") else (1 << dtype.bits) - 1, str(dtype.with_lanes(1)))
    return tirx.bitwise_xor(node.a, tirx.Broadcast(ones, dtype.lanes))


def _narrow_as_words(node):
    """A Broadcast of an 8- or 16-bit integer that TVM types as int2 or int4 (8 or 16 bytes: an int8
    max's accumulator starting at -128), or of a computed byte over 4 lanes, as the reinterpret of
    the 32-bit words that hold its copies. TVM prints the first as `make_int4` of one argument a lane
    (nvcc: "too many arguments") and packs only a constant byte into an int ("Check failed:
    p.has_value()"); a Broadcast of words it prints one argument a word, a reinterpret through a
    variable it names."""
    dtype = node.ty.dtype
    bits, lanes, signed = dtype.bits, dtype.lanes, str(dtype).startswith("int")
    computed_bytes = bits * lanes == 32 and bits == 8 and not isinstance(node.value, tirx.IntImm)
    if not str(dtype).startswith(("int", "uint")) or bits not in (8, 16) or not (
            bits * lanes in (64, 128) or computed_bytes):
        return node
    word, per = "int32" if signed else "uint32", 32 // bits
    copies = sum(1 << (bits * i) for i in range(per))   # 0x01010101 or 0x00010001
    if isinstance(node.value, tirx.IntImm):
        packed = (node.value.value & ((1 << bits) - 1)) * copies
        packed = tirx.const(packed - (1 << 32) if signed and packed >= 1 << 31 else packed, word)
    else:   # in uint32: no signed overflow, and no negative made unsigned (TVM's folding refuses it)
        mask = tirx.const((1 << bits) - 1, "int32")
        low = tirx.Cast("uint32", tirx.bitwise_and(tirx.Cast("int32", node.value), mask))
        packed = tirx.reinterpret(word, low * tirx.const(copies, "uint32"))
    words = bits * lanes // 32
    return tirx.reinterpret(str(dtype), packed if words == 1 else tirx.Broadcast(packed, words))


def _literal_bits(value, dtype):
    """The literal of `dtype` with the bits of the literal `value` (a Broadcast of one too), or None
    where `value` is not one or torch has no such dtype."""
    if isinstance(value, tirx.Broadcast) and value.lanes == dtype.lanes:
        inner = _literal_bits(value.value, dtype.with_lanes(1))
        return None if inner is None else tirx.Broadcast(inner, dtype.lanes)
    if not isinstance(value, (tirx.IntImm, tirx.FloatImm)) or dtype.lanes != 1:
        return None
    source, target = (getattr(torch, str(d), None) for d in (value.ty.dtype, dtype))
    if not isinstance(source, torch.dtype) or not isinstance(target, torch.dtype) or \
            source.itemsize != target.itemsize or torch.bool in (source, target):
        return None
    return tirx.const(torch.tensor(value.value, dtype=source).view(target).item(), str(dtype))
