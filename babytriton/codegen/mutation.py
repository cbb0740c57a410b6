"""In-place updates in compiled code, with torch's meaning, on immutable Relax values.

`x.add_(y)`, `x[i] = v`, `x[:, :d].mul_(2)` compute the new value (the out-of-place rule's result, kept
in the receiver's dtype and shape as torch keeps it) and rebind it where torch would see the change:
the receiver's name and every name bound to the same value (`y = x; y.add_(1)` updates x too), or the
region of the tensor a subscript names. A local that is a view of another live tensor (`y = x[0]`,
`y = x.view(-1)`) is refused when updated in place: torch would change that tensor too.

Parameters: a tensor parameter that the function never rebinds with `=` denotes the caller's tensor
throughout; if its name holds a new value at the function's end (from in-place updates), the compiled
function returns that value as an extra result, and the driver copies it into the caller's tensor
(`write_back`). A parameter rebound with `=` (`p = p * 2`) is a local from then on, never written back.
"""
from __future__ import annotations

import ast
import dataclasses
import inspect

import numpy as np
import torch
from tvm import relax

from ..frontend.arguments import unwrap
from ..core.errors import Diagnostic
from ..core.types import DTYPES, format_shape
from .stream import assigned_names
from .values import broadcast, same_size
from . import pytorch
from .pytorch import indexing
from .pytorch.registry import op

# torch methods whose result shares the receiver's memory: updating it in place changes the receiver
VIEW_METHODS = {"view", "view_as", "reshape", "reshape_as", "transpose", "t", "permute", "unsqueeze", "squeeze",
                "expand", "expand_as", "narrow", "select", "unflatten", "flatten", "diagonal", "movedim",
                "moveaxis", "swapaxes", "swapdims", "unfold", "as_strided", "detach", "T", "mT", "real", "imag",
                "permute_dims"}
VIEW_PROPERTIES = {"T", "mT", "H", "mH", "data"}                                   # `y = x.T`
TUPLE_VIEWS = {"chunk", "split", "unbind", "tensor_split", "split_with_sizes"}  # `a, b = x.chunk(2)`
# the Relax function's attribute naming, in order, the parameters its trailing results update
WRITTEN = "babytriton.written_back"


# ----------------------------------------------------------------------------------------------
# the rule compiled code and the eager reference share: what `x.name_(...)` computes
# ----------------------------------------------------------------------------------------------
def _zero(b, self):
    return op(b, "zeros_like", self)


def _fill(b, self, value):
    return _broadcast(b, indexing.cast(b, value, b.dtype(self)), self, "Tensor.fill_()")


def _copy(b, self, src, non_blocking=False):
    return _broadcast(b, indexing.cast(b, src, b.dtype(self)), self, "Tensor.copy_()")


# the receiver's own memory, whole and unchanged in shape: `p.data.add_(...)`, `p.detach().mul_(...)` update p
SAME_TENSOR = {"data", "detach"}


# in-place methods with no out-of-place method of their own: rule(b, self, *args, **kwargs)
INPLACE_ONLY = {"zero_": _zero, "fill_": _fill, "copy_": _copy}


def _broadcast(b, value, like, where: str):
    shape, vshape = tuple(b.shape(like)), tuple(b.shape(value))
    if vshape == shape:
        return value
    if len(vshape) > len(shape) or broadcast(vshape, shape) is None or \
            not all(same_size(v, s) or v == 1 for v, s in zip(reversed(vshape), reversed(shape))):
        raise Diagnostic(f"{where}: the value of shape {format_shape(vshape)} cannot be broadcast to the tensor's "
                         f"shape {format_shape(shape)}")
    return op(b, "broadcast_to", value, shape)


def is_inplace(name: str) -> bool:
    """Whether a tensor method name is an in-place update: `add_` where `add` is a torch method."""
    return name in INPLACE_ONLY or (name.endswith("_") and not name.startswith("_") and name[:-1] in pytorch.METHODS)


