"""Calling a user's TensorIR kernel (`@T.prim_func`) from @jit code, as a Relax `call_tir`.

A kernel's buffer parameters are its inputs followed by its outputs (destination-passing style).
`out = kernel(x, y)` supplies the inputs; the outputs' shapes and dtypes come from the kernel's
signature, with its symbolic sizes bound from the inputs. The tutorial's form, with a placeholder for
the output (`kernel(x, y, like)`: a tensor or a `bt.Tensor(shape, dtype)`), also works; the trailing
arguments that stand for buffers the kernel writes are taken as output placeholders.

Kernels fuse with their neighbouring Relax ops when their `op_pattern` (given, or inferred by
AnnotateTIROpPattern) allows it. FuseTIR only fuses buffers whose types equal their neighbours', so
before a kernel joins the module babytriton (1) specialises its symbolic sizes to the caller's, as
LegalizeOps does for Relax's own ops, and (2) widens its static sizes to int64: `T.Buffer((2, 3), ...)`
declares int32 sizes where LegalizeOps writes int64 ones. It is also made private, so that dead-code
elimination can drop it once fused.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass

import tvm
import tvm_ffi
from tvm import relax, s_tir, tirx
from tvm.script.ir_builder import ir as I

from ..core.errors import Diagnostic
from ..core.types import DTYPES, Tensor, format_shape
from . import library
from .values import same_size


OPAQUE = 8  # TVM's kOpaque operator pattern: never fused


def is_kernel(value) -> bool:
    return isinstance(value, tirx.PrimFunc)


# The gradients given with @bt.grad_for (jit.grad_for): (kernel, its gradient's JITFunction), newest first.
_GRADIENTS: list = []
_GRADIENTS_LOCK = threading.Lock()
_GENERATION = [0]   # registrations so far: a cached backward made before the last one is looked at anew


def set_gradient(kernel: tirx.PrimFunc, fn) -> None:
    """Register (or replace) the @jit function computing `kernel`'s vector-Jacobian product."""
    with _GRADIENTS_LOCK:
        _GRADIENTS[:] = [(k, g) for k, g in _GRADIENTS if not k.same_as(kernel)]
        _GRADIENTS.insert(0, (kernel, fn))
        _GENERATION[0] += 1


def generation() -> int:
    return _GENERATION[0]


def gradient_of(kernel):
    """The @bt.grad_for function of a kernel, or None."""
    with _GRADIENTS_LOCK:
        return next((g for k, g in _GRADIENTS if k.same_as(kernel)), None)


def no_gradient_message(name: str) -> str:
    return (f"the TensorIR kernel `{name}` has no gradient (babytriton cannot differentiate a kernel's "
            f"loops): give it one with @bt.grad_for({name}) on a function taking the kernel's inputs and "
            "the gradient of each floating-point output, returning the gradient of each floating-point "
            "input; or call it on tensors that don't require grad")


@dataclass
class Declared:
    """A kernel as it was added to the module being built, for one binding of its sizes."""
    kernel: tirx.PrimFunc  # the user's PrimFunc
    sizes: dict            # its symbolic sizes -> the caller's sizes, for this declaration
    gvar: tvm.ir.GlobalVar


@dataclass
class Buffers:
    """A kernel call's arguments checked against the kernel's buffers."""
    inputs: list   # the values given for its input buffers
    outputs: list  # (shape, dtype) of each output buffer, its symbolic sizes bound
    sizes: dict    # the kernel's symbolic sizes -> the caller's


def call(cg, kernel: tirx.PrimFunc, name: str, args: list, kwargs: dict):
    """`kernel(*args)` inside @jit code: check the buffers, infer the outputs, emit call_tir."""
    buffers = check_call(library.RelaxBuilder(cg), kernel, name, args, kwargs)
    if _device_kind(cg) == "cuda" and not is_schedulable(kernel) and not binds_threads(kernel):
        raise Diagnostic(f"kernel `{name}` is written with plain loops, which the GPU schedule cannot map to "
                         "threads: write its body with T.sblock (@T.prim_func(s_tir=True)) or bind its loops "
                         "to threads yourself (T.thread_binding)")
    gvar = declare(cg, kernel, name, buffers.sizes)
    outputs = [relax.TensorType(shape, dtype) for shape, dtype in buffers.outputs]
    out_ty = outputs[0] if len(outputs) == 1 else outputs
    return cg.emit(relax.op.call_tir(gvar, buffers.inputs, out_ty=out_ty))


