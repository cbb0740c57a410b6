"""babytriton's own legalization of the Relax ops whose TVM lowering differs from torch: NaN and ±inf
(below), and half-precision sums, which torch accumulates in float32 (`half_accumulating_legalizations`).

TVM legalizes `maximum`, `minimum`, `clip` (so `relu6`), `relu`, `max`/`min` and `argmax`/`argmin` to
TIR `max`/`min`, which the LLVM code generator emits as `a > b ? a : b` (max(NaN, 0) is 0, max(0, NaN)
is NaN) and CUDA as `fmaxf` (which ignores a NaN); its reductions start from the lowest *finite* value
(the max of a row of -inf is -3.4e38) and its argmax from index -1 (a row of -inf gives -1). The LLVM
code generator also compiles float `!=` as an *ordered* compare, so `x != x` is False for NaN.
torch propagates NaN instead: `maximum`/`clamp`/`relu` of a NaN is NaN, `amax` of a row holding one
is NaN, `argmax` is the index of the first NaN, and `NaN != NaN` is True.

Here each of those ops is written out in TIR that says what torch does, on any target:
- element-wise max(a, b) is `a < b ? b : (b <= a ? a : a + b)` (min with `>`/`>=`): ordered compares
  only, false for NaN on every target, so the last arm is taken exactly when a or b is NaN, and
  `a + b` is NaN then; a tie keeps `a` (torch's sign of zero: relu(-0.0) is -0.0). No `isnan` call
  on CUDA: TVM cannot vectorise one (CUDA would lose its float4 loads), and it folds `not x == x`
  away. CPU kernels take `a < b or isnan(b) ? b : a` instead, which vector_math makes a test of b's
  bits: a reduction's chain through its accumulator is then one compare and one select (_NAN_TEST);
- the reductions use the same rule as the combiner of a `comm_reducer` whose identity is -inf
  (+inf for min), and argmax/argmin one that ranks NaN above everything with ties to the first
  index (identity: the largest index, so that every real element beats it). Both combiners are
  registered with TVM's reducer registry, so rfactor and cross-thread (warp-shuffle) reductions,
  hence Dlight's GPU rules and ours, schedule them like the built-in max;
- float `!=` is `a != b or isnan(a) or isnan(b)`, which the ordered compare cannot get wrong.
Integer and bool operands keep TVM's own lowering (no NaN there).

Also here, each next to its rule: float `%` and `//` as torch computes them (fmod-based), `x * 0`,
`0 / x`, `x + 0` with a constant zero (TVM folds them as it builds the expression), subtraction kept
from TVM's simplifier (it cancels `x - x`), and int32 `+ - *` that wrap around like torch's.
"""
from __future__ import annotations

import contextlib
import contextvars
import ctypes
import functools
import math
import operator

import tvm
import tvm_ffi
from tvm import relax, te, tirx, topi
from tvm.relax.transform.legalize_ops.common import _try_convert_to_scalar_const

from ..core.types import is_float_dtype

INF = float("inf")
HALF = ("float16", "bfloat16")


# -- scalar rules: one TIR expression each, shared by the element-wise ops and the reducers --------
def isnan(x):
    """tirx.isnan, which TVM refuses on bfloat16: that tests the exact float32 value instead."""
    return tirx.isnan(tirx.Cast("float32", x) if _dtype(x) == "bfloat16" else x)


# How a max or min of two values finds a NaN operand: "compares" (ordered compares and `a + b`, any
# target) or "isnan" (`isnan(b)`: CPU kernels, where the vector_math pass makes it a vector test of
# b's bits). A reduction's accumulator `a` then stays out of the NaN test, and a max over rows of 64
# on one CPU thread takes 0.50 ms where the compares took 1.39 (torch 0.45). CUDA keeps the
# compares: TVM's CUDA vectoriser has no isnan (see the module docstring). Set by `nan_test`, which
# lowering/pipeline.py enters around the passes of a compile.
_NAN_TEST = contextvars.ContextVar("babytriton_nan_test", default="compares")


@contextlib.contextmanager
def nan_test(target: tvm.target.Target | None):
    """Within it, max and min find NaN as the target's kernels do it best (see _NAN_TEST)."""
    token = _NAN_TEST.set("isnan" if target is not None and target.kind.name == "llvm" else "compares")
    try:
        yield
    finally:
        _NAN_TEST.reset(token)


def nan_max(a, b, test: str | None = None):
    """max(a, b) with torch's NaN rule: NaN if either is NaN; a tie keeps a. Against a number (a
    clamp's bound) one compare: the other operand, when NaN, is the answer itself (a half `a + b`
    was a round trip through float32 on a CPU, and grew every inlined use of a clamp). `test`: how
    a NaN is found (_NAN_TEST's values; the current one by default)."""
    if _number(b):
        return tirx.Select(a < b, b, a)
    if _number(a):
        return tirx.Select(b <= a, a, b)
    if (test or _NAN_TEST.get()) == "isnan":  # a < b is false where either is NaN: b's NaN taken, a's kept
        return tirx.Select(tirx.Or(a < b, isnan(b)), b, a)
    return tirx.Select(a < b, b, tirx.Select(b <= a, a, a + b))


def nan_min(a, b, test: str | None = None):
    """min(a, b) with torch's NaN rule: NaN if either is NaN; a tie keeps a (one compare against a
    number, and `test`, as in `nan_max`)."""
    if _number(b):
        return tirx.Select(a > b, b, a)
    if _number(a):
        return tirx.Select(b >= a, a, b)
    if (test or _NAN_TEST.get()) == "isnan":
        return tirx.Select(tirx.Or(a > b, isnan(b)), b, a)
    return tirx.Select(a > b, b, tirx.Select(b >= a, a, a + b))


def _number(x) -> bool:
    """Whether x is a float constant that is not NaN (possibly cast): never the NaN a max must pass on."""
    while isinstance(x, tirx.Cast):
        x = x.value
    return isinstance(x, tirx.FloatImm) and not math.isnan(x.value)


def _opmath(rule):
    """`rule` on float32 copies of half operands, rounded back once, as torch computes half ops."""
    @functools.wraps(rule)
    def on_floats(a, b):
        dtype = _dtype(a)
        b = b if isinstance(b, tvm.ir.expr.Expr) else tirx.const(b, dtype)  # a scalar constant operand
        if dtype in HALF:
            return tirx.Cast(dtype, rule(tirx.Cast("float32", a), tirx.Cast("float32", b)))
        return rule(a, b)
    return on_floats


def _is_zero(b) -> bool:
    """Whether b is the constant ±0, which TVM refuses to divide by (see `divide`)."""
    return isinstance(b, tirx.FloatImm) and b.value == 0


