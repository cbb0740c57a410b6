"""@jit functions inside torch autograd.

A call whose torch tensors require grad (with grad mode on) runs the compiled forward inside a
`torch.autograd.Function`. Its backward is compiled too: `relax_backend.build_backward` differentiates
the generated Relax with TVM's Gradient pass, and the result goes through the same pipeline, cache and
stages as a forward (`f.backward(*args)` returns it as a Kernel). What the backward reads of the
forward is recomputed from the saved inputs, except small values (`backward.SMALL`: row statistics
such as a max, sum, mean, rstd or logsumexp of shape (rows, 1)), which a *training forward*
(`<name>_forward_saving`, `f.training_forward(*args)`) returns besides the results and the call keeps
with the inputs (`ctx.save_for_backward`); the backward then takes (params..., saved..., grads...).
Without such values, calls run the plain forward and keep only the inputs. Saving is switched on by
BABYTRITON_SAVE_FOR_BACKWARD=1 (off by default: see config.save_for_backward).

What is differentiated is what torch differentiates: floating-point tensor arguments that require
grad, and floating-point results; run-time scalars, constexprs, integer and bool tensors never are
(integer and bool results are marked non-differentiable). The backward is compiled for the exact
shapes of the call (TVM's gradients of reductions need static sizes).

Where Gradient cannot go (a run-time `if` or loop, an op with no registered gradient, device blocks)
the backward is torch autograd over the eager reference, with one warning per function naming the
construct and its line. A TensorIR kernel has a gradient only when one is given with `@bt.grad_for`
(compiled into the backward when it is straight-line code, else run through the eager reference):
without it, the backward is an error naming the kernel and its line, never a zero gradient. Double
backward (`create_graph=True`) always runs torch autograd over the eager reference, so it is
differentiable again.
"""
from __future__ import annotations

import dataclasses
import threading

import torch
from tvm import relax

from ..runtime import cache
from ..core import config
from ..backends import relax as relax_backend
from ..frontend.arguments import ArgSpec, without_layouts
from ..autodiff.backward import NotDifferentiable
from ..runtime.cache import KeyPart
from ..codegen import kernels
from ..frontend.function import Decorated
from ..core.types import DTYPES, Param, Tensor, is_float_dtype


class GradientFallbackWarning(UserWarning):
    """A backward that runs on torch autograd over the eager reference instead of compiled code."""


@dataclasses.dataclass(frozen=True)
class Variant:
    """Which backward: the parameters differentiated and the results that have a gradient."""
    requires: tuple[bool, ...]
    outputs: tuple[bool, ...]
    gradients: tuple = ()     # kernel_gradients(): the @bt.grad_for functions it may compile in
    # None: the backward recomputing the forward from the inputs; "backward": the one taking the
    # saved small forward values; "forward": the training forward that returns them
    part: str | None = None

    def key_part(self, params: list[Param]) -> KeyPart:
        names = ", ".join(p.name for p, r in zip(params, self.requires) if r)
        outs = ", ".join(str(i) for i, o in enumerate(self.outputs) if o)
        text = f"backward wrt {names}; results {outs}"
        if self.part == "backward":
            text += "; takes saved forward values"
        elif self.part == "forward":
            text = f"training forward (saving values) for the {text}"
        text += "".join(f"; gradient of `{path}`: {name} ({digest[:8]})" for path, name, digest in self.gradients)
        return KeyPart("backward", text, text)


def kernel_gradients(info) -> tuple:
    """(kernel's path, gradient's name, its key digest) for each @bt.grad_for gradient of a kernel
    the function reaches (its globals, and those of @jit functions it calls): a backward compiled
    with one is keyed on it, so that an edited or re-registered gradient compiles anew."""
    found, seen = [], set()

    def walk(info):
        if id(info) in seen:
            return
        seen.add(id(info))
        for path, value in cache.global_uses(info):
            if kernels.is_kernel(value):
                grad = kernels.gradient_of(value)
                if grad is not None:
                    found.append((path, grad.__name__, cache.make_key(grad.info, (), grad.info.target).digest))
            elif isinstance(value, Decorated):
                walk(value.info)
    walk(info)
    return tuple(found)


def requires_grad(args) -> tuple[bool, ...]:
    """Per argument: a floating-point torch tensor that requires grad."""
    return tuple(isinstance(a, torch.Tensor) and a.requires_grad for a in args)


def concrete(specs: tuple[ArgSpec, ...], args) -> tuple[ArgSpec, ...]:
    """The specs with every tensor's symbolic sizes replaced by this call's, each passed compact: the
    gradient is the caller's view's, not that of a permuted or broadcast tensor's storage (layouts.py)."""
    out = []
    for spec, value in zip(specs, args):
        if spec.kind == "tensor" and not all(isinstance(d, int) for d in spec.shape):
            data = value.data if isinstance(value, Tensor) else value
            spec = dataclasses.replace(spec, shape=tuple(int(n) for n in data.shape))
        out.append(spec)
    return without_layouts(tuple(out))


