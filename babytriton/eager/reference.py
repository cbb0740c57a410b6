"""Eager reference mode: a @jit function's own Python, run by torch (`f.eager(*args)`).

The undecorated function is the reference implementation of what the compiler builds. It runs on the
arguments the compiled version sees (runtime scalars as 0-d int64/float64/bool tensors that promote as
the Python numbers they are, eager_ops.WeakScalar; constexprs as Python values), so dtypes promote the same way, and its results come back as the compiled call's do.
Every name the compiler resolves is mapped to torch:
- library ops (`sigmoid(x)`, `R.nn.softmax`, `bt.sum`, `x.sum(axis=1)`, `x.T`) through one table,
  Relax op name -> torch function, after the compiler's own rules (library.apply, run with
  eager_ops.TorchBuilder where the compiler runs them with library.RelaxBuilder);
- TensorIR kernels are checked by the compiler's rules (kernels.check_call), compiled alone by TVM
  and run on the tensors (DLPack, no copies);
- other @jit functions run eagerly too, their arguments bound as the inliner binds them.

How: where Python's meaning differs from the compiler's, the function's AST is rewritten, then
compiled again against the user's file and line numbers, so `print`, `breakpoint()` and tracebacks
show the user's code:
- `a.b` -> `_bt_attr(a, "b")`: tensor attributes as @jit code has them (`x.dtype` is a name,
  `x.shape` a tuple, the methods and `x.T` library ops), and anything reached through a module
  translated as a global would be;
- `a and b`, `a or b`, `not a`, `~a`, `a if c else b`, `a < b < c`: element-wise on tensors, by the
  compiler's rules (codegen.semantic); Python's meaning (short-circuiting) on Python values.
The function runs with a fresh namespace that holds the translated names it uses: neither the module's
globals nor any torch class is changed. `backend="tir"` functions are loop code over elements, which
Python already runs as compiled: they run unchanged, writing into their tensor arguments.
`with bt.device(...)` blocks don't move data in eager mode: operations run where their operands are.

Control flow is Python's own: an `if` on a 0-d tensor takes one path, loops run. One difference is
left: compiled, a variable holding different Python numbers on the two paths of an `if` decided at
run time becomes a 0-d tensor (int64, float32 or bool) after the `if`; eagerly it keeps the number of
the path taken (knowing the other path's value would mean running it).
"""
from __future__ import annotations

import ast
import builtins
import copy
import functools
import math
import operator
import threading
import weakref

import numpy as np
import torch

from ..frontend import devices
from ..frontend.arguments import unwrap
from ..codegen import kernels, library, mutation, pytorch, semantic
from ..codegen.pytorch import indexing
from ..codegen.values import PY_BUILTINS
from .ops import (
    _DEVICE, _SIZES, BUILDER, PY_SCALARS, TORCH, _describe, _is_scalar, _is_tensor, WeakScalar, call_op, run_kernel, weak)
from ..core.errors import Diagnostic
from ..frontend.function import Decorated, FunctionInfo, PlainFunction, plain_function
from ..core.types import DTYPES, SCALAR_TYPES, TORCH_TO_NAME, DtypeName

