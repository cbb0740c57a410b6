"""Eager reference mode: a @jit function's own Python, run by torch (`f.eager(*args)`).

The undecorated function is the reference implementation of what the compiler builds. It runs on the
arguments the compiled version sees (runtime scalars as 0-d int64/float64/bool tensors, constexprs as
Python values), so dtypes promote the same way, and its results come back as the compiled call's do.
Every name the compiler resolves is mapped to torch:
- library ops (`sigmoid(x)`, `R.nn.softmax`, `bt.sum`, `x.sum(axis=1)`, `x.T`) through one table,
  Relax op name -> torch function, after the compiler's own argument rules (library.bind, promotion,
  the bool and integer rules);
- TensorIR kernels are compiled alone by TVM and run on the tensors (DLPack, no copies);
- other @jit functions run eagerly too, their arguments bound as the inliner binds them.

How: where Python's meaning differs from the compiler's, the function's AST is rewritten, then
compiled again against the user's file and line numbers, so `print`, `breakpoint()` and tracebacks
show the user's code:
- `a.b` -> `_bt_attr(a, "b")`: tensor attributes as @jit code has them (`x.dtype` is a name,
  `x.shape` a tuple, the methods and `x.T` library ops), and anything reached through a module
  translated as a global would be;
- `a and b`, `a or b`, `not a`, `a if c else b`, `a < b < c`: element-wise on tensors, as compiled;
  Python's meaning (short-circuiting) on Python values.
The function runs with a fresh namespace that holds the translated names it uses: neither the module's
globals nor any torch class is changed. `backend="tir"` functions are loop code over elements, which
Python already runs as compiled: they run unchanged, writing into their tensor arguments.
`with bt.device(...)` blocks don't move data in eager mode: operations run where their operands are.
"""
from __future__ import annotations

import ast
import builtins
import contextvars
import copy
import functools
import math
import operator
import os
import threading
import weakref

import numpy as np
import torch
import torch.nn.functional as F
import tvm

from . import devices, pipeline, schedules
from .codegen import kernels, library
from .codegen.relax import PY_BUILTINS
from .errors import Diagnostic
from .types import DTYPES, SCALAR_TYPES, TORCH_TO_NAME, Tensor, dtype_name, format_shape, torch_to_vm, unwrap

# The device that values made from nothing (constants, zeros(...)) go to during an eager call.
_DEVICE: contextvars.ContextVar[torch.device] = contextvars.ContextVar("babytriton_eager_device",
                                                                       default=torch.device("cpu"))
PY_SCALARS = (bool, int, float)


def interpret_requested() -> bool:
    """`BABYTRITON_INTERPRET=1`: every call of a @jit function decorated from now on runs eagerly.
    Read once at decoration, so that the compiled call path never looks at the environment."""
    return os.environ.get("BABYTRITON_INTERPRET", "").strip().lower() not in ("", "0", "false", "no", "off")


def _is_tensor(value) -> bool:
    return isinstance(value, torch.Tensor)


def _is_scalar(value) -> bool:
    return isinstance(value, PY_SCALARS)


def _describe(value) -> str:
    if _is_tensor(value):
        return f"a {TORCH_TO_NAME.get(value.dtype, value.dtype)} tensor of shape {format_shape(tuple(value.shape))}"
    return f"{type(value).__name__} {value!r}"


# ----------------------------------------------------------------------------------------------
# calling a @jit function eagerly
# ----------------------------------------------------------------------------------------------
def run(jitfn, args: tuple, kwargs: dict):
    """`jitfn.eager(*args, **kwargs)`: the arguments checked as a compiled call checks them, the
    function run by torch, the results shaped as the compiled call returns them."""
    if kwargs or len(args) != len(jitfn.params):
        args = jitfn._bind(args, kwargs)
    specs = jitfn._specs(args)                     # the compiled call's argument checks
    target_kind = pipeline.device_kind(jitfn.target())
    if not jitfn.heterogeneous:
        from .jit import check_devices
        check_devices(jitfn.params, args, target_kind, jitfn.__name__)
    if jitfn.options["backend"] == "tir":
        return _run_tir(jitfn, args, specs)
    tensors = [unwrap(a) for a, s in zip(args, specs) if s.kind == "tensor"]
    all_numpy = bool(tensors) and all(isinstance(t, np.ndarray) for t in tensors)
    device = next((t.device for t in tensors if _is_tensor(t)), torch.device(target_kind))
    values = []
    for value, spec in zip(args, specs):
        if spec.kind == "tensor":
            data = unwrap(value)
            values.append(torch.from_numpy(data) if isinstance(data, np.ndarray) else data)
        elif spec.kind == "scalar":  # what the compiled call passes: a 0-d tensor
            values.append(torch.tensor(value, dtype=DTYPES[spec.dtype], device=device))
        else:
            values.append(value)
    token = _DEVICE.set(device)
    try:
        result = function(jitfn)(*values)
    finally:
        _DEVICE.reset(token)
    return _results(result, all_numpy, jitfn.__name__, device)