def updated(b, receiver, name: str, args: list, kwargs: dict):
    """The value `receiver.name(*args, **kwargs)` leaves in the receiver: the out-of-place rule's result,
    in the receiver's dtype and shape (torch refuses a result of a higher kind or a larger shape)."""
    if not b.is_tensor(receiver):
        raise Diagnostic(f"`.{name}()` updates a tensor in place; got {b.describe(receiver)}")
    if name in INPLACE_ONLY:
        rule = INPLACE_ONLY[name]
        try:
            inspect.signature(rule).bind(b, receiver, *args, **kwargs)
        except TypeError as e:
            raise Diagnostic(f"Tensor.{name}(): {e}") from None
        return rule(b, receiver, *args, **kwargs)
    result = pytorch.call(b, pytorch.METHODS[name[:-1]], [receiver, *args], kwargs)
    if not b.is_tensor(result):
        raise Diagnostic(f"`.{name}()`: `.{name[:-1]}()` does not give one tensor, so it has no in-place form")
    return _kept(b, receiver, result, name)


def _kept(b, receiver, result, name: str):
    """An out-of-place result as the receiver holds it: its dtype, its shape (torch's errors otherwise)."""
    dtype, rdtype = b.dtype(receiver), b.dtype(result)
    if rdtype != dtype:
        if not torch.can_cast(DTYPES[rdtype], DTYPES[dtype]):
            raise Diagnostic(f"`.{name}()`: result type {_torch_name(rdtype)} can't be cast to the desired output "
                             f"type {_torch_name(dtype)} (torch refuses it too; convert the receiver first)")
        result = op(b, "astype", result, dtype)
    shape, rshape = tuple(b.shape(receiver)), tuple(b.shape(result))
    if len(shape) != len(rshape) or not all(same_size(a, c) for a, c in zip(shape, rshape)):
        if broadcast(rshape, shape) is not None and len(rshape) <= len(shape) and \
                all(same_size(r, s) or r == 1 for r, s in zip(reversed(rshape), reversed(shape))):
            return op(b, "broadcast_to", result, shape)
        raise Diagnostic(f"`.{name}()`: output with shape {format_shape(shape)} doesn't match the broadcast shape "
                         f"{format_shape(rshape)}")
    return result


def _torch_name(dtype: str) -> str:
    return {"float32": "Float", "float64": "Double", "float16": "Half", "bfloat16": "BFloat16", "int64": "Long",
            "int32": "Int", "int16": "Short", "int8": "Char", "uint8": "Byte", "bool": "Bool"}.get(dtype, dtype)


# ----------------------------------------------------------------------------------------------
# compiled code: where the new value goes
# ----------------------------------------------------------------------------------------------
@dataclasses.dataclass
class State:
    """What the compiler knows of one function's tensors beyond their values."""
    originals: dict = dataclasses.field(default_factory=dict)  # parameter name -> its Relax var
    rebound: set = dataclasses.field(default_factory=set)      # names the function assigns with `=`
    views: list = dataclasses.field(default_factory=list)      # (view, base, how it was made, its index or None)
    written: tuple = ()                                        # parameters written back, in order


def state(cg) -> State:
    """The code generator's State (made on first use)."""
    found = getattr(cg, "mutation_state", None)
    if found is None:
        found = cg.mutation_state = State(rebound=set(assigned_names([cg.parsed.tree])))
    return found


def _same(a, b) -> bool:
    return a is b or isinstance(a, relax.Expr) and isinstance(b, relax.Expr) and a.same_as(b)


def start(cg) -> None:
    """At the top of the function: its tensor parameters, as the caller's tensors."""
    s = state(cg)
    for name, spec in cg.specs.items():
        if spec.kind == "tensor" and name in cg.scope:
            s.originals[name] = cg.scope.lookup(name)


def target_of(node: ast.expr):
    """Where an in-place update of `node`'s value lands: a Name, a Subscript, or None (a temporary)."""
    if isinstance(node, (ast.Name, ast.Subscript)):
        return node
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
            (is_inplace(node.func.attr) or node.func.attr in SAME_TENSOR and not node.args):
        return target_of(node.func.value)
    if isinstance(node, ast.Attribute) and node.attr in SAME_TENSOR:
        return target_of(node.value)
    return None