# ----------------------------------------------------------------------------------------------
# calling a @jit function eagerly
# ----------------------------------------------------------------------------------------------
def run(info: FunctionInfo, args: tuple, kwargs: dict):
    """`f.eager(*args, **kwargs)`: the arguments checked as a compiled call checks them, the
    function run by torch, the results shaped as the compiled call returns them."""
    if kwargs or len(args) != len(info.params):
        args = info.bind(args, kwargs)
    specs = info.specs(args)                     # the compiled call's argument checks
    target_kind = info.device_kind
    if not info.heterogeneous:
        devices.check_devices(info.params, args, target_kind, info.name)
    if info.options["backend"] == "tir":
        return _run_tir(info, args, specs)
    tensors = [unwrap(a) for a, s in zip(args, specs) if s.kind == "tensor"]
    all_numpy = bool(tensors) and all(isinstance(t, np.ndarray) for t in tensors)
    device = next((t.device for t in tensors if _is_tensor(t)), torch.device(target_kind))
    values, sizes = [], {}
    for value, spec in zip(args, specs):
        if spec.kind == "tensor":
            data = unwrap(value)
            values.append(torch.from_numpy(data) if isinstance(data, np.ndarray) else data)
            sizes.update((d, n) for d, n in zip(spec.shape, data.shape) if isinstance(d, str))
        elif spec.kind == "scalar":  # what the compiled call passes: a 0-d tensor, promoting as a number
            values.append(weak(torch.tensor(value, dtype=DTYPES[spec.dtype], device=device)))
        else:
            values.append(value)
    token, sizes_token = _DEVICE.set(device), _SIZES.set(sizes)
    try:
        auto = {i for i, (p, s) in enumerate(zip(info.params, specs)) if p.kind == "auto" and s.kind == "scalar"}
        result = _specialising(function(info), values, [args[i] if i in auto else v for i, v in enumerate(values)])
    finally:
        _DEVICE.reset(token)
        _SIZES.reset(sizes_token)
    return _results(result, all_numpy, info.name, device)


def _specialising(fn, values: list, numbers: list):
    """`fn(*values)`; where it refuses a run-time number, `fn(*numbers)`: the unannotated numbers as
    the Python numbers they are, as the compiled call specialises those it needs (arguments.Specialise)."""
    try:
        return fn(*values)
    except Exception as e:  # noqa: BLE001 - re-raised unless the specialised run succeeds
        if all(v is n for v, n in zip(values, numbers)):
            raise
        error = e
    try:
        return fn(*numbers)
    except Exception:
        raise error from None


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
    if isinstance(value, WeakScalar):
        value = value.as_subclass(torch.Tensor)
    if not _is_tensor(value):
        raise TypeError(f"{fname}() returned {_describe(value)}; @jit functions return tensors, numbers "
                        "and tuples of them")
    return value.numpy(force=True) if all_numpy else value


def _run_tir(info: FunctionInfo, args: tuple, specs):
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
    info.fn(*values)
    written = written_parameters(info.parsed.tree)
    outputs = tuple(args[i] for i, p in enumerate(info.params) if p.name in written)
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