def _results(value, all_numpy: bool, fname: str, device):
    """The returned value as the compiled call gives it: Python numbers as 0-d tensors of the
    compiler's constant dtypes, sequences as tuples, numpy out for numpy in."""
    if value is None:
        return None
    if isinstance(value, (tuple, list)):
        return tuple(_results(v, all_numpy, fname, device) for v in value) if value else None
    if _is_scalar(value):
        dtype = torch.bool if isinstance(value, bool) else torch.int64 if isinstance(value, int) else torch.float32
        value = torch.tensor(value, dtype=dtype, device=device)
    if not _is_tensor(value):
        raise TypeError(f"{fname}() returned {_describe(value)}; @jit functions return tensors, numbers "
                        "and tuples of them")
    return value.numpy(force=True) if all_numpy else value


def _run_tir(jitfn, args: tuple, specs):
    """A backend="tir" function: loop code that Python runs as compiled, element by element; it
    writes into its tensor arguments and returns the ones it writes."""
    values = []
    for value, spec in zip(args, specs):
        if spec.kind == "tensor":
            data = unwrap(value)
            values.append(torch.from_numpy(data) if isinstance(data, np.ndarray) else data)
        elif spec.kind == "scalar":
            values.append({"bool": bool, "int64": int, "float64": float}[spec.dtype](value))
        else:
            values.append(value)
    jitfn.fn(*values)
    written = written_parameters(jitfn.parsed.tree)
    outputs = tuple(args[i] for i, p in enumerate(jitfn.params) if p.name in written)
    if not outputs:
        return None
    return outputs[0] if len(outputs) == 1 else outputs


def written_parameters(tree: ast.FunctionDef) -> set[str]:
    """The names whose elements a function assigns (`out[i] = ...`, `out[i] += ...`)."""
    names = set()
    for node in ast.walk(tree):
        targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
            if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
        for target in targets:
            for sub in ast.walk(target):
                if isinstance(sub, ast.Subscript) and isinstance(sub.value, ast.Name):
                    names.add(sub.value.id)
    return names


def call_nested(callee, *args, **kwargs):
    """A @jit function called from eager code: its parameters bound as the inliner binds them
    (numbers become the 0-d tensors a direct call passes), its value returned as it is."""
    try:
        bound = callee.signature.bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{callee.__name__}({', '.join(p.name for p in callee.params)}): {e}") from None
    bound.apply_defaults()
    values = []
    for param in callee.params:
        value = bound.arguments[param.name]
        if param.kind in ("auto", "scalar") and _is_scalar(value):
            dtype = SCALAR_TYPES[param.annotation if param.kind == "scalar" else type(value)]
            value = torch.tensor(value, dtype=DTYPES[dtype], device=_DEVICE.get())
        elif param.kind == "scalar" and _is_tensor(value) and value.dim() == 0:
            value = value.to(DTYPES[SCALAR_TYPES[param.annotation]])
        values.append(value)
    if callee.options["backend"] == "tir":
        callee.fn(*values)
        return None
    return function(callee)(*values)


# ----------------------------------------------------------------------------------------------
# the rewritten function
# ----------------------------------------------------------------------------------------------
_COMPILED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_COMPILED_LOCK = threading.Lock()
MAKER = "_bt_make"


def function(jitfn):
    """The user's function, rewritten and re-created in a namespace of translated names."""
    with _COMPILED_LOCK:
        compiled = _COMPILED.get(jitfn)
        if compiled is None:
            compiled = _COMPILED[jitfn] = _compile(jitfn.parsed)
    code, names = compiled
    fn = jitfn.fn
    namespace = {"__builtins__": builtins, **HELPERS}
    for name in names:
        if name in fn.__globals__:
            namespace[name] = translate(fn.__globals__[name])
        elif name in BUILTINS:
            namespace[name] = BUILTINS[name]
        elif library.lookup(name) is not None:  # as compiled: `sum` is the library's, not Python's
            namespace[name] = op_function(library.lookup(name))
    exec(code, namespace)  # defines the maker: no user code runs here
    cells = [translate(c.cell_contents) for c in fn.__closure__ or ()]
    made = namespace[MAKER](*cells)
    made.__defaults__, made.__kwdefaults__ = fn.__defaults__, fn.__kwdefaults__
    return made


def _compile(parsed):
    """The function's AST, rewritten, wrapped in a maker taking its closure's cells, compiled with
    the user's file name and line numbers."""
    tree = _Rewrite().visit(copy.deepcopy(parsed.tree))
    tree.decorator_list = []
    tree.returns = None
    args = tree.args
    for arg in args.posonlyargs + args.args + args.kwonlyargs:
        arg.annotation = None
    args.defaults, args.kw_defaults = [], [None] * len(args.kwonlyargs)  # set from the function itself
    freevars = parsed.fn.__code__.co_freevars
    maker = ast.FunctionDef(name=MAKER, args=ast.arguments(posonlyargs=[], args=[ast.arg(v) for v in freevars],
                                                           kwonlyargs=[], kw_defaults=[], defaults=[]),
                            body=[tree, ast.Return(ast.Name(tree.name, ast.Load()))], decorator_list=[])
    module = ast.Module([maker], [])
    ast.copy_location(maker, tree)
    ast.fix_missing_locations(module)
    source_map = parsed.source_map
    ast.increment_lineno(module, source_map.first_line - 1)
    if source_map.indent:
        for node in ast.walk(tree):
            if hasattr(node, "col_offset"):
                node.col_offset += source_map.indent
                if getattr(node, "end_col_offset", None) is not None:
                    node.end_col_offset += source_map.indent
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    return compile(module, source_map.filename, "exec"), names


