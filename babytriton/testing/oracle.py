"""The fuzzer's oracle: a generated @jit program rewritten into plain torch calls and run on the
same inputs. It is written here, independently of babytriton's eager reference (babytriton/eager/reference.py
and eager_ops.py share the compiler's operator rules, so they share its mistakes too).

`translate(text)` turns a program file's text into a module whose `f` is plain Python on torch:
library names become the torch calls below, `x.astype(d)`/`x.sum(axis=...)` become torch's, `x += y`
rebinds x (tensors are values in babytriton), and the places where babytriton's documented meaning is
element-wise (`and`, `or`, `not`, chained comparisons, `a if c else b` on a tensor condition) use
torch's element-wise ops. Everything else (operators, promotion, Python numbers, `if`, loops) is
Python's and torch's own.
"""
from __future__ import annotations

import ast
import types

import torch
import torch.nn.functional as F


def _dtype(d):
    return d if isinstance(d, torch.dtype) else getattr(torch, d)


def _weak(a, b):
    """a and b as tensors where torch's function needs tensors, with torch's promotion of a Python
    number against a tensor (the number takes the tensor's kind, as `a + b` would)."""
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        return a, b
    dtype = torch.result_type(a, b)
    return torch.as_tensor(a, dtype=dtype), torch.as_tensor(b, dtype=dtype)


def _dims(x, axis):
    if axis is None:
        return tuple(range(x.dim()))
    return tuple(axis) if isinstance(axis, (tuple, list)) else (axis,)


def _reduction(fn):
    """A reduction called babytriton's way: axis= (or dim=) an int, a tuple or None (all axes)."""
    def call(x, axis=None, keepdims=False, dim=None, keepdim=None):
        axis = dim if dim is not None else axis
        return fn(x, _dims(x, axis), bool(keepdim if keepdim is not None else keepdims))
    return call


def _prod(x, dims, keep):
    for d in sorted((d % max(x.dim(), 1) for d in dims), reverse=True):
        x = torch.prod(x, dim=d, keepdim=keep)
    return x if dims else torch.prod(x)


def _arg(fn):
    def call(x, axis=None, keepdims=False, dim=None, keepdim=None):
        axis = dim if dim is not None else axis
        if x.dtype == torch.bool:  # torch refuses bools; babytriton takes them as 0 and 1 (an extension)
            x = x.to(torch.int8)
        return fn(x, dim=axis, keepdim=bool(keepdim if keepdim is not None else keepdims))
    return call


def _unary(fn):
    """An element-wise function; on a Python number, a Python number (as Python's own math gives)."""
    def call(x, *args):
        if isinstance(x, (bool, int, float)):
            return fn(torch.as_tensor(x, dtype=torch.float64 if isinstance(x, float) else None), *args).item()
        return fn(x, *args)
    return call


def _gelu(x):
    """F.gelu computed in float64 and rounded once: torch's float32 kernel (which float16 and bfloat16
    use too) gives NaN at +inf and inf near 3e38 on AVX-512 CPUs, an answer the oracle must not depend on."""
    return F.gelu(x.double()).to(x.dtype) if x.is_floating_point() else F.gelu(x)


def _on_tensor(fn):
    return lambda x, *args, **kwargs: fn(torch.as_tensor(x) if isinstance(x, (bool, int, float)) else x, *args, **kwargs)


def _rms_norm(x, weight, axes=-1, epsilon=1e-5):
    axes = _dims(x, axes)
    return F.rms_norm(x, tuple(x.shape[a] for a in axes), weight, eps=epsilon)


def _layer_norm(x, gamma, beta, axes=-1, epsilon=1e-5):
    axes = _dims(x, axes)
    return F.layer_norm(x, tuple(x.shape[a] for a in axes), gamma, beta, eps=epsilon)


def _binary(fn):
    """A two-operand element-wise function; on two Python numbers, a Python number (babytriton's rule
    for element-wise library ops on numbers, as for `_unary`): computed as Python holds numbers."""
    def call(a, b):
        if isinstance(a, (bool, int, float)) and isinstance(b, (bool, int, float)):
            wide = torch.float64 if isinstance(a, float) or isinstance(b, float) else None
            return fn(torch.as_tensor(a, dtype=wide), torch.as_tensor(b, dtype=wide)).item()
        return fn(*_weak(a, b))
    return call


def _where(c, a, b):
    return torch.where(c.bool() if isinstance(c, torch.Tensor) else torch.tensor(bool(c)), a, b)