def call_nested(callee: FunctionInfo, *args, **kwargs):
    """A @jit function called from eager code: its parameters bound as the inliner binds them
    (numbers become the 0-d tensors a direct call passes), its value returned as it is."""
    try:
        bound = callee.signature.bind(*args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{callee.name}({', '.join(p.name for p in callee.params)}): {e}") from None
    bound.apply_defaults()
    values, numbers = [], []
    for param in callee.params:
        value = bound.arguments[param.name]
        numbers.append(value if param.kind == "auto" else None)
        if param.kind in ("auto", "scalar") and _is_scalar(value):
            dtype = SCALAR_TYPES[param.annotation if param.kind == "scalar" else type(value)]
            value = weak(torch.tensor(value, dtype=DTYPES[dtype], device=_DEVICE.get()))
        elif param.kind == "scalar" and _is_tensor(value) and value.dim() == 0:
            value = value.to(DTYPES[SCALAR_TYPES[param.annotation]])
        values.append(value)
    if callee.options["backend"] == "tir":
        callee.fn(*values)
        return None
    # the numbers a compiled call would specialise, as given (the others as converted above)
    numbers = [n if n is not None and _is_scalar(n) else v for n, v in zip(numbers, values)]
    return _specialising(function(callee), values, numbers)


# ----------------------------------------------------------------------------------------------
# the rewritten function
# ----------------------------------------------------------------------------------------------
_COMPILED: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
_COMPILED_LOCK = threading.Lock()
MAKER = "_bt_make"


def function(info: FunctionInfo):
    """The user's function, rewritten and re-created in a namespace of translated names."""
    with _COMPILED_LOCK:
        compiled = _COMPILED.get(info)
        if compiled is None:
            compiled = _COMPILED[info] = _compile(info.parsed)
    code, names = compiled
    fn = info.fn
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
        if isinstance(node.target, ast.Subscript):  # `a[i] += y` is `a[i] = a[i] + y`, as compiled
            load = ast.copy_location(ast.Subscript(copy.deepcopy(node.target.value), copy.deepcopy(node.target.slice),
                                                   ast.Load()), node.target)
            binop = ast.copy_location(ast.BinOp(load, node.op, node.value), node)
            return self.visit(ast.copy_location(ast.Assign([node.target], binop), node))
        self.generic_visit(node)
        if not isinstance(node.target, ast.Name):
            return node
        load = ast.copy_location(ast.Name(node.target.id, ast.Load()), node.target)
        return ast.copy_location(ast.Assign([node.target], ast.copy_location(ast.BinOp(load, node.op, node.value),
                                                                              node)), node)

    def visit_Subscript(self, node: ast.Subscript):
        # a tensor's `x[index]` by the compiler's rule (codegen.pytorch.indexing)
        self.generic_visit(node)
        if not isinstance(node.ctx, ast.Load):
            return node
        return _helper_call("_bt_getitem", node, [node.value, _index(node.slice)])

    def visit_Assign(self, node: ast.Assign):
        # `x[index] = v` by the compiler's rule, written into x's memory (torch's meaning)
        self.generic_visit(node)
        if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Subscript):
            return node
        target = node.targets[0]
        call = _helper_call("_bt_setitem", node, [target.value, _index(target.slice), node.value])
        return ast.copy_location(ast.Expr(call), node)

    def visit_Call(self, node: ast.Call):
        # `x.add_(y)`: the compiler's rule (codegen.mutation.updated), written into x's memory; where x
        # is `base[index]` (or an in-place chain on it), into that region of base
        if not (isinstance(node.func, ast.Attribute) and mutation.is_inplace(node.func.attr)):
            return self.generic_visit(node)
        receiver, name = node.func.value, ast.Constant(node.func.attr)
        target = mutation.target_of(receiver)
        region = [copy.deepcopy(target.value), _index(copy.deepcopy(target.slice))] \
            if isinstance(target, ast.Subscript) else None
        node.func = receiver
        self.generic_visit(node)
        if region is not None:
            region = [self.visit(part) for part in region]
            return ast.copy_location(ast.Call(ast.Name("_bt_inplace_at", ast.Load()), [*region, node.func, name,
                                                                                        *node.args], node.keywords), node)
        return ast.copy_location(ast.Call(ast.Name("_bt_inplace", ast.Load()), [node.func, name, *node.args],
                                          node.keywords), node)

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
        if isinstance(node.op, (ast.Not, ast.Invert)):
            symbol = ast.Constant("not" if isinstance(node.op, ast.Not) else "~")
            return _helper_call("_bt_negation", node, [symbol, node.operand])
        return node

    def visit_IfExp(self, node: ast.IfExp):
        self.generic_visit(node)
        return _helper_call("_bt_ifexp", node, [node.test, _thunk(node.body), _thunk(node.orelse)])

    def visit_Compare(self, node: ast.Compare):
        self.generic_visit(node)
        if len(node.ops) == 1 and not isinstance(node.ops[0], (ast.Is, ast.IsNot, ast.In, ast.NotIn)):
            return node  # `is` and `in` by the compiler's rules (codegen.semantic.identity, membership)
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
        return DtypeName(TORCH_TO_NAME[tensor.dtype])  # equal to the name and to the torch.dtype
    if name == "ndim":
        return tensor.dim()
    if name in library.PROPERTIES:
        return call_op(library.table()[library.PROPERTIES[name]], [tensor], {})
    found, prop = pytorch.tensor_property(BUILDER, tensor, name)
    if found:
        return prop
    torch_method = pytorch.method(tensor, name)
    if torch_method is not None:
        return torch_function(torch_method.entry, tensor, name)
    bound = library.method(tensor, name)
    if bound is not None:
        def method(*args, **kwargs):
            return call_op(bound.op, library.method_arguments(bound, list(args), kwargs), kwargs)
        method.__name__ = name
        return method
    known = ["shape", "dtype", "ndim", *library.tensor_attributes(), *pytorch.METHODS, *pytorch.PROPERTIES]
    hint = f"; call the operator instead: {name}(x)" if name in library.names() else \
        library.did_you_mean(name, known)
    raise AttributeError(f"tensors have no attribute '{name}' in @jit code{hint} "
                         "(bt.torch_names() lists those @jit code has)")