def _times_inf(a, b):
    """a / ±0 as IEEE gives it: a * ±inf (±inf, and NaN for 0 and NaN). For a constant b the
    constant ±inf (TVM leaves `copysign` of constants, which its CUDA vectoriser mangles)."""
    if isinstance(b, tirx.FloatImm):
        return a * tirx.const(math.copysign(INF, b.value), _dtype(a))
    return a * tirx.copysign(tirx.const(INF, _dtype(a)), b)


def _times_nan(a):
    """fmod(a, ±0): NaN, as a product (a NaN literal of a half dtype prints as `nanf` in CUDA code)."""
    return a * tirx.const(float("nan"), _dtype(a))


def _moved(mod, b):
    """Whether torch moves the remainder `mod` = fmod(a, b) by b: it is nonzero and of the other sign
    than b. `mod * ±1 < 0` says so with each operand once (no underflow, unlike mod * b; an ordered
    compare, false for NaN), which keeps nested `%` and `//` from growing the kernel's expression."""
    return mod * tirx.copysign(tirx.const(1, _dtype(b)), b) < tirx.const(0, _dtype(b))


@_opmath
def floor_mod(a, b):
    """torch's float `a % b` (Python's): fmod(a, b), plus b where that has the other sign than b, so
    -1.5 % inf is inf and 1.5 % -inf is -inf (TVM's `a - floor(a / b) * b` makes those NaN); a zero
    remainder keeps fmod's sign (-1.5 % 1.5 is -0.0: the arm not taken adds -0.0, which keeps it)."""
    if _is_zero(b):
        return _times_nan(a)
    b = _kept_unless_constant(b)  # a divisor TVM's simplifier folds to 0 (see `divide`)
    mod = tirx.truncmod(a, b)  # on floats: fmod (LLVM's frem, CUDA's fmodf)
    return mod + tirx.Select(_moved(mod, b), b, tirx.const(-0.0, _dtype(a)))


@_opmath
def floor_divide(a, b):
    """torch's float `a // b` (c10's div_floor_floating): (a - fmod(a, b)) / b rounded to the integer
    it is, one less where the remainder is moved; a zero quotient has the sign of a / b (a nonzero
    one has it already); a division by ±0 is IEEE's. TVM's floor(a / b) differs where a / b rounds
    across an integer (-1.5 // inf is -1 in torch, -0 in TVM) and for inf // 2 (NaN in torch). Only
    ordered compares and no `isnan`, which CUDA's --use_fast_math keeps; the quotient of the approximate
    division it allows is rounded to the integer it approximates."""
    zero, one = tirx.const(0, _dtype(a)), tirx.const(1, _dtype(a))
    if _is_zero(b):
        return _times_inf(a, b)
    b = _kept_unless_constant(b)  # a divisor TVM's simplifier folds to 0 (see `divide`)
    mod = tirx.truncmod(a, b)
    quotient = tirx.nearbyint((a - mod) / b) - tirx.Select(_moved(mod, b), one, zero)
    return tirx.Select(b == zero, _times_inf(a, b), tirx.copysign(quotient, tirx.copysign(one, a) * b))


# -- integer `//` and `%`: x86's division instruction traps on a zero divisor and on INT_MIN // -1,
# which killed the process. The divisor is made safe first: -1 is handled without dividing (torch's
# INT_MIN // -1 wraps to INT_MIN), 0 divides by 1 (what that gives is never seen on a CPU: the
# compiled code raises torch's ZeroDivisionError, codegen's check; CUDA's division does not trap,
# and torch's CUDA kernels give an unspecified value there too).
def _traps(b) -> bool:
    """Whether dividing by `b` may trap: any divisor but a constant other than 0 and -1 (whose
    quotients TVM simplifies and bounds, as the TIR backend's index checks need)."""
    return not (isinstance(b, tirx.IntImm) and int(b) not in (0, -1))


def _safe_divisor(b):
    dtype = _dtype(b)
    zero, one = tirx.const(0, dtype), tirx.const(1, dtype)
    if not dtype.startswith("int"):   # unsigned: only 0 traps
        return tirx.Select(b == zero, one, b), None
    minus_one = b == tirx.const(-1, dtype)
    return tirx.Select(tirx.Or(b == zero, minus_one), one, b), minus_one


def _without_trap(divide, at_minus_one, name: str):
    """Integer `divide(a, b)` (floordiv or floormod, Python's and torch's rounding) that never traps:
    see _safe_divisor; `at_minus_one(a)` is its value where b is -1."""
    def rule(a, b):
        b = b if isinstance(b, tvm.ir.expr.Expr) else tirx.const(b, _dtype(a))
        if not _traps(b):
            return divide(a, b)
        safe, minus_one = _safe_divisor(b)
        result = divide(a, safe)
        return result if minus_one is None else tirx.Select(minus_one, at_minus_one(a), result)
    rule.__name__ = name
    return rule


def _negated(a):
    """-a, except that -INT_MIN wraps to INT_MIN (no negation of INT_MIN is ever computed)."""
    return tirx.Select(a == tirx.min_value(_dtype(a)), a, tirx.const(0, _dtype(a)) - a)


int_floor_divide = _without_trap(tirx.floordiv, _negated, "int_floor_divide")
int_floor_mod = _without_trap(tirx.floormod, lambda a: tirx.const(0, _dtype(a)), "int_floor_mod")


# -- an operand that is the constant ±0: TVM folds `x * 0` and `0 / x` to 0 and `x + 0` to x as it
# builds the expression (arith's constant folding treats floats as real numbers), so these say what
# IEEE arithmetic gives instead. `sign` is -1 for the constant -0.0, else 1.
def _finite(x):
    return tirx.abs(x) < tirx.const(INF, _dtype(x))  # false for ±inf and NaN (ordered compare)


def _signed_zero(x, sign: int):
    """±0 with the sign of x times `sign` (the sign a product or quotient of zeros would have)."""
    zero = tirx.copysign(tirx.const(0, _dtype(x)), x)
    return zero * tirx.const(-1, _dtype(x)) if sign < 0 else zero


def _in_float32(rule):
    """`rule(x, sign)` on a float32 copy of a half x (TVM has no half copysign on the CPU), rounded
    back; exact, as its results are zeros, NaN or x itself."""
    @functools.wraps(rule)
    def on_floats(x, sign: int):
        if _dtype(x) in HALF:
            return tirx.Cast(_dtype(x), rule(tirx.Cast("float32", x), sign))
        return rule(x, sign)
    return on_floats


@_in_float32
def times_zero(x, sign: int):
    """x * ±0: a zero (signed as IEEE says) for a finite x, NaN for ±inf and NaN."""
    return tirx.Select(_finite(x), _signed_zero(x, sign), tirx.const(float("nan"), _dtype(x)))