UNARY = {
    "abs": torch.abs, "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
    "sin": torch.sin, "cos": torch.cos, "tanh": torch.tanh, "sigmoid": torch.sigmoid, "erf": torch.erf,
    "floor": torch.floor, "ceil": torch.ceil, "round": torch.round, "sign": torch.sign, "negative": torch.neg,
    "square": torch.square, "trunc": torch.trunc, "isfinite": torch.isfinite, "isnan": torch.isnan,
    "relu": torch.relu, "relu6": F.relu6, "gelu": _gelu, "silu": F.silu,
    "leakyrelu": lambda x, alpha=0.01: F.leaky_relu(x, alpha),
    "clip": lambda x, lo, hi: torch.clamp(x, lo, hi),
    "isinf": torch.isinf, "asin": torch.asin, "acos": torch.acos, "atan": torch.atan, "asinh": torch.asinh,
    "sinh": torch.sinh, "cosh": torch.cosh,
}


def _topk(data, k=1, axis=-1, ret_type="both", largest=True, dtype="int32"):
    values, indices = torch.topk(data, k, dim=axis, largest=largest)
    indices = indices.to(_dtype(dtype))
    return {"both": (values, indices), "values": values, "indices": indices}[ret_type]
OPS = {
    **{name: _unary(fn) for name, fn in UNARY.items()},
    "maximum": _binary(torch.maximum), "minimum": _binary(torch.minimum),
    "add": lambda a, b: a + b, "subtract": lambda a, b: a - b, "multiply": lambda a, b: a * b,
    "power": lambda a, b: a ** b, "mod": _binary(torch.fmod), "log_add_exp": _binary(torch.logaddexp),
    "atan2": _binary(torch.atan2),
    "sort": lambda x, axis=-1, descending=False: torch.sort(x, dim=axis, descending=descending, stable=True).values,
    "argsort": lambda data, axis=-1, descending=False, dtype="int32": torch.argsort(
        data, dim=axis, descending=descending, stable=True).to(_dtype(dtype)),
    "topk": _topk,
    "where": _where, "logical_xor": lambda a, b: torch.logical_xor(*_weak(a, b)),
    "left_shift": lambda x, k: torch.bitwise_left_shift(x, k),
    "right_shift": lambda x, k: torch.bitwise_right_shift(x, k),
    "astype": lambda x, dtype: torch.as_tensor(x).to(_dtype(dtype)),
    # reductions (Relax's meaning: `max` gives values; std/variance are the population's)
    "sum": _reduction(lambda x, d, k: torch.sum(x, dim=d, keepdim=k) if d else torch.sum(x)),
    "mean": _reduction(lambda x, d, k: torch.mean(x, dim=d, keepdim=k) if d else torch.mean(x)),
    "max": _reduction(lambda x, d, k: torch.amax(x, dim=d, keepdim=k)),
    "min": _reduction(lambda x, d, k: torch.amin(x, dim=d, keepdim=k)),
    "prod": _reduction(_prod),
    "std": _reduction(lambda x, d, k: torch.std(x, dim=d, keepdim=k, correction=0)),
    "variance": _reduction(lambda x, d, k: torch.var(x, dim=d, keepdim=k, correction=0)),
    "argmax": _arg(torch.argmax), "argmin": _arg(torch.argmin),
    "cumsum": lambda x, axis=None: torch.cumsum(x.flatten() if axis is None else x, dim=0 if axis is None else axis),
    "softmax": lambda x, axis=-1: torch.softmax(x, dim=axis),
    "log_softmax": lambda x, axis=-1: torch.log_softmax(x, dim=axis),
    "layer_norm": _layer_norm, "rms_norm": _rms_norm,
    # linear algebra and shapes
    "matmul": torch.matmul,
    # shape ops take a Python number as the 0-d tensor torch.as_tensor makes of it, as babytriton does
    "permute_dims": _on_tensor(lambda x, axes=None: x.permute(*(axes if axes is not None else reversed(range(x.dim()))))),
    "flatten": _on_tensor(torch.flatten), "reshape": _on_tensor(lambda x, shape: x.reshape(shape)),
    "expand_dims": _on_tensor(lambda x, axis: x.unsqueeze(axis)), "squeeze": _on_tensor(lambda x, axis=None: x.squeeze()),
    "broadcast_to": _on_tensor(torch.broadcast_to),
    "concat": lambda tensors, axis=0: torch.cat(tuple(tensors), dim=axis),
    "stack": lambda tensors, axis=0: torch.stack(tuple(tensors), dim=axis),
    "tril": lambda x, k=0: torch.tril(x, k), "triu": lambda x, k=0: torch.triu(x, k),
    "zeros": lambda shape, dtype="float32": torch.zeros(shape, dtype=_dtype(dtype)),
    "ones": lambda shape, dtype="float32": torch.ones(shape, dtype=_dtype(dtype)),
    "zeros_like": _on_tensor(torch.zeros_like), "ones_like": _on_tensor(torch.ones_like),
    "full_like": _on_tensor(lambda x, value: torch.full_like(x, value)),
}
# methods babytriton's tensors have that torch's spell otherwise
METHODS = {"astype", "sum", "mean", "max", "min", "prod", "argmax", "argmin", "std", "variance"}