def _rule(rule, *args):
    """One of the compiler's operator rules (codegen.semantic), run on torch values; a user's
    mistake is a TypeError in the compiler's words."""
    try:
        return rule(BUILDER, *args)
    except Diagnostic as e:
        raise TypeError(str(e)) from None


def _logical(kind: str, lhs, rhs):
    return _rule(semantic.logical, kind, lhs, rhs)


def _boolop(kind: str, first, *rest):
    """`a and b and ...`: Python values short-circuit as in Python; tensors combine element-wise
    (the compiler's rule, codegen.semantic.bool_op)."""
    return semantic.bool_op(kind, first, rest, lambda v: not _is_tensor(v),
                            lambda lhs, rhs: _logical(kind, lhs, rhs))


def _negation(symbol: str, value):
    """`not value`, `~value`."""
    return _rule(semantic.negation, symbol, value)


def _ifexp(cond, body, orelse):
    """`a if c else b`: on a tensor condition, element-wise (both sides computed), as compiled."""
    return _rule(semantic.if_else, cond, body, orelse)


_COMPARE = {"Lt": operator.lt, "LtE": operator.le, "Gt": operator.gt, "GtE": operator.ge,
            "Eq": operator.eq, "NotEq": operator.ne,
            "Is": lambda a, b: _rule(semantic.identity, "is", a, b),
            "IsNot": lambda a, b: _rule(semantic.identity, "is not", a, b),
            "In": lambda a, b: _rule(semantic.membership, "in", a, b),
            "NotIn": lambda a, b: _rule(semantic.membership, "not in", a, b)}


def _compare(left, *pairs):
    """`a < b < c` means `(a < b) and (b < c)`, each comparison element-wise on tensors (the
    compiler's rule, codegen.semantic.chain)."""
    return semantic.chain(left, pairs, lambda op, lhs, rhs: _COMPARE[op](lhs, rhs),
                          lambda lhs, rhs: _logical("and", lhs, rhs))


def _index(node: ast.expr) -> ast.expr:
    """An index's AST as an expression: its slices (`a:b:c`, allowed only in brackets) as `slice(a, b, c)`."""
    if isinstance(node, ast.Slice):
        parts = [p if p is not None else ast.Constant(None) for p in (node.lower, node.upper, node.step)]
        return ast.copy_location(ast.Call(ast.Name("slice", ast.Load()), parts, []), node)
    if isinstance(node, ast.Tuple):
        return ast.copy_location(ast.Tuple([_index(e) for e in node.elts], ast.Load()), node)
    return node


def _getitem(value, index):
    """`value[index]`: checked by the compiler's rule (its errors), computed by torch, whose basic
    indexing gives a view (which sees later in-place updates of value, as compiled code's does)."""
    if _is_tensor(value):
        _rule(indexing.getitem, value, index)
    return value[index]


def _setitem(base, index, value):
    """`base[index] = value`: computed by the compiler's rule, written into base's memory."""
    if not _is_tensor(base):
        base[index] = value
        return
    base.copy_(_rule(indexing.setitem, base, index, value))