def check_call(b, kernel: tirx.PrimFunc, name: str, args: list, kwargs: dict) -> Buffers:
    """The rules of calling a kernel, for the compiler and the eager reference alike (`b`, a
    library.Builder, reads the values): the buffers given checked, the outputs' types inferred."""
    if kwargs:
        raise Diagnostic(f"kernel `{name}` takes its buffers positionally, not as keywords")
    params = list(kernel.params)
    for param in params:
        if not tirx.is_buffer_var(param):
            raise Diagnostic(f"kernel `{name}` has the scalar parameter '{param.name}' ({param.ty}); "
                             "only buffer parameters can be passed from @jit code")
    if len(args) > len(params):
        raise Diagnostic(f"kernel `{name}` has {len(params)} buffers "
                         f"({', '.join(p.name for p in params)}), got {len(args)} arguments")
    written = written_buffers(kernel)
    n_inputs = len(args) - _placeholder_count(written, params, args)
    if n_inputs == len(params):
        raise Diagnostic(f"kernel `{name}` has {len(params)} buffers and all {len(args)} are given as inputs; "
                         "leave out its output buffers (or pass a placeholder for an output it writes)")
    sizes: dict[str, object] = {}
    for index, (param, value) in enumerate(zip(params, args[:n_inputs])):
        if not b.is_tensor(value):
            raise Diagnostic(f"argument {index + 1} of kernel `{name}` (buffer '{param.name}') must be a tensor, "
                             f"got {b.describe(value)}")
        _match(name, param, b.shape(value), b.dtype(value), sizes, f"argument {index + 1}")
    outputs = []
    for param, value in zip(params[n_inputs:], [*args[n_inputs:], *[None] * len(params)]):
        if param.name not in written:
            raise Diagnostic(f"kernel `{name}`'s buffer '{param.name}' would be an output, but the kernel "
                             "never writes it; pass it as an input")
        if value is not None:
            shape, dtype = _placeholder_type(b, value, name, param)
            _match(name, param, shape, dtype, sizes, "the placeholder")
        if str(param.ty.dtype) not in DTYPES:
            raise Diagnostic(f"kernel `{name}`'s output '{param.name}' has dtype {param.ty.dtype}, "
                             "which babytriton tensors can't have")
        outputs.append((_output_shape(name, param, sizes), str(param.ty.dtype)))
    return Buffers(list(args[:n_inputs]), outputs, sizes)


def declare(cg, kernel: tirx.PrimFunc, name: str, sizes: dict) -> tvm.ir.GlobalVar:
    """Add the kernel, specialised to the caller's sizes, to the module once, under a unique name."""
    for known in cg.kernels:
        if known.kernel.same_as(kernel) and known.sizes.keys() == sizes.keys() and all(
                same_size(known.sizes[k], sizes[k]) for k in sizes):
            return known.gvar
    taken = {d.gvar.name_hint for d in cg.kernels} | {cg.inline_chain[0].__name__}
    attrs = kernel.attrs
    symbol = str(attrs["global_symbol"]) if attrs is not None and "global_symbol" in attrs \
        else name.rpartition(".")[2]
    unique, n = symbol, 1
    while unique in taken:
        n += 1
        unique = f"{symbol}_{n}"
    gvar = I.decl_function(unique, prepare(specialize(name, kernel, sizes)))
    cg.kernels.append(Declared(kernel, dict(sizes), gvar))
    return gvar


def specialize(name: str, kernel: tirx.PrimFunc, sizes: dict) -> tirx.PrimFunc:
    """The kernel with its symbolic sizes replaced by the caller's, as LegalizeOps writes Relax's
    own operators: FuseTIR fuses a kernel only when its buffers' types equal its neighbours'."""
    replace = {}
    for param in kernel.params:
        dims = list(param.ty.shape)
        if not any(isinstance(d, tirx.Var) for d in dims):
            continue
        new_dims = [_size_expr(name, d, sizes[d.name]) if isinstance(d, tirx.Var) else d for d in dims]
        replace[param] = tvm.ir.Var(param.name, _with_shape(param.ty, new_dims))
    return kernel.specialize(replace) if replace else kernel


def _size_expr(name: str, var: tirx.Var, size):
    dtype = str(var.ty)
    if isinstance(size, int):
        return tirx.IntImm(dtype, size)
    if str(size.ty) != dtype:
        raise Diagnostic(f"kernel `{name}` declares its size '{var.name}' as {dtype}; declare it with "
                         "T.int64() to call it with symbolic sizes")
    return size


def prepare(kernel: tirx.PrimFunc) -> tirx.PrimFunc:
    """The kernel as babytriton adds it: private, with int64 static buffer sizes.

    A kernel that binds its own threads is already scheduled: Dlight leaves it alone and it is not
    fused. A kernel of plain loops (no `T.sblock`) gets a root block, which Relax's passes expect of
    every PrimFunc in a dataflow block, and stays unfused: FuseTIR only merges block-structured code.
    """
    func = tvm_ffi.structural_map(kernel, (tirx.BufferType, _widen_buffer))
    if func.attrs is not None and "global_symbol" in func.attrs:
        func = func.without_attr("global_symbol")
    if binds_threads(func):
        func = func.with_attr("tirx.is_scheduled", True).with_attr("op_pattern", OPAQUE)
    if not is_schedulable(func):
        root = s_tir.SBlockRealize([], True, s_tir.SBlock([], [], [], "root", func.body))
        func = func.with_body(root).with_attr("s_tir", True).with_attr("op_pattern", OPAQUE)
    return func