def grad_params(outputs: tuple[bool, ...]) -> list[Param]:
    """The backward's extra parameters: one gradient per differentiated result (named as the
    backward's Relax function names them)."""
    many = len(outputs) > 1
    return [Param(f"d_out{i}" if many else "d_out", "tensor") for i, o in enumerate(outputs) if o]


def result_types(kernel, name: str) -> list:
    """A meta tensor like each result of a compiled (static-shape) version, None for a non-tensor one."""
    ret = kernel.module[name].ret_ty
    out = []
    for t in (ret.fields if isinstance(ret, relax.TupleType) else [ret]):
        dtype = str(getattr(t, "dtype", ""))
        if isinstance(t, relax.TensorType) and dtype in DTYPES and t.shape is not None:
            out.append(torch.empty([int(d) for d in t.shape.values], dtype=DTYPES[dtype], device="meta"))
        else:
            out.append(None)
    return out


def saved_types(kernel) -> list:
    """A meta tensor like each value a training forward (`<name>_forward_saving`) saves."""
    ret = kernel.module[kernel.name].ret_ty.fields[1]
    return [torch.empty([int(d) for d in t.shape.values], dtype=DTYPES[str(t.dtype)], device="meta")
            for t in ret.fields]


def float_results(kernel, name: str) -> tuple[bool, ...]:
    """Per result of a compiled version: a floating-point tensor (the results that get a gradient)."""
    ret = kernel.module[name].ret_ty
    return tuple(isinstance(t, relax.TensorType) and is_float_dtype(str(t.dtype))
                 for t in (ret.fields if isinstance(ret, relax.TupleType) else [ret]))


def saved_bytes(saved) -> int:
    """The bytes of the tensors kept for the backward of one call."""
    return sum(t.numel() * t.element_size() for t in saved if isinstance(t, torch.Tensor))


class Differentiable:
    """One forward version called with these requires_grad flags: runs it inside torch autograd."""

    def __init__(self, jitfn, kernel, run, specs: tuple[ArgSpec, ...], requires: tuple[bool, ...]):
        self.jitfn, self.kernel, self.run, self.specs, self.requires = jitfn, kernel, run, specs, requires
        self._lock = threading.Lock()
        self._backwards: dict = {}
        self._trainings: dict = {}

    def __call__(self, args):
        if not torch.is_grad_enabled():
            return self.run(args)
        return _Function.apply(self, *args)

    def training_runner(self, args):
        """The training forward for these arguments, as a runner returning (result, (saved...)); None
        when calls run the plain forward (nothing small is saved, or the backward is not compiled)."""
        specs = concrete(self.specs, args)
        key = (specs, kernels.generation())
        try:
            return self._trainings[key]
        except KeyError:
            pass
        with self._lock:
            found = self._trainings.get(key, False)
            if found is False:
                found = self._trainings[key] = self._make_training(specs, args)
        return found

    def _make_training(self, specs, args):
        jitfn = self.jitfn
        if self.kernel.vm_devices is not None or jitfn.heterogeneous or self.kernel.backend != "relax" \
                or not config.save_for_backward(self.kernel.device_kind):
            return None
        outputs = float_results(self.kernel, jitfn.__name__)
        variant = Variant(self.requires, outputs, kernel_gradients(jitfn.info))
        try:
            kernel = jitfn.training_kernel(specs, variant)
        except (NotDifferentiable, relax_backend.NothingSaved):
            return None   # the backward (compiled or not) says why, when it runs
        return kernel.runner(tuple(args))

    def backward_runner(self, args, outputs: tuple[bool, ...], grads: list, saved=()):
        """The compiled backward for these arguments and result gradients (taking the training
        forward's `saved` values, when given), as a runner; False when it falls back (the reason
        warned once)."""
        specs = concrete(self.specs, args)
        saved_specs = tuple((tuple(t.shape), t.dtype) for t in saved)
        key = (specs, outputs, saved_specs, kernels.generation())   # a gradient registered since: looked at anew
        found = self._backwards.get(key)
        if found is None:
            with self._lock:
                found = self._backwards.get(key)
                if found is None:
                    found = self._backwards[key] = self._make(specs, outputs, args, grads, saved)
        return found

    def _make(self, specs, outputs, args, grads, saved=()):
        jitfn = self.jitfn
        if self.kernel.vm_devices is not None or jitfn.heterogeneous:
            jitfn.warn_fallback("device blocks (`with bt.device(...)`)", None)
            return False
        variant = Variant(self.requires, outputs, kernel_gradients(jitfn.info), "backward" if saved else None)
        try:
            kernel = jitfn.backward_kernel(specs, variant, grads, saved)
        except NotDifferentiable as e:
            failed = e
        else:
            return kernel.runner(tuple(args) + tuple(saved) + tuple(grads))
        what = failed.what   # raised and warned outside the `except`: no internal exception chained
        if failed.kernel is not None:
            grad = kernels.gradient_of(failed.kernel)
            if grad is None:
                raise jitfn.not_differentiable(failed)
            what += f", whose gradient (the @bt.grad_for function '{grad.__name__}') runs eagerly"
        jitfn.warn_fallback(what, failed.node, (specs, variant))
        return False