def zero_over(x, sign: int):
    """±0 / x as torch computes a number over a tensor: times the reciprocal of x (in x's dtype), so
    NaN where x is ±0 or NaN, and also where 1 / x overflows (a float16 x of 1e-7), else a signed zero."""
    return times_zero(divide(tirx.const(1, _dtype(x)), x), sign)


@_in_float32
def plus_zero(x, sign: int):
    """x + 0.0 is x except that -0.0 becomes 0.0; x + -0.0 is x."""
    zero = tirx.const(0, _dtype(x))
    return tirx.Select(x == zero, zero, x) if sign > 0 else x


def kept(x):
    """x, behind a round trip through the integer of its width (two `reinterpret`s) that TVM's
    simplifier does not look through; LLVM and nvcc drop the pair. (A single same-type reinterpret
    is dropped by TVM's FP8StorageLegalize, and LowerIntrin's simplifier then folded the `x - x` in
    a select's condition to 0 and refused `1 / 0`.)"""
    dtype = tvm.DataType(_dtype(x))
    bits = f"int{dtype.bits}" + (f"x{dtype.lanes}" if dtype.lanes > 1 else "")
    reinterpret = tvm.ir.Op.get("tirx.reinterpret")
    return tvm.ir.Call(reinterpret, [tvm.ir.Call(reinterpret, [x], ret_ty=bits)], ret_ty=str(dtype))


def is_kept(expr) -> bool:
    """Whether `expr` is a `kept` guard: a reinterpret of a reinterpret."""
    reinterpret = tvm.ir.Op.get("tirx.reinterpret")
    return isinstance(expr, tvm.ir.expr.Call) and expr.op.same_as(reinterpret) \
        and isinstance(expr.args[0], tvm.ir.expr.Call) and expr.args[0].op.same_as(reinterpret)


_PRIM = tvm.ir.prim.expr
_OPERANDS = {_PRIM.BinaryOpExpr: ("a", "b"), _PRIM.CmpExpr: ("a", "b"), _PRIM.LogicalExpr: ("a", "b"),
             _PRIM.Cast: ("value",), _PRIM.Broadcast: ("value",), _PRIM.Select: ("condition", "true_value", "false_value")}


def _closed(expr) -> bool:
    """Whether `expr` reads no buffer and no variable (a constant once simplified). It stops at the
    first load, so that a guard around a whole inlined computation, which can be enormous (and the
    simplifier slow on it without end), costs next to nothing."""
    todo = [expr]
    while todo:
        node = todo.pop()
        if isinstance(node, (tirx.IntImm, tirx.FloatImm)):
            continue
        if isinstance(node, tvm.ir.expr.Call):
            todo.extend(node.args)
            continue
        fields = next((f for cls, f in _OPERANDS.items() if isinstance(node, cls)), None)
        if fields is None:  # a load, a variable, a Let, anything else: not a constant here
            return False
        todo.extend(getattr(node, f) for f in fields if getattr(node, f, None) is not None)  # Not has no b
    return True


def _kept_constant(expr):
    """The constant a `kept` guard holds (put there by inlining a constant producer, as in
    `x / zeros_like(x)` once fused), else None."""
    if not is_kept(expr) or not _closed(expr.args[0].args[0]):
        return None
    inner = tvm.sym.Analyzer().simplify(expr.args[0].args[0])  # a half constant cast to float32, say
    return tirx.const(inner.value, _dtype(expr)) if isinstance(inner, tirx.FloatImm) else None


def settle_kept_constants(mod: tvm.IRModule) -> tvm.IRModule:
    """After scheduling: each guard around a constant taken away (CUDA's code generator prints a
    reinterpret of a literal as the address of one, which nvcc refuses), and a division or fmod by
    a constant ±0 written as IEEE's answer (a * ±inf; NaN), which TVM's simplifier, refusing to
    divide by 0, would meet otherwise."""
    def unguarded(call):
        c = _kept_constant(call)
        return call if c is None else c

    def by_constant(node):  # the divisor may be a guard under casts (half division in float32)
        b = tvm_ffi.structural_map(node.b, (tvm.ir.expr.Call, unguarded))
        if b.same_as(node.b):
            return node
        c = tvm.sym.Analyzer().simplify(b) if _closed(b) else b  # a large b: no constant, no simplifier
        if not (isinstance(c, tirx.FloatImm) and c.value == 0):
            return type(node)(node.a, b)
        return _times_inf(node.a, c) if isinstance(node, tirx.Div) else _times_nan(node.a)

    out = mod
    for gvar, func in mod.functions_items():
        if isinstance(func, tirx.PrimFunc):
            body = tvm_ffi.structural_map(func.body, [((tirx.Div, tirx.Mod), by_constant),
                                                      (tvm.ir.expr.Call, unguarded)], order="pre")
            if not body.same_as(func.body):
                out = out if out is not mod else mod.clone()
                out[gvar] = func.with_body(body)
    return out


def _guarded(op, a, b, guard):
    """op(a, guard(b)): b kept from TVM's simplifier. bfloat16 in float32, as TVM computes it anyway:
    its storage pass would turn a bfloat16 reinterpret into one from float32 to uint16, of another size."""
    guarded = guard(b)
    if guarded is b:  # nothing to keep (a constant)
        return op(a, b)
    if _dtype(a) == "bfloat16":
        return tirx.Cast("bfloat16", op(tirx.Cast("float32", a), guard(tirx.Cast("float32", b))))
    return op(a, guarded)


def _kept_unless_constant(b):
    """b kept from TVM's simplifier, but for a constant (nothing to cancel it with)."""
    return b if not isinstance(b, tvm.ir.expr.Expr) or isinstance(b, (tirx.IntImm, tirx.FloatImm)) else kept(b)


def subtract(a, b):
    """a - b that TVM's simplifier cannot cancel: it rewrites `x - x`, `x*2 - x*2` (once a fused
    kernel has inlined both sides) and `(x + y) - y` as if floats were real numbers, losing the NaN
    of inf - inf and the rounding of x + y. With a constant b, a is kept instead: `(x + 1) - 1`
    folded to x lost log1p's correction (log1p(1e-6) was 0.3% off)."""
    if isinstance(b, tirx.FloatImm) and _kept_unless_constant(a) is not a:
        return _guarded(lambda constant, kept_a: kept_a - constant, b, a, _kept_unless_constant)
    return _guarded(operator.sub, a, b, _kept_unless_constant)