def is_schedulable(kernel: tirx.PrimFunc) -> bool:
    return isinstance(kernel.body, s_tir.SBlockRealize)


def _device_kind(cg) -> str:
    return cg.options.device_kind


def binds_threads(kernel: tirx.PrimFunc) -> bool:
    found = []
    tvm_ffi.structural_walk(kernel.body, (tirx.For, lambda loop: found.append(
        loop.kind == tirx.ForKind.THREAD_BINDING)))
    return any(found)


def _widen(size):
    if isinstance(size, tirx.IntImm) and str(size.ty) == "int32":
        return tirx.IntImm("int64", size.value)
    return size


def _widen_buffer(ty: tirx.BufferType) -> tirx.BufferType:
    return _with_shape(ty, [_widen(d) for d in ty.shape], strides=[_widen(d) for d in ty.strides],
                       elem_offset=_widen(ty.elem_offset))


def _with_shape(ty: tirx.BufferType, shape: list, **changes) -> tirx.BufferType:
    fields = dict(dtype=ty.dtype, storage_scope=ty.storage_scope, shape=shape, strides=ty.strides,
                  elem_offset=ty.elem_offset, data_alignment=ty.data_alignment, offset_factor=ty.offset_factor,
                  layout=ty.layout, allocated_addr=ty.allocated_addr)
    return tirx.BufferType(**{**fields, **changes})


def written_buffers(kernel: tirx.PrimFunc) -> frozenset:
    names = []
    tvm_ffi.structural_walk(kernel.body, (tirx.BufferStore, lambda store: names.append(store.buffer.name)))
    return frozenset(names)


def _placeholder_count(written: frozenset, params: list, args: list) -> int:
    """How many trailing arguments stand for outputs: with every buffer given, the trailing run of
    buffers the kernel writes; otherwise none (the missing trailing buffers are the outputs)."""
    if len(args) < len(params):
        return 0
    count = 0
    for param in reversed(params):
        if param.name not in written:
            break
        count += 1
    return count


def _placeholder_type(b, value, name: str, param) -> tuple[tuple, str]:
    if b.is_tensor(value):
        return b.shape(value), b.dtype(value)
    if isinstance(value, Tensor):
        return tuple(b.symbolic(d) if isinstance(d, str) else d for d in value.shape), value.dtype
    raise Diagnostic(f"the placeholder for kernel `{name}`'s output '{param.name}' must be a tensor or a "
                     f"bt.Tensor(shape, dtype), got {b.describe(value)}")


def _match(name: str, param, shape: tuple, dtype: str, sizes: dict, what: str) -> None:
    """Check a value's shape and dtype against a buffer; bind the kernel's symbolic sizes."""
    buffer = param.ty
    want_shape = tuple(buffer.shape)
    want_dtype = str(buffer.dtype)
    expected = f"kernel `{name}`'s buffer '{param.name}' is {_buffer_text(buffer)}"
    if want_dtype not in DTYPES:
        raise Diagnostic(f"{expected}; babytriton tensors can't have dtype {want_dtype}")
    if len(shape) != len(want_shape) or dtype != want_dtype:
        raise Diagnostic(f"{expected}, but {what} is a {dtype} tensor of shape {format_shape(shape)}")
    for axis, (want, got) in enumerate(zip(want_shape, shape)):
        if isinstance(want, tirx.IntImm):
            if not (isinstance(got, int) and got == want.value):
                raise Diagnostic(f"{expected}, but {what} has size {got} on axis {axis}")
        elif isinstance(want, tirx.Var):
            known = sizes.setdefault(want.name, got)
            if not same_size(known, got):
                raise Diagnostic(f"{expected}: its size '{want.name}' is {known} from an earlier buffer, "
                                 f"but {what} has size {got} on axis {axis}")
        else:
            raise Diagnostic(f"{expected}; a size computed from other sizes ({want}) is not supported: "
                             "give the buffer its own symbolic size")


def _output_shape(name: str, param, sizes: dict) -> list:
    shape = []
    for want in param.ty.shape:
        if isinstance(want, tirx.IntImm):
            shape.append(want.value)
        elif isinstance(want, tirx.Var) and want.name in sizes:
            shape.append(sizes[want.name])
        else:
            raise Diagnostic(f"cannot infer the size '{want}' of kernel `{name}`'s output '{param.name}' from its "
                             "inputs; pass a placeholder for it, e.g. bt.Tensor((...), dtype)")
    return shape


def _buffer_text(buffer) -> str:
    dims = tuple(d.value if isinstance(d, tirx.IntImm) else str(d) for d in buffer.shape)
    return f"{buffer.dtype} {format_shape(dims)}"
