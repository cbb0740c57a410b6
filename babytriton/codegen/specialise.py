"""Which run-time scalar parameters a failing construct needs as compile-time values.

An unannotated number parameter (or one left to its default) compiles as a run-time scalar, a weak
0-d tensor, so that one version serves every value. Where such a value reaches a place that needs a
compile-time one (a size, a dim, a slice bound, `topk`'s k, `min(k, n)` of sizes...), the place
refuses it with a Diagnostic; this turns that refusal into arguments.Specialise for the parameters
the construct's values come from, and the driver compiles a version per value of them, as
torch.compile specialises ints. One choke point (the visitor's error path) serves every such place.
"""
from __future__ import annotations

import ast
import inspect

from tvm import relax

from ..frontend.arguments import Specialise
from ..core.errors import Diagnostic, PathDependent
from .values import is_tensor

# What a run-time scalar parameter's annotation can be (strings: `from __future__ import annotations`)
SCALAR_ANNOTATIONS = (inspect.Parameter.empty, int, float, bool, "int", "float", "bool")
# Those specialised where the code needs their value at compile time: unannotated numbers, and ints and
# bools annotated as model code annotates them (`start_pos: int`, a type hint torch.compile ignores too).
# Floats are never sizes, dims or bounds: a float that reaches such a place stays an error.
SPECIALISABLE = (inspect.Parameter.empty, int, bool, "int", "bool")


def check(cg, node, error: Exception, located) -> Exception:
    """Raise Specialise when the values `node` reads come from unannotated number parameters of the
    function being compiled; else `error`, with a hint where they come from annotated ones."""
    if not hasattr(cg, "bindings") or isinstance(error, PathDependent):
        return error   # backend="tir": scalars are TIR values; a path-dependent kind: not a place for constants
    params = _scalar_params(cg)
    callee = getattr(cg, "callee", None)   # an inlined @jit function (a FunctionInfo): numbers from the call
    numbers = {p.name for p in callee.params if p.kind == "auto"} if hasattr(callee, "specialise") else set()
    origins, passed = set(), set()
    for name, value in _values_read(cg, node):
        origins |= _origins(cg, value, params)
        if name in numbers and not relax.analysis.free_vars(value):  # a number the call passed
            passed.add(name)
    auto = frozenset(n for n in origins if params.get(n) in SPECIALISABLE)
    if auto:
        raise Specialise(auto, located())
    if passed:
        raise Specialise(frozenset(passed), located(), callee)
    annotated = sorted(origins - auto)
    if not annotated or not isinstance(error, Diagnostic):
        return error
    names = ", ".join(f"'{n}'" for n in annotated)
    return Diagnostic(f"{error}; parameter {names} is a run-time float: a size, dim or bound takes an int")


def _scalar_params(cg) -> dict:
    """The outermost function's parameters that can be run-time scalars: name -> annotation (empty:
    unannotated, a tensor or a number by the call)."""
    signature = inspect.signature(cg.inline_chain[0])
    return {name: p.annotation for name, p in signature.parameters.items() if p.annotation in SCALAR_ANNOTATIONS}


def _values_read(cg, node):
    """The weak 0-d tensors among the values of the names `node` reads, with the names."""
    seen = set()
    for name in (n.id for n in ast.walk(node) if isinstance(n, ast.Name)):
        if name in seen or name not in cg.scope:
            continue
        seen.add(name)
        stack = [cg.scope.lookup(name)]
        while stack:
            value = stack.pop()
            if isinstance(value, (tuple, list)):
                stack.extend(value)
            elif is_tensor(value) and cg.is_weak(value):
                yield name, value


def _origins(cg, value, params: dict) -> set:
    """The parameter names a Relax value is computed from, following the emitted bindings; every
    run-time scalar parameter where a var's origin is unknown (a loop function's argument)."""
    found, seen, stack = set(), set(), [value]
    while stack:
        expr = stack.pop()
        if isinstance(expr, relax.Var):
            if expr in seen:
                continue
            seen.add(expr)
            if expr in cg.bindings:
                stack.append(cg.bindings[expr])
            elif expr.name in params:
                found.add(expr.name)
            else:
                return set(params)
        elif isinstance(expr, relax.Expr):   # a constant has none
            stack.extend(relax.analysis.free_vars(expr))
    return found
