"""Calls for the Relax visitor: Python's builtins and math, compile-time sequences, torch's functions and
tensor methods, the library's Relax operators, TensorIR kernels, and other @jit or plain Python functions
(inlined); anything else is refused with what can be called."""
from __future__ import annotations

import ast
import inspect

from ..core.errors import Diagnostic
from ..core.types import Tensor
from ..frontend.function import plain_function
from . import inline, kernels, library, mutation, pytorch, semantic
from .values import PY_BUILTINS, describe, is_symbolic, is_tensor, shape_of


class RelaxCalls:
    """The calls of RelaxCodeGen (a mixin: it uses the visitor's builder and arithmetic)."""

    def visit_Call(self, node: ast.Call):
        if mutation.is_inplace_call(node): return mutation.inplace_call(self, node)  # noqa: E701 - `x.add_(y)`
        func = self.visit(node.func)
        args = self.call_arguments(node.args)
        if any(kw.arg is None for kw in node.keywords):
            raise Diagnostic("`**kwargs` in calls is not supported in @jit functions")
        kwargs = {kw.arg: self.visit(kw.value) for kw in node.keywords}
        name = ast.unparse(node.func)
        if func is len:
            return self.call_len(args, kwargs)
        if func in (tuple, list) or library.resolve(func) is library.lookup("sum") and args and \
                isinstance(args[0], (tuple, list)):
            return self.call_sequence(func, args, kwargs)
        if func in PY_BUILTINS.values() or getattr(func, "__module__", None) == "math":
            return self.call_python(func, args, kwargs)
        if isinstance(func, pytorch.BoundMethod):
            return pytorch.call_method(self.builder, func, args, kwargs)
        if isinstance(func, library.Method):
            return library.call_method(self, func, args, kwargs)
        entry = pytorch.resolve(func)  # torch.exp, F.gelu, torch.Tensor.exp: torch's meaning
        if entry is not None:
            result = pytorch.call(self.builder, entry, args, kwargs)
            if kwargs.get("inplace") is True and node.args:  # F.relu(x, inplace=True) writes x, as in torch
                mutation.store_result(self, node.args[0], result)
            return result
        op = library.resolve(func)
        if op is not None:
            return library.call(self, op, args, kwargs)
        if func is Tensor:  # a type to give a kernel's output: kernel(x, bt.Tensor((n, 4), "float32"))
            try:
                return Tensor(*args, **kwargs)
            except (TypeError, ValueError) as e:
                raise Diagnostic(f"bt.Tensor(shape, dtype): {e}") from None
        if kernels.is_kernel(func):
            return kernels.call(self, func, name, args, kwargs)
        if inline.is_jit_function(func):
            return inline.call(self, func, args, kwargs, self.parsed.source_map.file_line(node.lineno))
        plain = plain_function(func)
        if plain is not None:  # an undecorated Python function: inlined, as torch.compile traces through it
            return inline.call_plain(self, plain, args, kwargs, self.parsed.source_map.file_line(node.lineno))
        raise Diagnostic(self.cannot_call(func, name))

    def cannot_call(self, func, name: str) -> str:
        fname = getattr(func, "__name__", "")
        module = getattr(func, "__module__", None) or ""
        op_name = fname if fname in library.names() else library.OTHER_NAMES.get(fname)
        hint = f"; did you mean the operator '{op_name}'?" if op_name else ""  # torch.sigmoid, numpy.exp, ...
        if module.split(".")[0] == "torch" and callable(func):  # never compiled from torch's own source
            return f"{module}.{fname} is not supported in @jit code (babytriton's torch table has no rule for it){hint}"
        if fname == "<lambda>":
            return (f"cannot call the lambda `{name}` from a @jit function: @jit code inlines the Python "
                    "functions it calls from their source; write it as a `def`")
        if inspect.ismethod(func):
            return (f"cannot call `{name}`, a method of {describe(func.__self__)}, from a @jit function: "
                    "@jit code inlines plain functions only; call a module-level function with the values")
        what = "Python function" if inspect.isfunction(func) else "function" if callable(func) else describe(func)
        return (f"cannot call `{name}` (a {what}) from a @jit function: @jit code calls Relax operators "
                f"(e.g. sigmoid(x), bt.softmax(x)), torch functions, TensorIR kernels and Python functions{hint}")

    def call_sequence(self, func, args: list, kwargs: dict):
        """`tuple(...)`/`list(...)` of a compile-time sequence (a tuple here), and `sum(items, start=0)` of
        one as Python adds it up (`sum(g.square().sum() for g in grads)`), not the library's reduction."""
        if func in (tuple, list):
            if kwargs or len(args) > 1 or args and not isinstance(args[0], (tuple, list)):
                raise Diagnostic(f"{func.__name__}() takes one tuple or list known when compiling, got "
                                 f"{', '.join(describe(a) for a in args)}")
            return tuple(args[0]) if args else ()
        items, start = args[0], args[1] if len(args) > 1 else kwargs.pop("start", 0)
        if kwargs or len(args) > 2:
            raise Diagnostic("sum(items, start=0) of a tuple takes no other arguments")
        total = start
        for item in items:
            total = self.binary(ast.Add(), total, item)
        return total

    def call_len(self, args: list, kwargs: dict):
        if len(args) != 1 or kwargs:
            raise Diagnostic("len() takes exactly one argument")
        (value,) = args
        if is_tensor(value):
            if value.ty.ndim == 0:
                raise Diagnostic("len() of a 0-d tensor is undefined")
            return shape_of(value)[0]
        if not hasattr(type(value), "__len__"):  # a compile-time object's own len() is Python's answer
            raise Diagnostic(f"len() of {describe(value)} is undefined")
        return len(value)

    def call_python(self, func, args: list, kwargs: dict):
        """A builtin (abs, min, max, round, ...) or math function: folded on compile-time numbers;
        on tensors, the library op of the same name (`max(x, axis=1)` is Relax's max): the rule eager shares.
        A symbolic size is an int to int(), and a run-time number to float() and math's functions."""
        if any(map(is_symbolic, args)) and (func is float or getattr(func, "__module__", None) == "math"):
            args = [self.size_value(a) if is_symbolic(a) else a for a in args]
            if func is float and len(args) == 1 and not kwargs:
                return self.builder.weak(self.as_tensor(args[0], "float64"))
        elif func is int and len(args) == 1 and is_symbolic(args[0]) and not kwargs:
            return args[0]
        return semantic.python_call(self.builder, func, args, kwargs)