def divide(a, b):
    """a / b whose divisor TVM's simplifier cannot fold to a constant 0: it refuses to divide by one
    ("Divide by zero", a failed build or, inside a schedule's compute_inline, an aborted process),
    where IEEE (and torch) give ±inf or NaN: `0.0 / (x - x)`, `x / zeros_like(x)` once fused, and a
    constant 0 (`divide(x, 0.0)`, a * ±inf). A constant ±0 over b, which it folds to 0, is `zero_over`."""
    if _is_zero(b):
        return _times_inf(a, b)
    if _is_zero(a) and isinstance(b, tvm.ir.expr.Expr):
        return zero_over(b, -1 if math.copysign(1.0, a.value) < 0 else 1)
    return _guarded(operator.truediv, a, b, _kept_unless_constant)


def _scalar_zero(expr) -> int | None:
    """The sign (1 or -1) of a 0-d float constant that is ±0, else None."""
    value = _try_convert_to_scalar_const(expr, python_native=True)
    if isinstance(value, float) and value == 0:
        return -1 if math.copysign(1.0, value) < 0 else 1
    return None


def _wrapping_int(rule, name):
    """A legalization of `name` on int32/int64 tensors that wraps on overflow (None otherwise)."""
    scalar_rule = wrapping(rule)

    def legalize(bb, call):
        if str(call.ty.dtype) not in WRAPPING:
            return None
        a, b = call.args
        b = _try_convert_to_scalar_const(b)
        a = _try_convert_to_scalar_const(a) if isinstance(b, relax.Expr) else a
        if not isinstance(a, relax.Expr):  # a scalar constant first: write it as the rule's second
            a, b, swapped = b, a, True
        else:
            swapped = False
        return bb.call_te(lambda x, y: _elementwise(_named(lambda p, q: scalar_rule(q, p) if swapped
                                                           else scalar_rule(p, q), name), x, y),
                          a, b, primfunc_name_hint=name)
    return legalize


def _named(fn, name):
    fn.__name__ = name
    return fn


def _first(*rules):
    """The first of these legalizations that applies (returns a value)."""
    def legalize(bb, call):
        for rule in rules:
            result = rule(bb, call)
            if result is not None:
                return result
        return None
    return legalize


def _with_zero(rule_first, rule_second, name):
    """A legalization of `name` for a float operand and a constant ±0: `rule_first(x, sign)` where the
    zero is the first operand, `rule_second` where it is the second (None: TVM's own is right)."""
    def legalize(bb, call):
        if not is_float_dtype(call.ty.dtype):
            return None
        for rule, zero, other in ((rule_first, call.args[0], call.args[1]), (rule_second, call.args[1], call.args[0])):
            sign = _scalar_zero(zero) if rule is not None else None
            if sign is not None and _is_relax_tensor(other) and str(other.ty.dtype) == str(call.ty.dtype):
                return _each(bb, other, functools.partial(rule, sign=sign), name)
        return None
    return legalize


def _is_relax_tensor(expr) -> bool:
    return isinstance(expr.ty, relax.TensorType) and expr.ty.ndim >= 0 and _scalar_zero(expr) is None


# -- integer arithmetic wraps around, as in torch: TVM's LLVM code generator emits int32 and uint32
# `+`, `-`, `*` with `nsw`/`nuw` (overflow is undefined), and LLVM then rewrites `x + INT_MIN` as
# `x | INT_MIN`. An int32 operation is computed in int64, where it cannot overflow, and truncated
# (which wraps). int64 has no wider type: its overflow stays undefined.
WRAPPING = {"int32": "int64"}


def wrapping(rule):
    """`rule(a, b)` on int32 computed so that overflow wraps (other dtypes as they are)."""
    @functools.wraps(rule)
    def wrapped(a, b):
        dtype = _dtype(a)
        b = b if isinstance(b, tvm.ir.expr.Expr) else tirx.const(b, dtype)
        if dtype not in WRAPPING:
            return rule(a, b)
        wide = WRAPPING[dtype]
        return tirx.Cast(dtype, rule(tirx.Cast(wide, a), tirx.Cast(wide, b)))
    return wrapped


def _arg_combine(better):
    """The (index, value) combiner of argmax (`better` is `>`) or argmin (`<`): a NaN beats any
    number, then the better value, and among equals (NaNs too) the smaller index."""
    def combine(x, y):
        (xi, xv), (yi, yv) = x, y
        x_nan, y_nan = isnan(xv), isnan(yv)
        first = xi < yi
        x_wins = tirx.Select(x_nan, tirx.Or(tirx.Not(y_nan), first),
                             tirx.And(tirx.Not(y_nan), tirx.Or(better(xv, yv), tirx.And(xv == yv, first))))
        return [tirx.Select(x_wins, xi, yi), tirx.Select(x_wins, xv, yv)]
    return combine


_ARG_COMBINE = {"argmax": _arg_combine(lambda a, b: a > b), "argmin": _arg_combine(lambda a, b: a < b)}


def online_combine(x, y):
    """The (sum of exp(element - max), max) pairs of an online softmax, in float32: the sum of the
    side with the smaller max is rescaled to the larger one (one exp). Equal maxima add their sums
    as they are, so the identity (0, -inf) and rows that start with -inf (a causal mask) never make
    exp(-inf - -inf); torch's NaN for rows whose max is ±inf or NaN comes after the reduction
    (`online_sum`), and the max takes torch's NaN rule (nan_max). The sum comes first: TVM's
    cross-thread reduction stores the combined values in order, each store seen by the next value's
    expression, and the max does not read the sum."""
    (xs, xm), (ys, ym) = x, y
    # `ys / exp(xm - ym)`, not `ys * exp(ym - xm)`: an element enters with ys = 1, and TVM folds
    # `1 * e` as it builds the block's update, which then no longer matches this combiner (no
    # cross-thread reduction); exp overflowing to inf makes the term 0, as the other form's underflow
    rescaled = tirx.Select(xm < ym, xs * tirx.exp(xm - ym) + ys, xs + ys)
    return [tirx.Select(ym < xm, xs + ys / tirx.exp(xm - ym), rescaled), nan_max(xm, ym)]


def online_sum(m, s):
    """The reduced sum as torch's two passes give it: where the max is ±inf (or NaN) some element's
    exp(x - max) is NaN, so the sum is NaN."""
    return tirx.Select(tirx.abs(m) < tirx.const(INF, "float32"), s, tirx.const(float("nan"), "float32"))


def guarded_online_sum(m, s):
    """The sum of exp(x - g) with g = 0 where the max is ±inf (torch.logsumexp's shift), from the online
    pair: the pair's sum where the max is finite; 0 where it is -inf (every element is); inf where it is
    inf (an element is); NaN where it is NaN."""
    inf = tirx.const(INF, "float32")
    return tirx.Select(tirx.abs(m) < inf, s, tirx.Select(m < tirx.const(0, "float32"), tirx.const(0, "float32"),
                                                        tirx.Select(m > tirx.const(0, "float32"), inf,
                                                                    tirx.const(float("nan"), "float32"))))