def is_inplace_call(node: ast.Call) -> bool:
    return isinstance(node.func, ast.Attribute) and is_inplace(node.func.attr)


def inplace_call(cg, node: ast.Call):
    """`receiver.name_(...)` compiled (or `torch.relu_(x, ...)`, the function form): the updated value,
    rebound where torch would see it."""
    receiver, made = cg.visit(node.func.value), node.func.value
    args = cg.call_arguments(node.args)
    if any(kw.arg is None for kw in node.keywords):
        raise Diagnostic("`**kwargs` in calls is not supported in @jit functions")
    kwargs = {kw.arg: cg.visit(kw.value) for kw in node.keywords}
    if not cg.builder.is_tensor(receiver) and args and node.args:  # torch.relu_(x), torch.Tensor.add_(x, y)
        receiver, args, made = args[0], args[1:], node.args[0]
    value = updated(cg.builder, receiver, node.func.attr, args, kwargs)
    target = target_of(made)
    if target is None and isinstance(made, ast.Call) and isinstance(made.func, ast.Attribute) and \
            made.func.attr in VIEW_METHODS:
        raise Diagnostic(f"`{ast.unparse(made)}` is a view: in torch, `.{node.func.attr}()` on it updates the tensor "
                         "it views, which compiled code does not do; update that tensor (or its region `x[...]`) "
                         "directly, or update a copy (`.clone()`)")
    if target is not None:
        store(cg, target, value)
    return value


def store_result(cg, argument: ast.expr, value) -> None:
    """`F.relu(x, inplace=True)`: its result written where x's value lives (nothing for a temporary)."""
    target = target_of(argument)
    if target is not None:
        store(cg, target, value)


def store(cg, target: ast.expr, value) -> None:
    """Write `value` where `target` (a Name or a Subscript) says, as torch's in-place update does."""
    if isinstance(target, ast.Name):
        rebind(cg, target.id, value)
    else:
        assign_subscript(cg, target, value)


def assign_subscript(cg, target: ast.Subscript, value) -> None:
    """`base[index] = value`: base's name (and its aliases) rebound to the updated tensor."""
    base = cg.visit(target.value)
    if not cg.builder.is_tensor(base):
        raise Diagnostic(f"{cg.builder.describe(base)} does not support item assignment")
    where = target_of(target.value)
    if where is None:
        raise Diagnostic(f"assigning into part of `{ast.unparse(target.value)}`, a temporary, changes nothing "
                         "here (in torch it would write the tensor it views); assign into a named tensor")
    store(cg, where, indexing.setitem(cg.builder, base, cg.visit(target.slice), value))


def rebind(cg, name: str, value) -> None:
    """Name `name`, and every name bound to the same tensor, now hold `value`."""
    old = cg.local(name, cg.scope.lookup(name)) if name in cg.scope else None
    if old is None:
        raise Diagnostic(f"name '{name}' is not defined")
    _check_view(cg, name, old)
    s = state(cg)
    if name in s.rebound and name in s.originals and _same(old, s.originals[name]):
        raise Diagnostic(f"parameter '{name}' is updated in place here (which writes the caller's tensor) and also "
                         f"rebound with `=` elsewhere in the function: give the new value another name, or only "
                         "update it in place")
    if name not in s.originals and name in _param_names(cg) and getattr(cg.flow, "caller", None) is not None:
        raise Diagnostic(f"parameter '{name}' of an inlined @jit function is updated in place: that would change the "
                         "caller's tensor, which inlined code does not do; return the new value instead")
    for other in sorted(cg.scope.names()):
        held = cg.scope.lookup(other)
        if other == name or _same(held, old):
            cg.bind(other, value)
    _refresh_views(cg, old, value)


def _refresh_views(cg, old, value) -> None:
    """The views of a tensor updated in place see the update, as in torch: an indexing view is read
    again from the new value; a view another method made is refused (a located error)."""
    s = state(cg)
    for view, base, how, index in list(s.views):
        held = [n for n in sorted(cg.scope.names()) if _same(cg.scope.lookup(n), view)]
        if not held or not _same(base, old):
            continue
        if index is None:
            raise Diagnostic(f"this updates in place a tensor that '{held[0]}' views (`{how}`): in torch '{held[0]}' "
                             "would change too, which compiled code does not do; make it a copy (`.clone()`) or "
                             "compute it after the update")
        fresh = indexing.getitem(cg.builder, value, index)
        for n in held:
            cg.bind(n, fresh)
        s.views.append((fresh, value, how, index))


