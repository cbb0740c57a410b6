"""Arithmetic for the Relax visitor: Python's binary operators on tensors and numbers with torch's meaning
(promotion with Python numbers weak, bools, division by zero, integer powers, `@`), and the broadcasting
of symbolic sizes that Relax's shape inference needs spelled out (`aligned`)."""
from __future__ import annotations

import ast
import math
import os

import torch
import tvm_ffi
from tvm import relax, tirx
from tvm.script.ir_builder import relax as RB

from ..core.errors import Diagnostic
from ..core.types import TORCH_TO_NAME, format_shape, is_float_dtype
from . import library, operators, pytorch, semantic
from .values import (broadcast, compare_sizes, describe, dtype_of, is_python_scalar, is_symbolic, is_tensor,
                     promote, scalar_kind, shape_of, size_expr)

# `*` and `+` on bools, as torch computes them
BOOL_ARITH = {ast.Mult: relax.op.logical_and, ast.Add: relax.op.logical_or}

# Float `x ** n` for an integral constant n up to this many multiplies (by squaring) instead of calling pow.
MAX_SQUARING_EXPONENT = 16


class RelaxArithmetic:
    """The binary operators of RelaxCodeGen and the dtype rules behind them (a mixin: it uses the
    visitor's emit, const, as_tensor and options)."""

    def binary(self, op: ast.operator, lhs, rhs):
        kind = type(op)
        if not (is_tensor(lhs) or is_tensor(rhs)):
            if is_symbolic(lhs) or is_symbolic(rhs) or (
                    is_python_scalar(lhs) and is_python_scalar(rhs)):
                if kind in (ast.FloorDiv, ast.Mod) and is_symbolic(rhs):
                    # a size the VM computes as soon as its parts are known (before any check runs):
                    # its division would trap on 0, so it divides by 1 then, and the check raises
                    library.run_time_check(self, rhs != 0, f"integer `{operators.SYMBOL[kind]}` by zero: the size "
                                           f"`{rhs}` is 0 in this call (Python raises ZeroDivisionError)")
                    rhs = tirx.Select(rhs == 0, tirx.const(1, rhs.ty.dtype), rhs)
                try:
                    return operators.PY_BINARY[kind](lhs, rhs)
                except ZeroDivisionError:
                    raise Diagnostic("division by zero in a compile-time expression") from None
            if isinstance(lhs, tuple) and isinstance(rhs, tuple) and kind is ast.Add:
                return lhs + rhs
        lhs, rhs = (self.size_value(v) if is_symbolic(v) else v for v in (lhs, rhs))  # `x / x.size(-1)`
        lhs, rhs = self.operand(lhs), self.operand(rhs)
        sym = operators.SYMBOL[kind]
        both_weak = self.is_weak(lhs) and self.is_weak(rhs)
        dtype = self.operator_dtype(sym, lhs, rhs)
        result = self._binary(kind, sym, lhs, rhs, dtype)
        if both_weak and is_tensor(result):
            self.weak.append(result)
        return result

    def _binary(self, kind, sym: str, lhs, rhs, dtype: str):
        if kind in operators.BITWISE:
            if is_float_dtype(dtype):
                raise Diagnostic(f"`{sym}` needs bool or integer operands, got {describe(lhs)} and {describe(rhs)}")
            int_op, bool_op = operators.BITWISE[kind]
            return self.emit_binary(int_op if dtype != "bool" else bool_op, lhs, rhs, dtype, sym)
        if kind in (ast.LShift, ast.RShift):  # torch's shifts, counts out of range included (pytorch.misc)
            return pytorch.misc.shift(self.builder, "left" if kind is ast.LShift else "right", lhs, rhs)
        if kind not in operators.ARITH:
            raise Diagnostic(f"the operator `{sym}` is not supported on tensors")
        if kind is ast.Div and not is_float_dtype(dtype):
            dtype = TORCH_TO_NAME[torch.get_default_dtype()]  # true division, as in Python and torch
        if dtype == "bool" or kind is ast.Sub and any(is_tensor(v) and dtype_of(v) == "bool" for v in (lhs, rhs)) \
                and not (self.is_weak(lhs) and self.is_weak(rhs)):
            return self.bool_arithmetic(kind, sym, lhs, rhs, dtype)
        if kind is ast.MatMult:
            return self.matmul(lhs, rhs)
        if kind is ast.Pow and not is_float_dtype(dtype):
            return self.integer_power(lhs, rhs, dtype)
        if kind in (ast.Div, ast.FloorDiv, ast.Mod) and is_python_scalar(rhs) and rhs == 0:
            return self.divide_by_zero(kind, sym, lhs, rhs, dtype)
        if kind in (ast.FloorDiv, ast.Mod) and not is_float_dtype(dtype) and is_tensor(rhs):
            self.check_nonzero_divisor(self.as_tensor(rhs, dtype), sym)
        if kind is ast.Pow and is_tensor(lhs) and is_python_scalar(rhs) and not isinstance(rhs, bool) and \
                float(rhs).is_integer() and 1 <= abs(rhs) <= MAX_SQUARING_EXPONENT:
            # `x ** 2` multiplies, as torch does: exact, and right for a negative x on a GPU, where TVM
            # builds CUDA with --use_fast_math and powf(-2, 2) becomes exp2(2 * log2(-2)), a NaN
            result = self.power_by_squaring(self.as_tensor(lhs, dtype), abs(int(rhs)))
            return result if rhs > 0 else self.emit(relax.op.divide(self.const(1, dtype), result))
        if kind is ast.Pow and dtype == "bfloat16":  # TVM's pow has no bfloat16: float32, rounded once
            return self.emit(relax.op.astype(self.emit_binary(relax.op.power, lhs, rhs, "float32", sym), dtype))
        wide = self.half_with_number(kind, sym, lhs, rhs, dtype)
        if wide is not None:
            return wide
        return self.emit_binary(operators.ARITH[kind], lhs, rhs, dtype, sym)

    def bool_arithmetic(self, kind, sym: str, lhs, rhs, dtype: str):
        """Arithmetic on bools as torch has it: `*` is logical and, `+` logical or; `-` with a bool
        tensor, and the others, are refused in torch's words."""
        if kind is ast.Sub:
            raise Diagnostic("Subtraction, the `-` operator, with two bool tensors is not supported. Use the `^` or "
                             "`logical_xor()` operator instead." if dtype == "bool" else
                             "Subtraction, the `-` operator, with a bool tensor is not supported. If you are trying "
                             "to invert a mask, use the `~` or `logical_not()` operator instead.")
        if kind not in BOOL_ARITH:
            raise Diagnostic(f"`{sym}` is not implemented for bool tensors (nor in torch); convert them first, "
                             "e.g. with .to(torch.int64)")
        return self.emit_binary(BOOL_ARITH[kind], lhs, rhs, "bool", sym)

    def half_with_number(self, kind, sym: str, lhs, rhs, dtype: str):
        """A half tensor and a number under an operator torch computes in float32 there
        (operators.HALF_WITH_NUMBER_IN_FLOAT32): computed so and rounded once; None for the others.
        A number over a half tensor is torch's `Tensor.__rtruediv__`: the tensor's reciprocal (in its
        dtype) times the number, so `70000 / h` is -35008 for h = -2, not 70000 rounded to inf over h."""
        if kind is ast.Div and dtype in ("float16", "bfloat16") and self.is_weak(lhs) and not self.is_weak(rhs):
            reciprocal = self.emit_binary(relax.op.divide, 1, rhs, dtype, sym)
            return self.half_with_number(ast.Mult, "*", reciprocal, lhs, dtype)
        if kind in operators.HALF_WITH_NUMBER_IN_FLOAT32[self.options.device_kind] and dtype in ("float16", "bfloat16") \
                and self.is_weak(rhs) != self.is_weak(lhs) and not (kind is ast.Div and self.is_weak(lhs)):
            wide = self.emit_binary(operators.ARITH[kind], lhs, rhs, "float32", sym)
            return self.emit(relax.op.astype(wide, dtype))
        return None

    def divide_by_zero(self, kind, sym: str, lhs, rhs, dtype: str):
        """`x / 0.0`, `x // 0.0`, `x % 0.0` with torch's meaning (inf, -inf, nan), written so that TVM
        does not fold a division by the constant zero (which it refuses); integer `//`, `%` by 0
        raise, as torch does."""
        if not is_float_dtype(dtype):
            raise Diagnostic(f"integer `{sym}` by zero: torch raises ZeroDivisionError for it")
        if kind is ast.Mod:  # x - floor(x / 0) * 0: nan everywhere
            return self.emit_binary(relax.op.multiply, lhs, float("nan"), dtype, sym)
        # x / ±0 is x * ±inf, for every x (0 and nan give nan)
        quotient = self.emit_binary(relax.op.multiply, lhs, math.copysign(math.inf, rhs), dtype, sym)
        return self.emit(relax.op.floor(quotient)) if kind is ast.FloorDiv else quotient

    def check_nonzero_divisor(self, divisor, sym: str) -> None:
        """Integer `//` and `%` by a tensor holding a 0 raise when the code runs on a CPU, as torch's
        CPU kernels do (the division itself never traps: legalize.int_floor_divide). On a GPU neither
        torch nor CUDA checks, and reading the answer back would wait for the device."""
        if self.options.device_kind != "cpu" or self.placement is not None:
            return
        zero = self.emit(relax.op.equal(divisor, self.const(0, dtype_of(divisor))))
        found = self.emit(relax.op.max(relax.op.astype(zero, "int8")))   # of no elements: -128
        library.run_time_check(self, self.emit(relax.op.less(found, self.const(1, "int8"))),
                               f"integer `{sym}` by zero: the divisor has a 0 (torch raises ZeroDivisionError)")

    def is_weak(self, value) -> bool:
        """A Python number, or a 0-d tensor standing for one (a run-time scalar parameter, a recursive
        loop's index): it takes the other operand's dtype unless its kind is higher, as in torch."""
        if is_python_scalar(value):
            return True
        return is_tensor(value) and any(value.same_as(w) for w in self.weak)

    def promotion_operand(self, value):
        """What `value` is to torch's promotion: a weak 0-d tensor counts as a Python number of its kind."""
        if is_tensor(value) and not is_python_scalar(value) and self.is_weak(value):
            dtype = dtype_of(value)
            return False if dtype == "bool" else 0.0 if is_float_dtype(dtype) else 0
        return value

    def operator_dtype(self, symbol: str, lhs, rhs) -> str:
        """The dtype a binary operator or comparison computes in: two weak operands compute as
        Python does (operators.weak_dtype), anything else by torch's promotion."""
        if self.is_weak(lhs) and self.is_weak(rhs):
            return operators.weak_dtype(symbol, [scalar_kind(v) for v in (lhs, rhs)])
        return self.promote(lhs, rhs)

    def promote(self, *values) -> str:
        """The dtype operands combine to (torch.result_type), weak 0-d tensors counting as numbers."""
        return promote(*(self.promotion_operand(v) for v in values))

    def emit_binary(self, relax_op, lhs, rhs, dtype: str, sym: str):
        if is_tensor(lhs) and is_tensor(rhs) and broadcast(shape_of(lhs), shape_of(rhs)) is None:
            raise Diagnostic(f"shapes {format_shape(shape_of(lhs))} and {format_shape(shape_of(rhs))} "
                             f"cannot be broadcast together for `{sym}`")
        return self.emit(relax_op(*self.aligned(self.as_tensor(lhs, dtype), self.as_tensor(rhs, dtype))))

    def aligned(self, *operands) -> list:
        """Operands of an element-wise op, each symbolic size that meets a static size on its axis
        (`n` against 4) matched to it: Relax cannot infer the result's shape otherwise. The sizes
        are trusted to match (see `broadcast`); the match is checked at each call. Sizes of one
        symbolic size (`n - 1` against `max(n - 1, 0)`) are matched likewise (`aligned_size`); two
        different symbolic sizes on one axis (`n` against `m`) are refused: nothing says they are equal."""
        tensors = [v for v in operands if is_tensor(v) and v.ty.shape is not None]
        if len(tensors) < 2 or all(isinstance(d, int) for t in tensors for d in shape_of(t)):
            return list(operands)
        ndim = max(t.ty.ndim for t in tensors)
        target = [1] * ndim
        for t in tensors:
            for axis, size in enumerate(shape_of(t), ndim - t.ty.ndim):
                if isinstance(target[axis], int) and target[axis] == 1 or \
                        isinstance(size, int) and size != 1 and not isinstance(target[axis], int) or \
                        isinstance(target[axis], tirx.Var) and is_symbolic(size) and not isinstance(size, tirx.Var):
                    # a static size wins over a symbolic one, an expression over a bare name: TVM crashes
                    # matching `n` to an expression of n (it reads the match as defining n by itself)
                    target[axis] = size
        result = []
        for value in operands:
            if any(value is t for t in tensors):
                shape = list(shape_of(value))
                offset = ndim - len(shape)
                for axis, size in enumerate(shape):
                    want = target[axis + offset]
                    if not isinstance(size, int) and not (isinstance(want, int) and want == 1):
                        shape[axis] = self.aligned_size(size, want)
                if shape != list(shape_of(value)):
                    value = RB.emit_match_cast(value, relax.TensorType(shape, dtype_of(value),
                                                                      vdevice=value.ty.vdevice))
            result.append(value)
        return result

    def aligned_size(self, size, want):
        """The size a symbolic `size` takes to meet `want` (not 1) on an axis: `want` when they are equal
        whatever the sizes (`max(n - 1, 0)` and `min(max(n - 1, 0), n)`) or, checked at each call, when
        they may be; 1 (checked) when they never are, as then only broadcasting a 1 can make them agree."""
        equal = compare_sizes(size, want)
        if equal is True:   # written alike, or cast to one form: Relax's shape inference cannot tell otherwise
            return size if tvm_ffi.structural_equal(size, want) else want
        if equal is None and not isinstance(want, int) and \
                set(tirx.analysis.undefined_vars(size)) != set(tirx.analysis.undefined_vars(want)):
            raise Diagnostic(f"the sizes {want} and {size} meet on one axis here, and nothing says "
                             "they are equal: give them one name in the annotations (or a static "
                             "size), or reshape one")
        if equal is None and isinstance(size, tirx.Var) and isinstance(want, (int, tirx.Var)):
            self.record_size_check(size, want)   # checked before the call, naming the parameter
            return want
        if equal is False and compare_sizes(size, 1) is False:
            raise Diagnostic(f"the sizes {want} and {size} meet on one axis here, and they are never equal, "
                             "nor is the second 1: they cannot be broadcast together")
        message = ("the size {} meets the size {} element-wise here, and must equal it (only a static 1 "
                   "broadcasts)" if equal is None else
                   "the size {} meets the size {} element-wise here, which it never equals: it must be 1 "
                   "to broadcast")
        got = want if equal is None else 1
        library.run_time_check(self, tirx.EQ(size_expr(size, "int64"), size_expr(got, "int64")), message, size, want)
        return got

    def record_size_check(self, size, want) -> None:
        if isinstance(size, tirx.Var) and isinstance(want, (int, tirx.Var)):
            source = self.parsed.source_map
            where = f"line {source.file_line(self.lineno or 1)} of {os.path.basename(source.filename)}"
            self.size_checks.append((size.name, want if isinstance(want, int) else want.name, where))

    def integer_power(self, base, exponent, dtype: str):
        """TVM's power is float-only: a constant exponent multiplies by squaring (exact); a tensor
        exponent goes through float64, exact for results below 2**53."""
        if is_python_scalar(exponent):
            if exponent < 0:
                raise Diagnostic("integers to negative integer powers are not allowed (as in torch)")
            n = int(exponent)
            result = self.power_by_squaring(self.as_tensor(base, dtype), n) if n else self.const(1, dtype)
            if is_tensor(base) and shape_of(result) != shape_of(base):  # x ** 0 keeps x's shape
                result = self.emit(relax.op.broadcast_to(result, base.ty.shape))
            return result
        wide = self.emit_binary(relax.op.power, base, exponent, "float64", "**")
        return self.emit(relax.op.astype(relax.op.round(wide), dtype))

    def power_by_squaring(self, base, n: int):
        """`base ** n` for a positive int n in about log2(n) multiplications."""
        result, square = None, base
        while n:
            if n & 1:
                result = square if result is None else self.emit(relax.op.multiply(result, square))
            n >>= 1
            if n:
                square = self.emit(relax.op.multiply(square, square))
        return result

    def matmul(self, lhs, rhs):
        semantic.check_matmul(self.builder, lhs, rhs)
        a, b = shape_of(lhs), shape_of(rhs)
        if not a or not b:
            raise Diagnostic("`@` needs tensors with at least one dimension")
        k_a, k_b = a[-1], b[-2] if len(b) > 1 else b[0]
        if isinstance(k_a, int) and isinstance(k_b, int) and k_a != k_b:
            raise Diagnostic(f"`@` shapes {format_shape(a)} and {format_shape(b)} don't match: "
                             f"inner sizes {k_a} and {k_b} differ")
        dtype = dtype_of(lhs)
        # float16 products accumulate in float32, as torch does: cuBLAS does so where the pipeline
        # hands matmuls to it; elsewhere the product is computed in float32 and rounded once.
        if dtype in ("float16", "bfloat16") and not self.matmul_offloaded(dtype):
            return self.emit(relax.op.astype(relax.op.matmul(lhs, rhs, out_dtype="float32"), dtype))
        return self.emit(relax.op.matmul(lhs, rhs))

    def matmul_offloaded(self, dtype: str) -> bool:
        return self.placement is None and dtype in self.options.matmul_offload

    def size_value(self, size):
        """A symbolic size as the Python int it is when the code runs: a weak 0-d int64 tensor."""
        size = tirx.Cast("int64", size) if size.ty.dtype != "int64" else size
        value = self.emit(relax.op.reshape(relax.op.arange(size, size + 1, 1, "int64"), ()))
        return self.builder.weak(value)