_IDENTITY = {"max": -INF, "min": INF, "argmax": -INF, "argmin": INF}


def _dtype(expr) -> str:
    return str(expr.ty.dtype)


def _last_index(dtype: str):
    return tirx.const((1 << (tvm.DataType(dtype).bits - 1)) - 1, dtype)


# -- the reducers, registered with TVM so that its schedules recognise them ----------------------
def reducers() -> dict:
    """name -> te.comm_reducer, max and min finding NaN by the current `nan_test`; the first call
    registers every combiner's pattern with TVM's registry (`_registered`)."""
    _registered()
    return _reducers(_NAN_TEST.get())


@functools.cache
def _reducers(test: str) -> dict:
    found = {name: te.comm_reducer(_combiner(rule, test), lambda dtype, v=_IDENTITY[name]: tirx.const(v, dtype),
                                   name=f"nan_{name}")
             for name, rule in (("max", nan_max), ("min", nan_min))}
    for name, combine in _ARG_COMBINE.items():
        found[name] = te.comm_reducer(
            combine, lambda index_dtype, value_dtype, v=_IDENTITY[name]: [_last_index(index_dtype),
                                                                           tirx.const(v, value_dtype)],
            name=f"nan_{name}")
    found["online_softmax"] = te.comm_reducer(
        online_combine, lambda s_dtype, m_dtype: [tirx.const(0, s_dtype), tirx.const(-INF, m_dtype)],
        name="online_softmax")
    return found


def _combiner(rule, test: str):
    """rule(a, b) with NaN found by `test`: a function of exactly two arguments, as te.comm_reducer wants."""
    def combine(a, b):
        return rule(a, b, test)
    return combine


@functools.cache
def _registered() -> None:
    """The reducers' combiners (max and min in both NaN tests) registered with TVM's registry, which
    rfactor and cross-thread reductions match a reduction's combiner against."""
    registry = tvm.get_global_func("s_tir.schedule.RegisterReducer")

    def register(n_buffers, combiner, identity):
        # TVM keeps these in a C++ static that outlives the interpreter: one extra reference each
        # means they are never freed (freeing them after Python has shut down aborts the process)
        functions = [tvm_ffi.convert(combiner), tvm_ffi.convert(identity)]
        for function in functions:
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(function))
        registry(n_buffers, *functions)
    for name, rule in (("max", nan_max), ("min", nan_min)):
        for test in ("compares", "isnan"):
            register(1, lambda x, y, combine=_combiner(rule, test): [combine(x[0], y[0])],
                     lambda values, v=_IDENTITY[name]: [tirx.const(v, _dtype(values[0]))
                                                        if is_float_dtype(_dtype(values[0])) else values[0]])
    for name, combine in _ARG_COMBINE.items():
        def identity_getter(values, v=_IDENTITY[name]):
            index, value = values
            if not (_dtype(index).startswith("int") and is_float_dtype(_dtype(value))):
                return list(values)  # not ours: the combiner will not match either
            return [_last_index(_dtype(index)), tirx.const(v, _dtype(value))]
        register(2, lambda x, y, combine=combine: combine(x, y), identity_getter)

    def online_identity(values):
        if not all(_dtype(v) == "float32" for v in values):
            return list(values)  # not ours: the combiner will not match either
        return [tirx.const(0, "float32"), tirx.const(-INF, "float32")]
    register(2, online_combine, online_identity)


# -- the legalizations ---------------------------------------------------------------------------
def _elementwise(rule, a, b):
    return te.compute(_broadcast_shape(a, b), lambda *i: rule(_at(a, i), _at(b, i)), name="T_" + rule.__name__)


def _broadcast_shape(*operands):
    """The shape the operands (tensors or numbers) broadcast to: each axis the first size not 1."""
    shapes = [list(t.shape) if isinstance(t, te.Tensor) else [] for t in operands]
    ndim = max(len(s) for s in shapes)
    shapes = [[1] * (ndim - len(s)) + s for s in shapes]
    return [next((size for size in sizes if not _is_one(size)), sizes[-1]) for sizes in zip(*shapes)]


def _is_one(size) -> bool:
    return int(size) == 1 if isinstance(size, (int, tirx.IntImm)) else False


def _at(t, index):
    """The element of `t` (a tensor broadcast to the output, or a scalar) at the output's `index`."""
    if not isinstance(t, te.Tensor):
        return t
    offset = len(index) - len(t.shape)
    return t(*[tirx.const(0, _dtype(i)) if _is_one(n) else i
               for n, i in zip(t.shape, index[offset:])])


def _is_int_dtype(dtype) -> bool:
    return str(dtype).startswith(("int", "uint"))


def _binary(rule, topi_fn, applies=is_float_dtype):
    """`rule` on each pair of elements, for results of the dtypes `applies` accepts (None otherwise)."""
    def legalize(bb, call):
        if not applies(call.ty.dtype):
            return None
        a, b = call.args
        b = _try_convert_to_scalar_const(b)
        return bb.call_te(lambda x, y: _elementwise(rule, x, y), a, b, primfunc_name_hint=topi_fn)
    return legalize


def _each(bb, x, rule, name: str):
    """A kernel `name` applying `rule` to each element of the Relax tensor `x`."""
    return bb.call_te(lambda t: te.compute(t.shape, lambda *i: rule(t(*i)), name=f"T_{name}"), x,
                      primfunc_name_hint=name)


def _relu(bb, call):
    if not is_float_dtype(call.ty.dtype):
        return None
    return _each(bb, call.args[0], lambda v: nan_max(v, tirx.const(0, _dtype(v))), "relu")


def _clip(bb, call):
    if not is_float_dtype(call.ty.dtype):
        return None

    def clip(x, lo, hi):
        lo, hi = (tirx.Cast(x.dtype, v) if _dtype(v) != x.dtype else v for v in (lo, hi))
        return te.compute(x.shape, lambda *i: nan_min(nan_max(x(*i), lo), hi), name="T_clip")
    return bb.call_te(clip, call.args[0], call.args[1], call.args[2], primfunc_name_hint="clip")