def _param_names(cg) -> set:
    args = cg.parsed.tree.args
    return {a.arg for a in args.posonlyargs + args.args + args.kwonlyargs}


def note_view(cg, view, base, how: str, index=None) -> None:
    """Remember that `view` shares memory with `base` in torch (made by `how`: `x[index]`, or a method)."""
    if cg.builder.is_tensor(view) and not _same(view, base):
        state(cg).views.append((view, base, how, index))


def note_binding(cg, node, target) -> None:
    """After `name = x.view(...)`, `name = x.T`, `a, b = x.chunk(2)`: the names are views of x in torch."""
    made = getattr(node, "value", None)
    if isinstance(made, ast.Call) and isinstance(made.func, ast.Attribute):
        views = made.func.attr in (TUPLE_VIEWS if isinstance(target, (ast.Tuple, ast.List)) else VIEW_METHODS)
        source = made.func.value if isinstance(made.func.value, ast.Name) else \
            made.args[0] if made.args and isinstance(made.args[0], ast.Name) else None  # torch.transpose(x, ...)
    else:
        views = isinstance(made, ast.Attribute) and made.attr in VIEW_PROPERTIES
        source = made.value if views and isinstance(made.value, ast.Name) else None
    if not views or source is None or source.id not in cg.scope:
        return
    base = cg.scope.lookup(source.id)
    names = [t for t in (target.elts if isinstance(target, (ast.Tuple, ast.List)) else [target])]
    for name in names:
        if isinstance(name, ast.Name) and cg.builder.is_tensor(base):
            note_view(cg, cg.scope.lookup(name.id), base, ast.unparse(made))


def _check_view(cg, name: str, old) -> None:
    for view, base, how, _ in state(cg).views:
        if _same(view, old) and _live(cg, base):
            raise Diagnostic(f"'{name}' is a view of another tensor (`{how}`): in torch, updating it in place changes "
                             f"that tensor too, which compiled code does not do; update a copy (`{name} = "
                             f"{name}.clone()`), or write the region of the tensor itself (`x[...] = ...`)")


def _live(cg, base) -> bool:
    if any(_same(base, p) for p in state(cg).originals.values()):
        return True
    return any(_same(cg.scope.lookup(n), base) for n in cg.scope.names())


# ----------------------------------------------------------------------------------------------
# parameters written back
# ----------------------------------------------------------------------------------------------
def candidates(cg) -> list[str]:
    """The tensor parameters that may be written back: never rebound with `=`."""
    s = state(cg)
    return [n for n in s.originals if n not in s.rebound]


def results(cg, returned: relax.Expr) -> relax.Expr:
    """The function's result, with the new value of each parameter updated in place after it."""
    s = state(cg)
    written = [n for n in candidates(cg) if not _same(cg.scope.lookup(n), s.originals[n])]
    s.written = tuple(written)
    if not written:
        return returned
    values = [cg.as_tensor(cg.scope.lookup(n), cg.specs[n].dtype) for n in written]
    return relax.Tuple([returned, *values])


def updated_roots(body: list) -> list[str]:
    """The names a block of statements updates in place (`x.add_(...)`, `x[i] = v`, `x.data.mul_(...)`),
    read from the code alone."""
    roots = []
    for stmt in body:
        for node in ast.walk(stmt):
            found = None
            if isinstance(node, ast.Call) and is_inplace_call(node):
                found = target_of(node.func.value)
            elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
                for t in node.targets if isinstance(node, ast.Assign) else [node.target]:
                    if isinstance(t, ast.Subscript):
                        found = t
            while isinstance(found, ast.Subscript):
                found = found.value
            if isinstance(found, ast.Name) and found.id not in roots:
                roots.append(found.id)
    return roots