def _thunk(node: ast.expr) -> ast.Lambda:
    arguments = ast.arguments(posonlyargs=[], args=[], kwonlyargs=[], kw_defaults=[], defaults=[])
    return ast.copy_location(ast.Lambda(arguments, node), node)


def _helper_call(name: str, node: ast.AST, args: list) -> ast.Call:
    return ast.copy_location(ast.Call(ast.Name(name, ast.Load()), args, []), node)


class _Rewrite(ast.NodeTransformer):
    """Where the compiler's meaning differs from Python's, call a helper that has the compiler's."""

    def visit_AugAssign(self, node: ast.AugAssign):
        # `x += y` is `x = x + y`, as compiled: torch's `+=` would update x's memory in place
        # (and with it any tensor x is a view of, such as an argument).
        self.generic_visit(node)
        if not isinstance(node.target, ast.Name):
            return node
        load = ast.copy_location(ast.Name(node.target.id, ast.Load()), node.target)
        return ast.copy_location(ast.Assign([node.target], ast.copy_location(ast.BinOp(load, node.op, node.value),
                                                                              node)), node)

    def visit_Attribute(self, node: ast.Attribute):
        self.generic_visit(node)
        if not isinstance(node.ctx, ast.Load):
            return node
        return _helper_call("_bt_attr", node, [node.value, ast.Constant(node.attr)])

    def visit_BoolOp(self, node: ast.BoolOp):
        self.generic_visit(node)
        kind = ast.Constant("and" if isinstance(node.op, ast.And) else "or")
        return _helper_call("_bt_boolop", node, [kind, node.values[0], *map(_thunk, node.values[1:])])

    def visit_UnaryOp(self, node: ast.UnaryOp):
        self.generic_visit(node)
        if isinstance(node.op, ast.Not):
            return _helper_call("_bt_not", node, [node.operand])
        return node

    def visit_IfExp(self, node: ast.IfExp):
        self.generic_visit(node)
        return _helper_call("_bt_ifexp", node, [node.test, _thunk(node.body), _thunk(node.orelse)])

    def visit_Compare(self, node: ast.Compare):
        self.generic_visit(node)
        if len(node.ops) == 1:
            return node
        pairs = [ast.Tuple([ast.Constant(type(op).__name__), _thunk(c)], ast.Load())
                 for op, c in zip(node.ops, node.comparators)]
        return _helper_call("_bt_compare", node, [node.left, *pairs])


# ----------------------------------------------------------------------------------------------
# the helpers the rewritten code calls
# ----------------------------------------------------------------------------------------------
def _attr(value, name: str):
    if _is_tensor(value):
        return tensor_attribute(value, name)
    return translate(getattr(value, name))


def tensor_attribute(tensor: torch.Tensor, name: str):
    """A tensor's attribute as @jit code has it."""
    if name == "shape":
        return tuple(tensor.shape)
    if name == "dtype":
        return TORCH_TO_NAME[tensor.dtype]
    if name == "ndim":
        return tensor.dim()
    if name in library.PROPERTIES:
        return call_op(library.table()[library.PROPERTIES[name]], [tensor], {})
    if name in library.METHODS:
        op_name, varargs = library.METHODS[name]
        op = library.table()[op_name]

        def method(*args, **kwargs):
            if varargs and len(args) > 1 and all(_is_size(a) for a in args) and varargs not in kwargs:
                args = [tuple(args)]  # x.reshape(2, 3) == x.reshape((2, 3))
            return call_op(op, [tensor, *args], kwargs)
        method.__name__ = name
        return method
    available = ["shape", "dtype", "ndim", *library.tensor_attributes()]
    hint = f"; call the operator instead: {name}(x)" if name in library.names() else \
        library.did_you_mean(name, available)
    raise AttributeError(f"tensors have no attribute '{name}' in @jit code{hint} (available: {', '.join(available)})")