def _as_tuple(results) -> tuple:
    return results if isinstance(results, tuple) else (results,)


class _Function(torch.autograd.Function):
    """The compiled forward, and its compiled backward (or torch autograd over the eager reference)."""

    @staticmethod
    def forward(ctx, call: Differentiable, *args):
        training = call.training_runner(args)
        if training is None:   # the backward recomputes the forward from the inputs
            results, saved = call.run(args), ()
        else:                  # the backward takes the small values the forward computed (row statistics)
            results, saved = training(args)
            saved = saved or ()
        ctx.call = call
        positions = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        ctx.positions = positions
        ctx.others = [None if isinstance(a, torch.Tensor) else a for a in args]
        ctx.nsaved = len(saved)
        ctx.save_for_backward(*(args[i] for i in positions), *saved)
        many = _as_tuple(results)
        ctx.outputs = tuple(isinstance(r, torch.Tensor) and is_float_dtype(str(r.dtype).removeprefix("torch."))
                            for r in many)
        ctx.many = isinstance(results, tuple)
        ctx.shapes = [(r.shape, r.dtype, r.device) if isinstance(r, torch.Tensor) else None for r in many]
        ctx.mark_non_differentiable(*(r for r, o in zip(many, ctx.outputs) if isinstance(r, torch.Tensor) and not o))
        return results

    @staticmethod
    def backward(ctx, *grads):
        call: Differentiable = ctx.call
        saved = ctx.saved_tensors
        args = list(ctx.others)
        for i, t in zip(ctx.positions, saved):
            args[i] = t
        values = saved[len(ctx.positions):]
        wanted = tuple(n for n in ctx.needs_input_grad[1:])
        if torch.is_grad_enabled():   # create_graph=True: a backward torch can differentiate again
            got = eager_vjp(call.jitfn, args, grads, ctx.outputs, wanted, create_graph=True)
            return (None,) + got
        grads_in = []
        for g, o, shape in zip(grads, ctx.outputs, ctx.shapes):
            if not o:
                continue
            if g is None:
                g = torch.zeros(shape[0], dtype=shape[1], device=shape[2])
            grads_in.append(g)
        run = call.backward_runner(args, ctx.outputs, grads_in, values)
        if run is False:
            return (None,) + eager_vjp(call.jitfn, args, grads, ctx.outputs, wanted, create_graph=False)
        got = run(tuple(args) + tuple(values) + tuple(grads_in))
        got = list(_as_tuple(got)) if sum(call.requires) > 1 else [got]
        out = []
        for r, w in zip(call.requires, wanted):
            value = got.pop(0) if r else None
            out.append(value if w else None)
        return (None,) + tuple(unaliased(out, grads_in))


def unaliased(results, others: list) -> list:
    """The results, each copied where it shares memory with one of `others` or an earlier result
    (None passes). The VM returns one buffer for two results that are one value (`x + y`'s two
    gradients) and may hand back an argument, while torch accumulates into `.grad` in place and a
    custom op's outputs must be new tensors."""
    seen = {t.untyped_storage().data_ptr() for t in others if t.numel()}
    out = []
    for r in results:
        if r is not None and r.numel():
            if r.untyped_storage().data_ptr() in seen:
                r = r.clone(memory_format=torch.contiguous_format)
            seen.add(r.untyped_storage().data_ptr())
        out.append(r)
    return out


def eager_vjp(jitfn, args, grads, outputs, wanted, create_graph: bool) -> tuple:
    """The gradients by torch autograd over the eager reference (recomputing the forward)."""
    with torch.enable_grad():
        inputs = []
        for a, w in zip(args, wanted):
            if isinstance(a, torch.Tensor) and not create_graph:
                a = a.detach().requires_grad_(w)
            inputs.append(a)
        results = _as_tuple(jitfn.eager(*inputs))
        pairs = [(r, g) for r, g, o in zip(results, grads, outputs)
                 if o and g is not None and isinstance(r, torch.Tensor) and r.requires_grad]
        differentiated = [a for a, w in zip(inputs, wanted) if w]
        if not pairs or not differentiated:
            return tuple(None for _ in args)
        got = torch.autograd.grad([r for r, _ in pairs], differentiated, [g for _, g in pairs],
                                  allow_unused=True, create_graph=create_graph)
    got = list(got)
    return tuple(got.pop(0) if w else None for w in wanted)