def mutated(cg, body: list) -> list:
    """The names a loop body updates in place (`x.add_(...)`, `x[i] = v`), and the names bound to the
    same tensors: a loop carries them like the names it assigns."""
    roots = [name for name in updated_roots(body) if name in cg.scope]
    names = list(roots)
    for root in roots:
        value = cg.scope.lookup(root)
        names += [n for n in sorted(cg.scope.names()) if n not in names and _same(cg.scope.lookup(n), value)]
    return names


def realias(scope, carried: dict) -> None:
    """In a loop's body: names that held one tensor before the loop hold one again (the loop passes
    each carried name separately)."""
    before = {}
    for name in carried:
        for frame in reversed(scope.frames[:-1]):
            if name in frame:
                before[name] = frame[name]
                break
    firsts = []
    for name, old in before.items():
        first = next((f for f in firsts if _same(before[f], old)), None)
        if first is None:
            firsts.append(name)
        elif isinstance(old, relax.Expr):
            scope.assign(name, scope.lookup(first))


def with_outputs(compiled, codegen):
    """The build's record, naming the parameters the function writes back (Kernel.outputs)."""
    written = state(codegen).written
    return dataclasses.replace(compiled, outputs=tuple(written)) if written else compiled


# ----------------------------------------------------------------------------------------------
# the driver: copying the new values into the caller's tensors
# ----------------------------------------------------------------------------------------------
def positions(kernel, params) -> list[int]:
    """Where the parameters a compiled version writes back are among its arguments."""
    if kernel.backend != "relax" or not kernel.outputs:
        return []
    return [i for i, p in enumerate(params) if p.name in kernel.outputs]


def write_back(run, written: list[int]):
    """A runner that copies the extra results of a function updating parameters into their tensors."""
    def call(args):
        out = run(_apart(list(args), written))
        result, values = out[0], out[1:]
        for i, value in zip(written, values):
            target = unwrap(args[i])
            if _same_memory(target, value):  # the kernel wrote it in place (inplace.py)
                continue
            if isinstance(target, np.ndarray):
                np.copyto(target, value if isinstance(value, np.ndarray) else value.numpy(force=True))
            else:
                target.copy_(value)
        return result
    return call


def _same_memory(target, value) -> bool:
    return isinstance(target, torch.Tensor) and isinstance(value, torch.Tensor) and \
        value.data_ptr() == target.data_ptr() and value.shape == target.shape and value.dtype == target.dtype


def _apart(args: list, written: list[int]) -> list:
    """`args` with a copy of each updated parameter whose memory another argument shares: a kernel
    writing it in place (inplace.py) would change what it still reads through the other."""
    tensors = {i: unwrap(a) for i, a in enumerate(args)}
    tensors = {i: t for i, t in tensors.items() if isinstance(t, torch.Tensor) and t.numel()}
    shared = {i for i in written if i in tensors and any(
        j != i and _overlap(tensors[i], t) for j, t in tensors.items())}
    return [tensors[i].clone() if i in shared else a for i, a in enumerate(args)] if shared else args


def _overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr():
        return False
    start_a, start_b = a.data_ptr(), b.data_ptr()
    end_a, end_b = start_a + a.numel() * a.element_size(), start_b + b.numel() * b.element_size()
    return start_a < end_b and start_b < end_a


def no_grad_only(run, name: str, params, written: list[int], requires: tuple):
    """With grad enabled, a function updating its tensors in place is refused (torch's rule for leaves)."""
    def call(args):
        if torch.is_grad_enabled():
            leaves = [params[i].name for i in written if requires[i]]
            if leaves:
                raise RuntimeError(f"{name}(): a leaf Variable that requires grad is being used in an in-place "
                                   f"operation: parameter {', '.join(map(repr, leaves))} is updated in place; run "
                                   "the update under torch.no_grad() (as optimizer steps do)")
            raise RuntimeError(f"{name}(): updates its arguments in place ({', '.join(params[i].name for i in written)}) "
                               "while other arguments require grad; gradients through in-place updates of arguments "
                               "are not supported: run it under torch.no_grad()")
        return run(args)
    return call