def _is_size(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _logical(kind: str, lhs, rhs):
    if not (_is_tensor(lhs) or _is_tensor(rhs)):
        return (lhs and rhs) if kind == "and" else (lhs or rhs)
    for v in (lhs, rhs):
        if _is_tensor(v) and v.dtype != torch.bool or not _is_tensor(v) and not isinstance(v, bool):
            raise TypeError(f"`{kind}` needs bool tensors, got {_describe(v)}; compare first, e.g. "
                            "`(x > 0) and (y > 0)`")
    lhs, rhs = (v if _is_tensor(v) else torch.tensor(v, device=_DEVICE.get()) for v in (lhs, rhs))
    return (torch.logical_and if kind == "and" else torch.logical_or)(lhs, rhs)


def _boolop(kind: str, first, *rest):
    """`a and b and ...`: Python values short-circuit as in Python; tensors combine element-wise."""
    result = first
    for thunk in rest:
        if not _is_tensor(result):
            if kind == "and" and not result or kind == "or" and result:
                return result
            result = thunk()
            continue
        result = _logical(kind, result, thunk())
    return result


def _not(value):
    if not _is_tensor(value):
        return not value
    if value.dtype != torch.bool:
        raise TypeError(f"`not` needs a bool tensor, got {_describe(value)}; compare it first, e.g. `x == 0`")
    return torch.logical_not(value)


def _promote(a, b) -> torch.dtype:
    return torch.result_type(a, b)


def _as_tensor(value, dtype: torch.dtype) -> torch.Tensor:
    if _is_tensor(value):
        return value.to(dtype)
    return torch.tensor(value, dtype=dtype, device=_DEVICE.get())


def _ifexp(cond, body, orelse):
    """`a if c else b`: on a tensor condition, element-wise (both sides computed), as compiled."""
    if not _is_tensor(cond):
        return body() if cond else orelse()
    if cond.dtype != torch.bool:
        raise TypeError(f"the condition must be a bool tensor, got {_describe(cond)}")
    a, b = body(), orelse()
    for v in (a, b):
        if not (_is_tensor(v) or _is_scalar(v)):
            raise TypeError(f"expected a tensor or a number, got {_describe(v)}")
    dtype = _promote(a, b)
    return torch.where(cond, _as_tensor(a, dtype), _as_tensor(b, dtype))


_COMPARE = {"Lt": operator.lt, "LtE": operator.le, "Gt": operator.gt, "GtE": operator.ge,
            "Eq": operator.eq, "NotEq": operator.ne, "Is": operator.is_, "IsNot": operator.is_not,
            "In": lambda a, b: a in b, "NotIn": lambda a, b: a not in b}


def _compare(left, *pairs):
    """`a < b < c` means `(a < b) and (b < c)`, each comparison element-wise on tensors."""
    result = None
    for op, thunk in pairs:
        right = thunk()
        part = _COMPARE[op](left, right)
        result = part if result is None else _logical("and", result, part)
        left = right
    return result


HELPERS = {"_bt_attr": _attr, "_bt_boolop": _boolop, "_bt_not": _not, "_bt_ifexp": _ifexp,
           "_bt_compare": _compare}


# ----------------------------------------------------------------------------------------------
# names: what each value the function reaches means in eager mode
# ----------------------------------------------------------------------------------------------
class _EagerDevice:
    """`with bt.device(...)` in eager mode: no data moves; operations run where their operands are."""

    def __init__(self, name):
        self.kind = devices._normalise(name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def translate(value):
    """A value the function reaches (a global, a closure cell, a module attribute), as eager code
    uses it: library ops as torch functions, kernels and @jit functions as runnable callables."""
    if isinstance(value, (torch.Tensor, np.ndarray, *PY_SCALARS, str, tuple, type(None))):
        return value
    op = library.resolve(value)
    if op is not None:
        return op_function(op)
    from .jit import JITFunction
    if isinstance(value, JITFunction):
        return functools.partial(call_nested, value)
    if kernels.is_kernel(value):
        return functools.partial(run_kernel, value, getattr(value, "__name__", "kernel"))
    if value is devices.device:
        return _EagerDevice
    python = _PYTHON_FUNCTIONS.get(id(value))
    if python is not None:
        return python
    return value


@functools.lru_cache(maxsize=None)
def op_function(op: library.Op):
    def call(*args, **kwargs):
        return call_op(op, list(args), kwargs)
    call.__name__ = call.__qualname__ = op.name
    call.__doc__ = f"The library op {op.display}, run by torch (babytriton's eager mode)."
    return call


def _python_or_op(func):
    """A builtin or math function as @jit code has it: Python's on numbers; on tensors, the library
    op of the same name (`max(x, axis=1)`, `abs(x)`)."""
    name = func.__name__

    def call(*args, **kwargs):
        if all(_is_scalar(a) for a in args) and all(_is_scalar(v) for v in kwargs.values()):
            return func(*args, **kwargs)
        if func in (builtins.max, builtins.min) and len(args) > 1 and _is_tensor(args[1]):
            wide = "maximum" if func is builtins.max else "minimum"
            raise TypeError(f"{name}(a, b) of tensors: use {wide}(a, b) for the element-wise {wide}; "
                            f"{name}(x, axis=...) reduces along axes")
        op = library.lookup(name)
        if op is not None and any(_is_tensor(a) for a in [*args, *kwargs.values()]):
            return call_op(op, list(args), kwargs)
        raise TypeError(f"{name}() works on compile-time numbers only, got {', '.join(_describe(a) for a in args)}")
    call.__name__ = name
    return call


BUILTINS = {name: _python_or_op(fn) for name, fn in PY_BUILTINS.items()}
_PYTHON_FUNCTIONS = {id(fn): BUILTINS[name] for name, fn in PY_BUILTINS.items()}
_PYTHON_FUNCTIONS.update({id(fn): _python_or_op(fn) for name, fn in vars(math).items()
                          if callable(fn) and not name.startswith("_")})


# ----------------------------------------------------------------------------------------------
# library ops: the compiler's argument rules, then torch
# ----------------------------------------------------------------------------------------------
def call_op(op: library.Op, args: list, kwargs: dict):
    """`op(*args, **kwargs)` with the compiler's rules (library.call), computed by torch."""
    try:
        arguments = library.bind(op, args, kwargs)
    except Diagnostic as e:
        raise TypeError(str(e)) from None
    if op.name in SAME_AS_OPERATOR and set(arguments) == {"x1", "x2"}:
        return SAME_AS_OPERATOR[op.name](arguments["x1"], arguments["x2"])
    for name, param in op.signature.parameters.items():  # the Relax op's own defaults
        if name not in arguments and param.default is not param.empty:
            arguments[name] = param.default
    values = {name: _convert(op, name, value, arguments) for name, value in arguments.items()}
    promoted = [n for n in op.promoted if n in values]
    if promoted:
        dtype = DTYPES[library.common_dtype([values[n] for n in promoted])]
        for n in promoted:
            values[n] = _as_tensor(values[n], dtype)
    else:
        dtype = DTYPES[library.common_dtype([v for n, v in values.items() if op.kinds[n] in library.TENSOR_KINDS])]
        for name, value in values.items():
            if op.kinds[name] in library.TENSOR_KINDS and _is_scalar(value):
                values[name] = torch.tensor(value, dtype=dtype, device=_DEVICE.get())
    as_int8 = _widen_bools_and_ints(op, values)
    fn = TORCH.get(op.name)
    if fn is None:
        raise NotImplementedError(f"{op.name}() has no torch equivalent in babytriton's eager mode yet; "
                                  "run the compiled function instead")
    result = fn(**values)
    if as_int8 and _is_tensor(result) and result.dtype == torch.int8:
        result = result.bool()
    return result


def _widen_bools_and_ints(op: library.Op, values: dict) -> bool:
    """library._widen_bools_and_ints on torch tensors: the same refusals and conversions."""
    operands = [n for n in values if op.kinds[n] in library.TENSOR_KINDS and _is_tensor(values[n])]
    floating = [values[n].dtype.is_floating_point for n in operands]
    if op.name in library.INT64_ACCUMULATE and values.get("dtype") is None:
        for n in operands:
            if not values[n].dtype.is_floating_point and values[n].dtype != torch.int64:
                values[n] = values[n].to(torch.int64)
        return False
    described = ", ".join(_describe(values[n]) for n in operands)
    if op.name in library.FLOAT_ONLY and not all(floating):
        raise TypeError(f"{op.name}() needs float tensors, got {described}; convert with .astype()")
    if op.name in library.LOGICAL:
        for n in operands:
            values[n] = values[n].bool()
        return False
    if op.name in library.BITWISE and any(floating):
        raise TypeError(f"{op.name}() needs integer or bool tensors, got {described}")
    bools = [n for n in operands if values[n].dtype == torch.bool]
    if not bools:
        return False
    if op.name in library.BOOL_REFUSED:
        raise TypeError(f"{op.name}() on bool tensors is not supported; convert with .astype() first")
    if op.name not in library.BOOL_AS_INT8:
        return False
    for n in bools:
        values[n] = values[n].to(torch.int8)
    return True


def _convert(op: library.Op, name: str, value, arguments: dict):
    kind = op.kinds[name]
    where = f"{op.name}(): argument '{name}'"
    if kind in ("tensor", "optional tensor"):
        if value is None and kind == "optional tensor" or _is_tensor(value) or _is_scalar(value):
            return value
        raise TypeError(f"{where}: expected a tensor or a number, got {_describe(value)}")
    if kind == "tensors":
        if isinstance(value, (tuple, list)) and value and all(_is_tensor(v) for v in value):
            return list(value)
        raise TypeError(f"{where} takes a tuple of tensors, got {_describe(value)}")
    if kind == "shape":
        sizes = (value,) if _is_size(value) else value
        if isinstance(sizes, (tuple, list)) and all(_is_size(s) for s in sizes):
            return tuple(sizes)
        raise TypeError(f"{where} takes a shape (a tuple of sizes), got {_describe(value)}")
    if kind == "dtype":
        if value is None and op.signature.parameters[name].default is None:
            return None
        try:
            return DTYPES[dtype_name(value)]
        except ValueError:
            raise TypeError(f"{where} takes a dtype such as 'float32' or torch.float16, got {value!r}") from None
    if kind == "scalar":
        tensor = next((v for v in arguments.values() if _is_tensor(v)), None)
        if not _is_scalar(value):
            raise TypeError(f"{where} takes a compile-time number, got {_describe(value)}")
        if tensor is not None and not tensor.dtype.is_floating_point:
            if isinstance(value, float) and not value.is_integer():
                raise TypeError(f"{where} is {value!r}, which an {TORCH_TO_NAME[tensor.dtype]} tensor cannot hold")
            return int(value)
        return value
    if _is_tensor(value):
        raise TypeError(f"{where} must be a compile-time value, got {_describe(value)}")
    return _to_tuples(value)


def _to_tuples(value):
    return tuple(_to_tuples(v) for v in value) if isinstance(value, (tuple, list)) else value


def _matmul(a, b):
    """`a @ b` as compiled: one dtype; float16/bfloat16 products accumulate in float32."""
    if not (_is_tensor(a) and _is_tensor(b)):
        raise TypeError("`@` needs two tensors")
    if a.dtype != b.dtype:
        raise TypeError(f"`@` needs operands of one dtype, got {TORCH_TO_NAME[a.dtype]} and "
                        f"{TORCH_TO_NAME[b.dtype]}; convert one with .astype()")
    if a.dtype in (torch.float16, torch.bfloat16):
        return torch.matmul(a.float(), b.float()).to(a.dtype)
    return torch.matmul(a, b)


SAME_AS_OPERATOR = {"matmul": _matmul, "power": operator.pow}


# -- the table: Relax op name -> torch, called with the op's (converted) arguments by Relax name --
def _t(fn, *positional, **renamed):
    """torch's `fn` called with the op's `positional` parameters in order and the rest renamed
    (Relax name -> torch name; a name mapped to None is dropped)."""
    def call(**kw):
        args = [kw.pop(p) for p in positional]
        options = {renamed.get(k, k): v for k, v in kw.items() if renamed.get(k, k) is not None}
        return fn(*args, **options)
    return call


def _reduce(fn):
    """Relax reductions: `axis` an int, a tuple or None (all axes)."""
    def call(x, axis=None, keepdims=False):
        return fn(x, dim=axis, keepdim=keepdims)
    return call


def _prod(x, dim, keepdim):
    axes = range(x.dim()) if dim is None else (dim,) if isinstance(dim, int) else dim
    for axis in sorted((a % max(x.dim(), 1) for a in axes), reverse=True):
        x = torch.prod(x, dim=axis, keepdim=True)
    if not keepdim:
        x = x.reshape([n for i, n in enumerate(x.shape) if i not in {a % max(x.dim(), 1) for a in axes}]) \
            if x.dim() else x
    return x


def _extreme(fn):
    def call(x, dim, keepdim):
        return fn(x, dim=() if dim is None else dim, keepdim=keepdim)
    return call


def _arg(fn):
    def call(x, dim, keepdim):
        if dim is None and keepdim:
            return fn(x.reshape(-1), dim=0).reshape([1] * x.dim())
        return fn(x, dim=dim, keepdim=keepdim)
    return call


def _divide(x1, x2):
    """Relax's divide: true division on floats, truncating on integers."""
    if x1.dtype.is_floating_point:
        return torch.div(x1, x2)
    return torch.div(x1, x2, rounding_mode="trunc")


def _cumulative(fn):
    def call(data, axis=None, dtype=None, exclusive=False):
        if axis is None:
            data, axis = data.reshape(-1), 0
        out = fn(data, dim=axis, dtype=dtype)
        if exclusive:  # each position leaves its own element out
            out = out - data.to(out.dtype) if fn is torch.cumsum else out / data.to(out.dtype)
        return out
    return call


def _permute(x, axes=None):
    return x.permute(tuple(axes) if axes is not None else tuple(reversed(range(x.dim()))))


def _expand_dims(x, axis):
    axes = (axis,) if isinstance(axis, int) else axis
    rank = x.dim() + len(axes)
    for position in sorted(a % rank for a in axes):
        x = x.unsqueeze(position)
    return x


def _squeeze(x, axis=None):
    return torch.squeeze(x) if axis is None else torch.squeeze(x, dim=axis)


def _full(shape, fill_value, dtype=None):
    return torch.full(shape, fill_value.item(), dtype=dtype or fill_value.dtype, device=_DEVICE.get())


def _full_like(x, fill_value, dtype=None):
    return torch.full_like(x, fill_value.item(), dtype=dtype or x.dtype)


def _filled(fn):
    def call(shape, dtype):
        return fn(shape, dtype=dtype, device=_DEVICE.get())
    return call


def _norm_shape(x, axes):
    axes = (axes,) if isinstance(axes, int) else tuple(axes)
    return tuple(sorted(a % x.dim() for a in axes))


def _spread(weight, x, axes):
    """A weight laid along `axes` of x (its shape is theirs), broadcastable against x."""
    shape = [1] * x.dim()
    for axis, size in zip(axes, weight.shape):
        shape[axis] = size
    return weight.reshape(shape)


def _layer_norm(data, gamma, beta, axes, epsilon=1e-05, center=True, scale=True):
    axes = _norm_shape(data, axes)
    mean = data.mean(dim=axes, keepdim=True)
    var = ((data - mean) ** 2).mean(dim=axes, keepdim=True)
    out = (data - mean) / torch.sqrt(var + epsilon)
    if scale:
        out = out * _spread(gamma, data, axes)
    if center:
        out = out + _spread(beta, data, axes)
    return out


def _rms_norm(data, weight, axes=-1, epsilon=1e-05):
    axes = _norm_shape(data, axes)
    return data / torch.sqrt((data * data).mean(dim=axes, keepdim=True) + epsilon) * _spread(weight, data, axes)


def _matmul_op(x1, x2, out_dtype=None):
    if out_dtype is not None:
        return torch.matmul(x1.to(out_dtype), x2.to(out_dtype))
    return torch.matmul(x1, x2)


def _linear(data, weight, bias=None, out_dtype=None):
    out = F.linear(data, weight, bias)
    return out if out_dtype is None else out.to(out_dtype)


def _take(x, indices, axis=None, mode="fast"):
    if axis is None:
        return torch.take(x, indices.long())
    axis %= x.dim()
    out = x.movedim(axis, 0)[indices.long()]
    return out.movedim(tuple(range(indices.dim())), tuple(range(axis, axis + indices.dim())))


def _topk(data, k=1, axis=-1, ret_type="both", largest=True, dtype=torch.int32):
    values, indices = torch.topk(data, k, dim=axis, largest=largest)
    indices = indices.to(dtype)
    return {"both": (values, indices), "values": values, "indices": indices}[ret_type]


def _eye(n, m=None, k=0, dtype=torch.float32):
    return torch.ones(n, n if m is None else m, dtype=dtype, device=_DEVICE.get()).tril(k).triu(k)


_UNARY = {
    "abs": torch.abs, "acos": torch.acos, "acosh": torch.acosh, "asin": torch.asin, "asinh": torch.asinh,
    "atan": torch.atan, "atanh": torch.atanh, "ceil": torch.ceil, "cos": torch.cos, "cosh": torch.cosh,
    "erf": torch.erf, "exp": torch.exp, "floor": torch.floor, "isfinite": torch.isfinite, "isinf": torch.isinf,
    "isnan": torch.isnan, "log": torch.log, "negative": torch.neg, "round": torch.round, "rsqrt": torch.rsqrt,
    "sigmoid": torch.sigmoid, "sign": torch.sign, "sin": torch.sin, "sinh": torch.sinh, "sqrt": torch.sqrt,
    "square": torch.square, "tan": torch.tan, "tanh": torch.tanh, "trunc": torch.trunc,
    "logical_not": torch.logical_not, "bitwise_not": torch.bitwise_not,
    "relu": torch.relu, "relu6": F.relu6, "silu": F.silu, "selu": F.selu, "gelu": F.gelu,
    "gelu_tanh": functools.partial(F.gelu, approximate="tanh"), "flatten": torch.flatten,
    "batch_flatten": functools.partial(torch.flatten, start_dim=1),
}
_BINARY = {
    "add": torch.add, "subtract": torch.sub, "multiply": torch.mul, "divide": _divide,
    "floor_divide": torch.floor_divide, "floor_mod": torch.remainder, "mod": torch.fmod, "power": torch.pow,
    "maximum": torch.maximum, "minimum": torch.minimum, "equal": torch.eq, "not_equal": torch.ne,
    "less": torch.lt, "less_equal": torch.le, "greater": torch.gt, "greater_equal": torch.ge,
    "logical_and": torch.logical_and, "logical_or": torch.logical_or, "logical_xor": torch.logical_xor,
    "bitwise_and": torch.bitwise_and, "bitwise_or": torch.bitwise_or, "bitwise_xor": torch.bitwise_xor,
    "left_shift": torch.bitwise_left_shift, "right_shift": torch.bitwise_right_shift, "atan2": torch.atan2,
    "log_add_exp": torch.logaddexp, "outer": torch.outer,
}
_REDUCTIONS = {
    "sum": torch.sum, "mean": torch.mean, "max": _extreme(torch.amax), "min": _extreme(torch.amin), "prod": _prod,
    "argmax": _arg(torch.argmax), "argmin": _arg(torch.argmin),
    "std": functools.partial(torch.std, correction=0), "variance": functools.partial(torch.var, correction=0),
}
TORCH = {
    **{name: _t(fn, "x") if "x" in library.table()[name].kinds else _t(fn, "data") for name, fn in _UNARY.items()},
    **{name: _t(fn, "x1", "x2") for name, fn in _BINARY.items()},
    **{name: _reduce(fn) for name, fn in _REDUCTIONS.items()},
    "where": lambda condition, x1, x2: torch.where(condition.bool(), x1, x2),
    "clip": _t(torch.clamp, "x", "min", "max"),
    "cumsum": _cumulative(torch.cumsum), "cumprod": _cumulative(torch.cumprod),
    "softmax": _t(torch.softmax, "data", axis="dim"), "log_softmax": _t(torch.log_softmax, "data", axis="dim"),
    "leakyrelu": _t(F.leaky_relu, "data", "alpha"), "softplus": _t(F.softplus, "data", "beta", "threshold"),
    "layer_norm": _layer_norm, "rms_norm": _rms_norm, "matmul": _matmul_op, "linear": _linear,
    "reshape": _t(torch.reshape, "x", "shape"), "permute_dims": _permute,
    "concat": _t(torch.cat, "tensors", axis="dim"), "stack": _t(torch.stack, "tensors", axis="dim"),
    "squeeze": _squeeze, "expand_dims": _expand_dims, "broadcast_to": _t(torch.broadcast_to, "x", "shape"),
    "astype": lambda x, dtype: x.to(dtype),
    "tril": _t(torch.tril, "x", k="diagonal"), "triu": _t(torch.triu, "x", k="diagonal"),
    "zeros": _filled(torch.zeros), "ones": _filled(torch.ones), "full": _full,
    "zeros_like": _t(torch.zeros_like, "x"), "ones_like": _t(torch.ones_like, "x"), "full_like": _full_like,
    "eye": _eye, "eye_like": lambda x, k=0, dtype=None: _eye(x.shape[0], x.shape[1], k, dtype or x.dtype),
    "arange": lambda start, end=None, step=1, dtype=None: (
        torch.arange(start, dtype=dtype, device=_DEVICE.get()) if end is None
        else torch.arange(start, end, step, dtype=dtype, device=_DEVICE.get())),
    "tile": lambda data, repeats: torch.tile(data, (repeats,) if isinstance(repeats, int) else repeats),
    "repeat": _t(torch.repeat_interleave, "data", "repeats", axis="dim"),
    "take": _take, "gather_elements": lambda data, indices, axis=0: torch.gather(data, axis, indices.long()),
    "masked_fill": lambda x, mask, value: torch.where(mask, value, x),
    "sort": lambda x, axis=-1, descending=False: torch.sort(x, dim=axis, descending=descending, stable=True).values,
    "argsort": lambda data, axis=-1, descending=False, dtype=torch.int32: torch.argsort(
        data, dim=axis, descending=descending, stable=True).to(dtype),
    "topk": _topk,
    "split": lambda x, indices_or_sections, axis=0: torch.tensor_split(x, indices_or_sections, dim=axis),
    "collapse_sum_like": lambda data, collapse_target: data.sum_to_size(collapse_target.shape),
    "collapse_sum_to": lambda data, shape: data.sum_to_size(shape),
}


# ----------------------------------------------------------------------------------------------
# TensorIR kernels, compiled alone and run on the tensors
# ----------------------------------------------------------------------------------------------
_KERNELS: dict = {}
_KERNELS_LOCK = threading.Lock()


def run_kernel(kernel, name: str, *args, **kwargs):
    """`kernel(*inputs[, placeholders])` in eager code: the buffers checked as the compiled call
    checks them, the outputs allocated, the kernel built for the inputs' device and run."""
    try:
        return _run_kernel(kernel, name, list(args), kwargs)
    except Diagnostic as e:
        raise TypeError(str(e)) from None


def _run_kernel(kernel, name: str, args: list, kwargs: dict):
    if kwargs:
        raise Diagnostic(f"kernel `{name}` takes its buffers positionally, not as keywords")
    params = list(kernel.params)
    for param in params:
        if not tvm.tirx.is_buffer_var(param):
            raise Diagnostic(f"kernel `{name}` has the scalar parameter '{param.name}'; only buffer parameters "
                             "can be passed from @jit code")
    if len(args) > len(params):
        raise Diagnostic(f"kernel `{name}` has {len(params)} buffers ({', '.join(p.name for p in params)}), "
                         f"got {len(args)} arguments")
    written = kernels.written_buffers(kernel)
    n_inputs = len(args) - kernels._placeholder_count(written, params, args)
    if n_inputs == len(params):
        raise Diagnostic(f"kernel `{name}` has {len(params)} buffers and all {len(args)} are given as inputs; "
                         "leave out its output buffers (or pass a placeholder for an output it writes)")
    sizes: dict = {}
    inputs = args[:n_inputs]
    for index, (param, value) in enumerate(zip(params, inputs)):
        if not _is_tensor(value):
            raise Diagnostic(f"argument {index + 1} of kernel `{name}` (buffer '{param.name}') must be a tensor, "
                             f"got {_describe(value)}")
        kernels._match(name, param, tuple(value.shape), TORCH_TO_NAME[value.dtype], sizes, f"argument {index + 1}")
    device = inputs[0].device if inputs else _DEVICE.get()
    outputs = []
    for param, value in zip(params[n_inputs:], [*args[n_inputs:], *[None] * len(params)]):
        if param.name not in written:
            raise Diagnostic(f"kernel `{name}`'s buffer '{param.name}' would be an output, but the kernel never "
                             "writes it; pass it as an input")
        if _is_tensor(value):
            kernels._match(name, param, tuple(value.shape), TORCH_TO_NAME[value.dtype], sizes, "the placeholder")
        elif isinstance(value, Tensor):  # bt.Tensor((n, 4), "float32"): its static sizes bind the kernel's
            for want, got in zip(param.ty.shape, value.shape):
                if isinstance(want, tvm.tirx.Var) and isinstance(got, int):
                    sizes.setdefault(want.name, got)
        elif value is not None:
            raise Diagnostic(f"the placeholder for kernel `{name}`'s output '{param.name}' must be a tensor or a "
                             f"bt.Tensor(shape, dtype), got {_describe(value)}")
        shape = kernels._output_shape(name, param, sizes)
        outputs.append(torch.empty(shape, dtype=DTYPES[str(param.ty.dtype)], device=device))
    built = _built_kernel(kernel, name, sizes, device)
    built(*[torch_to_vm(t.contiguous()) for t in inputs], *[torch_to_vm(t) for t in outputs])
    return outputs[0] if len(outputs) == 1 else tuple(outputs)


def _built_kernel(kernel, name: str, sizes: dict, device: torch.device):
    key = (kernel, tuple(sorted(sizes.items())), device.type)
    with _KERNELS_LOCK:
        built = _KERNELS.get(key)
        if built is None:
            func = kernels.prepare(kernels.specialize(name, kernel, sizes)).with_attr("global_symbol", "main")
            if device.type == "cuda":
                target = pipeline.resolve_target("gpu")
                if not kernels.binds_threads(func):
                    from tvm.s_tir import dlight
                    mod = tvm.IRModule({"main": func})
                    with target:
                        mod = dlight.ApplyDefaultSchedule(*schedules.gpu_rules("dlight"))(mod)
                    func = mod["main"]
            elif kernels.binds_threads(func):
                raise Diagnostic(f"kernel `{name}` binds GPU threads, so it runs on CUDA tensors only")
            else:
                target = pipeline.resolve_target("cpu")
            built = _KERNELS[key] = tvm.compile(tvm.IRModule({"main": func}), target=target)["main"]
    return built