def _where(bb, call):
    """where(c, a, b) with a constant operand written into the kernel as a number (TVM's own passes
    each 0-d constant as a buffer: `where(u == inf, inf, r)` read it in a branch, and CUDA got an
    if/else per select, which nvcc can't share common subexpressions across; log1p's formula in a
    chain was 2.75x torch.compile's time). None where neither value is a constant: TVM's is right."""
    cond, *values = call.args
    values = [_try_convert_to_scalar_const(v) for v in values]
    if not any(isinstance(v, (tirx.FloatImm, tirx.IntImm)) for v in values):
        return None
    dtype = str(call.ty.dtype)

    def where(c, a, b):
        def value(t, i):
            v = _at(t, i)  # an element, or the constant (a FloatImm or IntImm)
            return v if _dtype(v) == dtype else tirx.Cast(dtype, v)

        def test(i):
            v = _at(c, i)
            return v if _dtype(v) == "bool" else v != tirx.const(0, _dtype(v))
        return te.compute(_broadcast_shape(c, a, b), lambda *i: tirx.Select(test(i), value(a, i), value(b, i)),
                          name="T_where")
    return bb.call_te(where, cond, *values, primfunc_name_hint="where")


def _not_equal(bb, call):
    a, b = call.args
    if not is_float_dtype(a.ty.dtype):
        return None

    def rule(x, y):
        return tirx.Or(tirx.Or(x != y, isnan(x)), isnan(y))
    rule.__name__ = "not_equal"
    return bb.call_te(lambda x, y: _elementwise(rule, x, y), a, _try_convert_to_scalar_const(b),
                      primfunc_name_hint="not_equal")


def float_equal(a, b):
    """a == b that TVM's simplifier cannot fold to True when both sides are the same expression
    (`x == x`, once a fused kernel reads one buffer for both): False at NaN, as in torch."""
    if _kept_unless_constant(b) is b:
        return a == b
    if _dtype(a) == "bfloat16":  # see _guarded: no bfloat16 reinterpret
        a, b = tirx.Cast("float32", a), tirx.Cast("float32", b)
    return a == kept(b)


def _equal(bb, call):
    a, b = call.args
    if not is_float_dtype(a.ty.dtype):
        return None

    def rule(x, y):
        return float_equal(x, y)
    rule.__name__ = "equal"
    return bb.call_te(lambda x, y: _elementwise(rule, x, y), a, _try_convert_to_scalar_const(b),
                      primfunc_name_hint="equal")


def _logical_not(bb, call):
    """`not c` as `c ^ True`: TVM's simplifier rewrites `!(a >= b)` as `a < b`, which is false where
    a or b is NaN (torch: `~(nan >= 1)` is True). An exclusive-or it leaves alone, and LLVM and
    nvcc fold it into an unordered comparison, NaN-correct and as fast."""
    (x,) = call.args
    if x.ty.dtype != "bool":
        return None
    return _each(bb, x, lambda v: tirx.bitwise_xor(v, tirx.const(True, "bool")), "logical_not")


def _astype(bb, call):
    """A cast to bool as `x != 0` (NaN is True, as in torch): TVM folds a cast of a constant such as
    -1.5 to the bool -1 and then refuses it ("exceeds range of bool"). float64 to float16 through
    float32, as torch converts (c10::Half is made from a float): 65519.99 rounds to 65520 there, so
    inf, where one rounding gives 65504 (bfloat16's storage pass rounds through float32 already)."""
    (x,) = call.args
    if call.attrs.dtype == "float16" and x.ty.dtype == "float64":
        return _each(bb, x, lambda v: tirx.Cast("float16", tirx.Cast("float32", v)), "astype")
    if call.attrs.dtype != "bool" or x.ty.dtype == "bool":
        return None
    zero = tirx.const(0, x.ty.dtype)
    float_ = is_float_dtype(x.ty.dtype)

    def nonzero(v):
        return tirx.Or(v != zero, isnan(v)) if float_ else v != zero
    return _each(bb, x, nonzero, "astype")


def _full(bb, call):
    """full/full_like of ±inf or NaN (a causal mask: `full_like(x, -inf)`): TVM's legalization asks
    `"float" in dtype` of a dtype object and fails; the same kernel with the dtype's name."""
    value = _try_convert_to_scalar_const(call.args[1], python_native=True)
    shape = call.args[0].ty.shape if call.op.name == "relax.full_like" else call.args[0]
    if not (isinstance(value, float) and not math.isfinite(value) and isinstance(shape, relax.ShapeExpr)):
        return None
    return bb.call_te(topi.full, shape.values, str(call.ty.dtype), value, primfunc_name_hint="full")


def _arange(bb, call):
    """arange as a kernel of its index (`start + i * step`), also where its bounds are constants: TVM
    folds those into a constant tensor, which a consumer then reads from memory (label smoothing's
    one-hot compare read 8 bytes of int64 a logit, and its width set the row kernel's vectors)."""
    start, end, step = call.args
    if not isinstance(call.ty, relax.TensorType) or call.ty.shape is None:
        return None
    return bb.call_te(topi.arange, start, end, step, str(call.attrs.dtype), primfunc_name_hint="arange")


def _bucketize(bb, call):
    """bucketize with torch's NaN rule: a NaN goes past every boundary (index len(boundaries)), where
    TVM's binary search, whose ordered compares are false for NaN, puts it at 0."""
    x, boundaries = call.args
    if not is_float_dtype(x.ty.dtype):
        return None
    out_dtype = str(call.ty.dtype)

    def compute(b, v):
        found = topi.searchsorted(b, v, call.attrs.right, out_dtype)
        past_all = tirx.Cast(out_dtype, b.shape[-1])
        return te.compute(found.shape, lambda *i: tirx.Select(isnan(v(*i)), past_all, found(*i)), name="T_bucketize")
    return bb.call_te(compute, boundaries, x, primfunc_name_hint="bucketize")


def _axes(axis, ndim: int) -> list[int]:
    if axis is None:
        return list(range(ndim))
    axes = [int(a) for a in axis] if isinstance(axis, (list, tuple, tvm.ir.Array)) else [int(axis)]
    return sorted({a % ndim for a in axes})


def _reduce_compute(x, axes, keepdims, body, name):
    """te.compute of a reduction of `x` over `axes`; `body(index_of_x, reduce_axes)` is the Reduce."""
    ndim = len(x.shape)
    raxes = [te.reduce_axis((0, x.shape[a]), name=f"k{a}") for a in axes]
    shape = [1 if i in axes else n for i, n in enumerate(x.shape) if keepdims or i not in axes]

    def compute(*index):
        out, red = iter(index), iter(raxes)
        full = []
        for i in range(ndim):
            if i in axes:
                full.append(next(red))
                if keepdims:
                    next(out)
            else:
                full.append(next(out))
        return body(full, raxes)
    return te.compute(shape, compute, name=name)


def _statistical(name):
    def legalize(bb, call):
        x = call.args[0]
        if not is_float_dtype(x.ty.dtype) or x.ty.ndim == 0:
            return None
        axes = _axes(call.attrs.axis, x.ty.ndim)
        reducer = reducers()[name]

        def te_fn(data):
            return _reduce_compute(data, axes, call.attrs.keepdims,
                                   lambda full, raxes: reducer(data[tuple(full)], axis=raxes), f"T_{name}")
        return bb.call_te(te_fn, x, primfunc_name_hint=name)
    return legalize


