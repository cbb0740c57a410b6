"""@jit functions calling @jit functions: the callee is inlined into the caller.

A call `g(x)` inside @jit `f` compiles g's body in place, inside f's Relax function, with g's
parameters bound to the caller's values. Inlining rather than calling a second Relax function is
what lets fusion see through the call: FuseOps only groups operators within one function's dataflow
blocks. `exp(swish(x + 1)) * 2` with swish(x) = x * sigmoid(x) compiles to one fused kernel inlined,
and to three (add; sigmoid-multiply; exp-multiply) as a call to a second Relax function. g's annotations are checked against the arguments at
the call; g's own options (target, schedule) don't apply, the caller's do. Recursion cannot be
inlined and is rejected at the call that closes the cycle.

Undecorated Python functions (`rotate_half(q)`) are inlined the same way (`call_plain`), as
torch.compile traces through them: their arguments pass as they are, their annotations unread.
"""
from __future__ import annotations

from tvm import relax

from ..frontend import devices
from ..core.errors import CompilationError, Diagnostic
from ..frontend.function import Decorated, FunctionInfo, PlainFunction
from ..core.types import SCALAR_TYPES, format_shape, is_float_dtype
from .values import describe, dtype_of, is_python_scalar, is_symbolic, is_tensor, same_size, shape_of

SCALAR_KINDS = {"bool": (bool,), "int64": (int,), "float64": (int, float)}


def is_jit_function(value) -> bool:
    return isinstance(value, Decorated)


def call(cg, function: Decorated, args: list, kwargs: dict, call_line: int | None):
    """Compile `function(*args, **kwargs)` into the function `cg` is building; return its value."""
    check_cycle(cg, function.info)
    return body(cg, function.info, bind(cg, function.info, args, kwargs), call_line)


def call_plain(cg, callee: PlainFunction, args: list, kwargs: dict, call_line: int | None):
    """An undecorated Python function called from @jit code, inlined as torch.compile traces through
    one: its parameters bound to the caller's values as they are (numbers, tuples and None stay
    compile-time values), its annotations ignored."""
    check_cycle(cg, callee)
    try:
        callee.parsed  # noqa: B018 - parsed on first use
    except CompilationError as e:  # no readable source: said at the call
        raise Diagnostic(f"cannot inline {callee.name}(): {e.message}") from None
    try:
        bound = callee.signature.bind(*args, **kwargs)
    except TypeError as e:
        raise Diagnostic(f"{callee.name}({', '.join(p.name for p in callee.params)}): {e}") from None
    bound.apply_defaults()
    return body(cg, callee, dict(bound.arguments), call_line)


def check_cycle(cg, callee) -> None:
    if callee.fn in cg.inline_chain:
        chain = [*cg.inline_chain, callee.fn]
        cycle = " -> ".join(f.__name__ for f in chain[cg.inline_chain.index(callee.fn):])
        raise Diagnostic(f"recursive call ({cycle}): functions called from @jit code are inlined, so "
                         "they cannot call themselves; write the recursion as a loop")


def body(cg, callee, values: dict, call_line: int | None):
    """Compile the callee's body in place, its parameters bound to `values`; its value. Errors point
    at the callee's line and say where it was called from."""
    if cg.placement is None and devices.uses_device_blocks(callee.parsed.tree):
        raise Diagnostic(f"{callee.name}() has `with bt.device(...)` blocks, so it can only be called from "
                         "@jit code that has device blocks too (its vdevices belong to the caller's module)")
    chain = [*cg.inline_chain, callee.fn]
    child = type(cg)(callee.parsed, {}, cg.options)
    child.share(cg, chain)
    child.callee = callee   # whose parameters to specialise when it needs a number at compile time
    try:
        result = child.inline(values)
    except CompilationError as e:
        where = f"{cg.parsed.source_map.filename}:{call_line}" if call_line else cg.parsed.name
        raise CompilationError(f"{e.message} (in '{callee.name}', called from {where})", e.filename,
                               e.lineno, e.col, e.source_line, e.end_col) from None
    # the fusion map relates kernels to the caller's lines: the callee's bindings are this call's
    for var in child.binding_lines:
        cg.binding_lines[var] = cg.lineno
        cg.binding_nodes[var] = cg.node
    return result