# the element-wise meanings of Python's boolean syntax on tensors
def _and(a, b):
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return torch.logical_and(*_weak(a, b))
    return a and b


def _or(a, b):
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        return torch.logical_or(*_weak(a, b))
    return a or b


def _not(a):
    return torch.logical_not(a) if isinstance(a, torch.Tensor) else not a


def _ifexp(c, a, b):
    if isinstance(c, torch.Tensor):
        return _where(c, a, b)
    return a if c else b


def _transpose(x):
    return x.permute(*reversed(range(x.dim())))


RUNTIME = {"_and": _and, "_or": _or, "_not": _not, "_ifexp": _ifexp, "_T": _transpose,
           **{f"_m_{name}": OPS[name] for name in METHODS}}


class _Rewrite(ast.NodeTransformer):
    def visit_FunctionDef(self, node):
        node.decorator_list = []
        node.args.args = [ast.arg(a.arg) for a in node.args.args]  # annotations are babytriton's
        self.generic_visit(node)
        return node

    def visit_Attribute(self, node):
        self.generic_visit(node)
        if isinstance(node.value, ast.Name) and node.value.id == "bt":  # bt.sum -> sum
            return ast.copy_location(ast.Name(node.attr, ast.Load()), node)
        if node.attr == "T":
            return ast.copy_location(ast.Call(ast.Name("_T", ast.Load()), [node.value], []), node)
        return node

    def visit_Call(self, node):
        self.generic_visit(node)
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in METHODS and \
                not (isinstance(func.value, ast.Name) and func.value.id in ("torch", "bt")):
            return ast.copy_location(ast.Call(ast.Name(f"_m_{func.attr}", ast.Load()), [func.value, *node.args],
                                              node.keywords), node)
        return node

    def visit_AugAssign(self, node):  # x += y rebinds x; torch's would update the tensor in place
        self.generic_visit(node)
        load = ast.Name(node.target.id, ast.Load())
        return ast.copy_location(ast.Assign([node.target], ast.BinOp(load, node.op, node.value)), node)

    def visit_BoolOp(self, node):
        self.generic_visit(node)
        name = "_and" if isinstance(node.op, ast.And) else "_or"
        result = node.values[0]
        for value in node.values[1:]:
            result = ast.Call(ast.Name(name, ast.Load()), [result, value], [])
        return ast.copy_location(result, node)

    def visit_UnaryOp(self, node):
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return ast.copy_location(ast.Call(ast.Name("_not", ast.Load()), [node.operand], []), node)
        return node

    def visit_Compare(self, node):
        self.generic_visit(node)
        if len(node.ops) == 1:
            return node
        operands = [node.left, *node.comparators]
        parts = [ast.Compare(operands[i], [op], [operands[i + 1]]) for i, op in enumerate(node.ops)]
        result = parts[0]
        for part in parts[1:]:
            result = ast.Call(ast.Name("_and", ast.Load()), [result, part], [])
        return ast.copy_location(result, node)

    def visit_IfExp(self, node):
        self.generic_visit(node)
        return ast.copy_location(ast.Call(ast.Name("_ifexp", ast.Load()), [node.test, node.body, node.orelse], []),
                                 node)


def translate(text: str) -> types.SimpleNamespace:
    """The program file's functions as plain torch code: a namespace with `f` (and its helpers)."""
    module = ast.parse(text)
    functions = [n for n in module.body if isinstance(n, ast.FunctionDef)]
    tree = ast.fix_missing_locations(_Rewrite().visit(ast.Module(functions, [])))
    namespace = {"torch": torch, "bt": None, "__builtins__": __builtins__, **OPS, **RUNTIME}
    exec(compile(tree, "<torch translation>", "exec"), namespace)  # noqa: S102 - our own generated program
    return types.SimpleNamespace(**{n.name: namespace[n.name] for n in functions}, source=ast.unparse(tree))