def _arg(name):
    def legalize(bb, call):
        x = call.args[0]
        if not is_float_dtype(x.ty.dtype) or x.ty.ndim == 0:
            return None
        axes = _axes(call.attrs.axis, x.ty.ndim)
        index_dtype = call.ty.dtype

        def te_fn(data):
            index, _ = arg_reduce(data, name, axes, call.attrs.keepdims, index_dtype)
            # both halves of the pair stay temporaries, copied out by a block of their own (as
            # TVM's argmax is): Dlight's GeneralReduction keeps them in registers then
            return te.compute(index.shape, lambda *i: index(*i), name=f"T_{name}")
        return bb.call_te(te_fn, x, primfunc_name_hint=name)
    return legalize


def arg_reduce(data, name: str, axes, keepdims, index_dtype):
    """TE: the (index, value) pair of argmax or argmin (`name`) of `data` over `axes`, one reduction
    (the index row-major within the reduced axes; the value is the element at it)."""
    reducer = reducers()[name]

    def body(full, raxes):
        index = tirx.const(0, index_dtype)
        for r in raxes:  # the row-major position within the reduced axes
            index = index * tirx.Cast(index_dtype, r.dom.extent) + tirx.Cast(index_dtype, r.var)
        return reducer((index, data[tuple(full)]), axis=raxes)
    return _reduce_compute(data, axes, keepdims, body, f"T_{name}_temp")


_RULES = {
    "relax.maximum": _binary(nan_max, "maximum"),
    "relax.minimum": _binary(nan_min, "minimum"),
    "relax.nn.relu": _relu,
    "relax.clip": _clip,
    "relax.not_equal": _not_equal,
    "relax.where": _where,
    "relax.equal": _equal,
    "relax.logical_not": _logical_not,
    "relax.astype": _astype,
    "relax.full": _full,
    "relax.full_like": _full,
    "relax.bucketize": _bucketize,
    "relax.arange": _arange,
    "relax.multiply": _first(_with_zero(times_zero, times_zero, "multiply"), _wrapping_int(operator.mul, "multiply")),
    "relax.divide": _first(_with_zero(zero_over, None, "divide"), _binary(divide, "divide")),
    "relax.add": _first(_with_zero(plus_zero, plus_zero, "add"), _wrapping_int(operator.add, "add")),
    "relax.subtract": _first(_with_zero(None, lambda x, sign: plus_zero(x, -sign), "subtract"),
                             _wrapping_int(operator.sub, "subtract"), _binary(subtract, "subtract")),
    "relax.floor_mod": _first(_binary(floor_mod, "floor_mod"), _binary(int_floor_mod, "floor_mod", _is_int_dtype)),
    "relax.floor_divide": _first(_binary(floor_divide, "floor_divide"), _binary(int_floor_divide, "floor_divide", _is_int_dtype)),
    "relax.max": _statistical("max"),
    "relax.min": _statistical("min"),
    "relax.argmax": _arg("argmax"),
    "relax.argmin": _arg("argmin"),
}


def _with_default(op_name, rule):
    """`rule`, falling back to TVM's own legalization where it returns None (integer operands)."""
    default = tvm.ir.Op.get(op_name).get_attr("FLegalize")

    def legalize(bb, call):
        result = rule(bb, call)
        return default(bb, call) if result is None else result
    return legalize


@functools.cache
def legalize_map() -> dict:
    """Op name -> legalization, for `relax.transform.LegalizeOps(customize_legalize_map=...)`."""
    half = half_accumulating_legalizations()
    assert not half.keys() & _RULES.keys(), "an op has two of babytriton's legalizations"
    rules = {**half, **{name: _with_default(name, rule) for name, rule in _RULES.items()}}
    for name in UNIT_REDUCTIONS:
        default = rules.get(name) or tvm.ir.Op.get(name).get_attr("FLegalize")
        rules[name] = functools.partial(_unit_axes_first, default)
    return rules


# A reduction over axes that all have size 1 reads one element per result: it is written as that
# element (a reshape). TVM's schedules would see a reduction whose only axis normalises away, then
# inline the next op into both its init and its update (the `+ y` after `x.mean(axis=0)` of a (1, n)
# tensor added twice: found by the fuzzer).
UNIT_REDUCTIONS = {"relax.sum": "same", "relax.mean": "same", "relax.prod": "same", "relax.max": "same",
                   "relax.min": "same", "relax.variance": "zero", "relax.std": "zero",
                   "relax.argmax": "index", "relax.argmin": "index"}


def _unit_axes_first(default, bb, call):
    x, ty = call.args[0], call.ty
    if not (isinstance(x.ty, relax.TensorType) and x.ty.shape is not None and isinstance(ty, relax.TensorType)
            and ty.shape is not None):
        return default(bb, call)
    shape = x.ty.shape.values
    axis = call.attrs.axis
    axes = range(len(shape)) if axis is None else (
        [int(axis) % len(shape)] if isinstance(axis, (int, tvm.tirx.IntImm)) else [int(a) % len(shape) for a in axis])
    if not shape or not all(isinstance(shape[a], tvm.tirx.IntImm) and int(shape[a]) == 1 for a in axes):
        return default(bb, call)
    kind, out = UNIT_REDUCTIONS[call.op.name], list(ty.shape.values)

    def compute(data):
        if kind == "index":
            return topi.full(out, str(ty.dtype), 0)
        # x - x: 0, and NaN where x is NaN or inf (the simplifier's x - x = 0 kept out, see `subtract`)
        value = te.compute(data.shape, lambda *i: subtract(data(*i), data(*i)), name="T_zero") \
            if kind == "zero" else data
        return topi.reshape(topi.cast(value, str(ty.dtype)), out)
    return bb.call_te(compute, x, primfunc_name_hint=call.op.name.split(".")[-1])


# --------------------------------------------------------------------------------------------------
# half-precision sums accumulate in float32
# --------------------------------------------------------------------------------------------------

# FuseOps's op pattern kinds (tvm/relax/analysis): only their order matters here.
OP_PATTERN = "op_pattern"