def _inplace(receiver, name: str, *args, **kwargs):
    """`receiver.name_(...)`: the compiler's rule, written into the receiver's memory."""
    if not _is_tensor(receiver):
        return getattr(receiver, name)(*args, **kwargs)
    receiver.copy_(_rule(mutation.updated, receiver, name, list(args), kwargs))
    return receiver


def _inplace_at(base, index, receiver, name: str, *args, **kwargs):
    """`base[index].name_(...)`: the region of base updated; the region's new value."""
    value = _rule(mutation.updated, receiver, name, list(args), kwargs)
    base.copy_(_rule(indexing.setitem, base, index, value))
    return value


HELPERS = {"_bt_attr": _attr, "_bt_boolop": _boolop, "_bt_negation": _negation, "_bt_ifexp": _ifexp,
           "_bt_compare": _compare, "_bt_getitem": _getitem, "_bt_setitem": _setitem, "_bt_inplace": _inplace,
           "_bt_inplace_at": _inplace_at}


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
    entry = pytorch.resolve(value)
    if entry is not None:
        return torch_function(entry)
    if isinstance(value, Decorated):
        return functools.partial(call_nested, value.info)
    if kernels.is_kernel(value):
        return functools.partial(run_kernel, value, getattr(value, "__name__", "kernel"))
    if value is devices.device:
        return _EagerDevice
    plain = plain_function(value)
    if plain is not None:  # compiled, it is inlined: here it runs rewritten as the @jit function is
        return functools.partial(_call_plain, plain)
    python = _PYTHON_FUNCTIONS.get(id(value))
    if python is not None:
        return python
    return value


def _call_plain(plain: PlainFunction, *args, **kwargs):
    """An undecorated helper called from eager code: its code rewritten as a @jit function's (so that
    `x.max(dim=-1)` and `x.sum(axis=1)` mean there what they mean compiled), its arguments as they are."""
    return function(plain)(*args, **kwargs)


@functools.lru_cache(maxsize=None)
def op_function(op: library.Op):
    def call(*args, **kwargs):
        if op.name == "sum" and args and not _is_tensor(args[0]) and not _is_scalar(args[0]):
            return builtins.sum(*args, **kwargs)  # of a sequence: Python's, as compiled (RelaxCodeGen.call_sequence)
        return call_op(op, list(args), kwargs)
    call.__name__ = call.__qualname__ = op.name
    call.__doc__ = f"The library op {op.display}, run by torch (babytriton's eager mode)."
    return call


def torch_function(entry: pytorch.Entry, receiver=None, name: str | None = None):
    """A torch name (or a tensor's method, with its receiver) as eager code runs it: the compiler's rule
    (codegen.pytorch) on torch values."""
    def call(*args, **kwargs):
        try:
            result = pytorch.call(BUILDER, entry, list(args) if receiver is None else [receiver, *args], kwargs)
        except Diagnostic as e:
            raise TypeError(str(e)) from None
        if kwargs.get("inplace") is True and args and _is_tensor(args[0]):  # F.relu(x, inplace=True)
            return args[0].copy_(result)
        return result
    call.__name__ = call.__qualname__ = name or entry.name.rpartition(".")[2]
    return call


def _python_or_op(func):
    """A builtin or math function as @jit code has it: Python's on numbers; on tensors, the library
    op of the same name (`max(x, axis=1)`, `abs(x)`)."""
    def call(*args, **kwargs):  # the compiler's rule (codegen.semantic.python_call)
        return _rule(semantic.python_call, func, list(args), kwargs)
    call.__name__ = func.__name__
    return call


BUILTINS = {name: _python_or_op(fn) for name, fn in PY_BUILTINS.items()}
_PYTHON_FUNCTIONS = {id(fn): BUILTINS[name] for name, fn in PY_BUILTINS.items()}
_PYTHON_FUNCTIONS.update({id(fn): _python_or_op(fn) for name, fn in vars(math).items()
                          if callable(fn) and not name.startswith("_")})