def bind(cg, callee: FunctionInfo, args: list, kwargs: dict) -> dict:
    """The callee's parameters bound to the caller's values, each checked against its annotation."""
    try:
        bound = callee.signature.bind(*args, **kwargs)
    except TypeError as e:
        names = ", ".join(p.name for p in callee.params)
        raise Diagnostic(f"{callee.name}({names}): {e}") from None
    bound.apply_defaults()
    sizes: dict[str, object] = {}
    specialised = getattr(callee, "specialised", ())  # numbers it needs at compile time stay numbers (Specialise)
    return {p.name: v if p.name in specialised and is_python_scalar(v) else check(cg, callee.name, p, v, sizes)
            for p, v in ((p, bound.arguments[p.name]) for p in callee.params)}


def check(cg, fname: str, param, value, sizes: dict):
    where = f"{fname}(): parameter '{param.name}'"
    if param.kind == "constexpr":
        if is_tensor(value) or is_symbolic(value):
            raise Diagnostic(f"{where} is bt.constexpr, so it needs a compile-time value, got {describe(value)}")
        return value
    if param.kind == "auto":
        if is_tensor(value) or value is None:  # None: an optional argument, known at compile time
            return value
        if is_python_scalar(value):  # what a direct call would pass: a 0-d int64/float64/bool tensor
            return weak_const(cg, value, SCALAR_TYPES[type(value)])
        raise Diagnostic(f"{where} expects a tensor or a number, got {describe(value)}")
    if param.kind == "scalar":
        return check_scalar(cg, where, param, value)
    annotation = param.annotation  # a bt.Tensor
    if not is_tensor(value):
        raise Diagnostic(f"{where} expects a tensor, got {describe(value)}")
    shape, dtype = shape_of(value), dtype_of(value)
    if len(shape) != annotation.ndim or dtype != annotation.dtype:
        raise Diagnostic(f"{where} expects a {annotation.dtype} tensor of shape {format_shape(annotation.shape)}, "
                         f"got {describe(value)}")
    for axis, (want, got) in enumerate(zip(annotation.shape, shape)):
        if isinstance(want, str):
            known = sizes.setdefault(want, got)
            if not same_size(known, got):
                raise Diagnostic(f"{where}: dimension '{want}' is {known} in an earlier parameter but {got} here "
                                 f"(axis {axis})")
        elif not same_size(got, want):
            raise Diagnostic(f"{where} expects shape {format_shape(annotation.shape)}, got {describe(value)}")
    return value


def weak_const(cg, value, dtype: str):
    """A number passed for a run-time scalar: a 0-d tensor that promotes as the number (cg.is_weak)."""
    const = cg.const(value, dtype)
    cg.weak.append(const)
    return const


def check_scalar(cg, where: str, param, value):
    """A run-time scalar parameter takes a number or a 0-d tensor of its kind, as the 0-d tensor a
    direct call would pass (int64, float64, bool), so that dtypes promote the same either way."""
    dtype = SCALAR_TYPES[param.annotation]
    if is_python_scalar(value):
        if isinstance(value, bool) and param.annotation is not bool or not isinstance(value, SCALAR_KINDS[dtype]):
            raise Diagnostic(f"{where} is annotated {param.annotation.__name__}, got {describe(value)}")
        return weak_const(cg, value, dtype)
    if is_tensor(value) and value.ty.ndim == 0:
        got = dtype_of(value)
        kind_ok = {"bool": got == "bool", "int64": got.startswith(("int", "uint")),
                   "float64": got.startswith(("int", "uint")) or is_float_dtype(got)}[dtype]
        if kind_ok:
            return value if got == dtype else cg.emit(relax.op.astype(value, dtype))
    raise Diagnostic(f"{where} is annotated {param.annotation.__name__}, got {describe(value)}")