# Ops that add up (or multiply up) many elements: in a half dtype they accumulate in float32 and
# round once at the end, as torch does (a float16 sum stops growing at 2048, a bfloat16 one at 256).
# One exception in torch: its CPU float16 `prod` multiplies in float16 (1e4 * 1e4 * 1e-4 * 1e-4 is
# inf there, 1 here and in its CUDA and bfloat16 kernels).
# The compiler legalizes them so (below); the eager reference computes them on float32 copies.
HALF_ACCUMULATE = {"sum", "mean", "prod", "std", "variance", "softmax", "log_softmax",
                   "layer_norm", "rms_norm", "group_norm", "instance_norm", "cross_entropy_with_logits",
                   "nll_loss", "collapse_sum_like", "collapse_sum_to", "avg_pool1d", "avg_pool2d", "avg_pool3d",
                   "adaptive_avg_pool1d", "adaptive_avg_pool2d", "adaptive_avg_pool3d"}
# Element-wise functions that torch computes on float32 values of half operands and rounds once
# (its "opmath"): TVM's own kernels round every step of gelu's or silu's formula to the half dtype,
# and a half `herf` call keeps the CUDA kernel from loading vectors (bfloat16 GELU ran at 0.6 of
# Inductor's speed).
HALF_OPMATH = {"gelu", "gelu_tanh", "silu", "selu", "softplus", "sigmoid", "tanh", "erf"}
HALF_IN_FLOAT32 = HALF_ACCUMULATE | HALF_OPMATH


def _relax_op(name: str):
    """The Relax op `name` (relax.nn.softmax, relax.sum)."""
    try:
        return tvm.ir.Op.get("relax.nn." + name)
    except AttributeError:  # TVM's "not registered"
        return tvm.ir.Op.get("relax." + name)


def half_accumulating_legalizations() -> dict:
    """LegalizeOps overrides for the ops that add up many elements (HALF_ACCUMULATE) and the
    element-wise functions torch computes in float32 (HALF_OPMATH): on float16/bfloat16 operands, TVM's own kernel computed in float32 and rounded once at the end, as
    torch computes them. The casts are stages of that one kernel (no float32 copy in memory), and
    the kernel keeps the fusion pattern of the half one, so fusion makes the same kernels as before."""
    overrides = {}
    for name in HALF_IN_FLOAT32:
        op = _relax_op(name)
        default = op.get_attr("FLegalize")
        if default is not None:
            overrides[op.name] = functools.partial(_legalize_in_float32, default)
    return overrides


# Averages over a static size 0 are NaN, as in torch (TVM's kernel would divide by a constant 0).
NAN_WHEN_EMPTY = {"relax.mean", "relax.variance", "relax.std"}


def _averages_nothing(call: relax.Call) -> bool:
    if call.op.name not in NAN_WHEN_EMPTY or call.args[0].ty.shape is None:
        return False
    shape = call.args[0].ty.shape.values
    axes = range(len(shape)) if call.attrs.axis is None else [int(a) % len(shape) for a in call.attrs.axis]
    return any(isinstance(shape[a], tvm.tirx.IntImm) and int(shape[a]) == 0 for a in axes)


def _statically_empty(call: relax.Call) -> bool:
    """A result with no elements (layer_norm over a size-0 axis): nothing to compute, and TVM's
    kernel would divide by a constant 0."""
    ty = call.ty
    return isinstance(ty, relax.TensorType) and ty.shape is not None and any(
        isinstance(d, tvm.tirx.IntImm) and int(d) == 0 for d in ty.shape.values)


def _legalize_in_float32(default, bb: relax.BlockBuilder, call: relax.Call) -> relax.Expr:
    if _statically_empty(call):
        return bb.call_te(topi.full, call.ty.shape.values, str(call.ty.dtype), 0.0)
    if _averages_nothing(call):
        return bb.call_te(topi.full, call.ty.shape.values, str(call.ty.dtype), float("nan"))
    if not any(_is_half(a) for a in call.args):
        return default(bb, call)
    # the fusion pattern of the op's own kernel, on float32 operands (a half one may not even build)
    scratch = relax.BlockBuilder()
    wide = [relax.Var("x", relax.TensorType(a.ty.shape, "float32")) if _is_half(a) else a for a in call.args]
    pattern = _pattern(scratch, default(scratch, scratch.normalize(relax.Call(call.op, wide, call.attrs))))
    scalar = isinstance(call.ty, relax.TensorType) and call.ty.ndim == 0
    return default(_InFloat32(bb, pattern, scalar), call)


def _is_half(expr) -> bool:
    return isinstance(expr.ty, relax.TensorType) and expr.ty.dtype in HALF


def _pattern(scratch: relax.BlockBuilder, call) -> int | None:
    if not isinstance(call, relax.Call) or call.op != tvm.ir.Op.get("relax.call_tir"):
        return None
    mod = relax.transform.AnnotateTIROpPattern()(scratch.get())
    attrs = mod[call.args[0]].attrs
    return int(attrs[OP_PATTERN]) if attrs is not None and OP_PATTERN in attrs else None


class _InFloat32:
    """A BlockBuilder whose call_te computes the TE function on float32 copies of its half inputs and
    rounds its float32 results back to that half dtype (other calls go to the real builder)."""

    def __init__(self, bb, pattern, scalar: bool):
        self._bb, self._pattern, self._scalar = bb, pattern, scalar

    def __getattr__(self, name):
        return getattr(self._bb, name)

    def call_te(self, func, *args, **kwargs):
        half = next((a.ty.dtype for a in _relax_args(args) if _is_half(a)), None)
        if half is None:  # reads no half tensor (TVM fills a reduction over a size 0 with its identity)
            return self._bb.call_te(func, *args, **kwargs)

        @functools.wraps(func)
        def in_float32(*te_args, **te_kwargs):
            cast = [topi.cast(a, "float32") if _te_half(a) else a for a in te_args]
            return _round(func(*cast, **te_kwargs), half)

        if self._scalar:
            # a reduction to one number: its cast stays a kernel of its own (one element), since
            # Dlight's GPU reduction rules decline a scalar reduction with an epilogue
            wide = self._bb.emit(self._bb.call_te(functools.wraps(func)(lambda *a, **k: func(*[
                topi.cast(x, "float32") if _te_half(x) else x for x in a], **k)), *args, **kwargs))
            return self._bb.call_te(topi.cast, wide, half)
        if self._pattern is not None:
            kwargs["primfunc_attrs"] = {**kwargs.get("primfunc_attrs", {}), OP_PATTERN: self._pattern}
        return self._bb.call_te(in_float32, *args, **kwargs)


def _relax_args(args):
    for a in args:
        if isinstance(a, (list, tuple)):
            yield from _relax_args(a)
        elif isinstance(a, relax.Expr):
            yield a


def _te_half(value) -> bool:
    return isinstance(value, te.Tensor) and value.dtype in HALF


def _round(result, half: str):
    if isinstance(result, (list, tuple)):
        return type(result)(_round(r, half) for r in result)
    return topi.cast(result, half) if isinstance(result, te.Tensor) and result.dtype == "float32" else result
