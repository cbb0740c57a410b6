"""@jit functions as torch custom operators (`f.as_torch_op()`, `bt.torch_op(f)`).

`torch.compile` and `torch.export` cannot trace into a @jit call (it runs TVM code on real memory),
so the function is registered with `torch.library.custom_op` as `torch.ops.babytriton.<name>`: one
node in their graphs. Three parts make it whole:
- the implementation: the compiled forward, on detached arguments (autograd is the op's own);
- the fake implementation, for tracing: the result shapes and dtypes, read from the Relax that code
  generation gives for the arguments' specs (no pipeline, no build), symbolic sizes mapped back to the
  tracer's; where code generation needs sizes the tracer keeps symbolic, the eager reference on the
  fake tensors gives them;
- the autograd formula: its backward is a second op, `<name>_backward`, which runs the compiled
  backward (autograd.py's, with its fallback to torch autograd over the eager reference), so the
  backward is one node of a compiled backward graph too.
Constexpr parameters are baked in: each set of values is an op of its own. Double backward
(`create_graph=True`) runs torch autograd over the eager reference, as a direct call's does.
A plain @jit call made while torch.compile or torch.export traces is the call of this op
(`call_in_graph`, made on first use): @jit functions work inside models as written.
"""
from __future__ import annotations

import ast
import contextlib
import hashlib
import inspect
import operator
import re
import threading

import torch
import torch.compiler as _compiler   # its `_is_compiling_flag`, read per @jit call (is_compiling() is slower)
from torch._subclasses.fake_tensor import unset_fake_temporarily
from tvm import tirx as tir

from . import autograd
from ..frontend.arguments import ArgSpec, Specialise, arg_spec
from ..codegen import mutation
from ..codegen.relax import RelaxCodeGen
from ..core.errors import CompilationError
from ..frontend.function import Decorated
from ..core.types import DTYPES, SCALAR_TYPES, TORCH_TO_NAME, is_float_dtype

NAMESPACE = "babytriton"
SCHEMA_SCALARS = {bool: "bool", int: "int", float: "float"}
_PYTHON = {"Tensor": None, "bool": bool, "int": int, "float": float}   # a schema scalar's Python type

_lock = threading.Lock()
_ops: dict[str, "TorchOp"] = {}   # registered op name -> its TorchOp (torch.library keeps names for the process)


def torch_op(fn, name: str | None = None, *, results: int | None = None, **constexprs):
    """`bt.torch_op(f, ...)`, the same as `f.as_torch_op(...)`: a @jit function as the torch custom
    operator `torch.ops.babytriton.<name>`."""
    if not isinstance(fn, Decorated) or not hasattr(fn, "as_torch_op"):
        raise TypeError(f"bt.torch_op() takes a @bt.jit function, got {type(fn).__name__}")
    return register(fn, name, results, constexprs)


def register(jitfn, name: str | None = None, results: int | None = None, constexprs: dict | None = None):
    """The torch op of `jitfn` for these constexpr values: `torch.ops.babytriton.<name>` (registered
    once per process; asking again with the same function and values gives the same op)."""
    constexprs = dict(constexprs or {})
    info = jitfn.info
    if jitfn.options["backend"] == "tir":
        raise TypeError(f"{info.name}(): backend='tir' functions write their results into their arguments; "
                        "a torch op of one would mutate its inputs: compile it with backend='relax'")
    if jitfn.heterogeneous:
        raise TypeError(f"{info.name}(): functions with device blocks (`with bt.device(...)`) cannot be torch "
                        "ops: an op's results live on one device")
    written = [p.name for p in info.params if p.name in mutation.updated_roots(info.parsed.tree.body)]
    if written:
        raise TypeError(f"{info.name}() updates its parameter(s) {', '.join(written)} in place; a torch op of it "
                        "would hide those writes from torch.compile and torch.export: call it outside the compiled "
                        "region (as an optimizer step is), or return the new values instead")
    values = _constexpr_values(info, constexprs)
    if results is not None and (not isinstance(results, int) or isinstance(results, bool) or results < 1):
        raise ValueError(f"results is the number of tensors {info.name}() returns (an int >= 1), got {results!r}")
    given = name is not None
    if given and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"torch op name {name!r} is not a valid identifier")
    base = name if given else _default_name(jitfn.fn, values)
    with _lock:
        candidate, n = base, 1
        while candidate in _ops:
            found = _ops[candidate]
            if found.jitfn is jitfn and found.values == values:
                if results is not None and results != found.results:
                    raise ValueError(f"torch op {NAMESPACE}::{candidate} of {info.name}() is registered with "
                                     f"{found.results} results, not {results}")
                return found.packet
            if given:
                raise ValueError(f"the torch op name {NAMESPACE}::{candidate} is taken (by "
                                 f"{found.jitfn.__name__}()); choose another name")
            n += 1
            candidate = f"{base}_{n}"
        count = _count_results(info) if results is None else results
        if count == 0:
            raise TypeError(f"{info.name}() returns nothing: a torch op of it would compute nothing (its tensors "
                            "are values, never written)")
        op = TorchOp(jitfn, candidate, values, count)
        _ops[candidate] = op
        return op.packet


def _dynamo_constant(fn):
    """Mark `fn` as `torch._dynamo.assume_constant_result` does (the same attribute, without importing
    dynamo, slow to import): dynamo calls it while tracing and keeps its result as a constant."""
    fn._dynamo_marked_constant = True
    return fn


_direct = threading.local()   # `.on`: this thread runs an op's implementation (its @jit call is real)


@_dynamo_constant
def tracing() -> bool:
    """Whether torch.compile or torch.export is tracing this call (dynamo folds it to a constant), so
    that a @jit call becomes its torch op: dynamo cannot trace into the compiled call."""
    return _compiler._is_compiling_flag and not getattr(_direct, "on", False)


def call_in_graph(jitfn, args: tuple, kwargs: dict):
    """A @jit call while torch.compile or torch.export traces: the call of the function's torch op (made
    on first use, as `as_torch_op` makes it), one node of their graph; constexpr values are baked into
    the op, the other arguments are its own. Dynamo traces this (the two look-ups are constants to it)."""
    plan = _call_plan(jitfn, len(args), tuple(kwargs))
    baked = []
    for name, constexpr, where in plan:
        if constexpr and where is not None:
            value = args[where] if isinstance(where, int) else kwargs[where]
            if isinstance(value, (int, torch.SymInt)) and not isinstance(value, bool):
                # a size the tracer keeps symbolic, given as a constexpr: specialized (torch guards on it
                # and compiles again for another value); a Python int stays itself
                value = operator.index(value)
            baked.append((name, value))
    op = getattr(getattr(torch.ops, NAMESPACE), _op_for(jitfn, tuple(baked)))
    given, named, gap = [], {}, False   # in order; by name after an argument left to its default
    for name, constexpr, where in plan:
        if constexpr:
            continue
        if where is None:
            gap = True
        elif gap:
            named[name] = args[where] if isinstance(where, int) else kwargs[where]
        else:
            given.append(args[where] if isinstance(where, int) else kwargs[where])
    return op(*given, **named)


class _Given:
    """Where a call passed an argument: its position, or its keyword."""

    def __init__(self, where):
        self.where = where


@_dynamo_constant
def _call_plan(jitfn, count: int, keywords: tuple) -> tuple:
    """Per parameter of a call with `count` positional arguments and these keywords: (name, whether a
    constexpr, the position or keyword that gives it, None when its default does); the call's
    argument errors are the direct call's."""
    bound = jitfn.info.bind(tuple(_Given(i) for i in range(count)), {k: _Given(k) for k in keywords})
    return tuple((p.name, p.kind == "constexpr", b.where if isinstance(b, _Given) else None)
                 for p, b in zip(jitfn.info.params, bound))


@_dynamo_constant
def _op_for(jitfn, baked: tuple):
    """The name of the torch op of `jitfn` with these constexpr values (`as_torch_op(**baked)`), made once
    (a name: dynamo keeps a string as a constant, and finds the op by it as it finds any torch.ops one)."""
    try:
        return register(jitfn, None, None, dict(baked))._qualified_op_name.split("::")[1]
    except (TypeError, ValueError) as e:
        raise type(e)(f"{e} (a @jit function called inside torch.compile or torch.export runs as its torch "
                      "op, as_torch_op())") from None


def _constexpr_values(info, constexprs: dict) -> tuple:
    """Per parameter: the baked-in value of a constexpr, `_RUNTIME` for the op's own arguments."""
    for key in constexprs:
        param = next((p for p in info.params if p.name == key), None)
        if param is None:
            raise TypeError(f"{info.name}() has no parameter {key!r} (constexpr values are given by name)")
        if param.kind != "constexpr":
            raise TypeError(f"{info.name}(): parameter {key!r} is not bt.constexpr; only constexpr values are baked "
                            "into a torch op (the others are its arguments)")
    values = []
    for p in info.params:
        if p.kind != "constexpr":
            values.append(_RUNTIME)
            continue
        if p.name in constexprs:
            value = constexprs[p.name]
        elif p.default is not inspect.Parameter.empty:
            value = p.default
        else:
            raise TypeError(f"{info.name}(): constexpr parameter '{p.name}' needs a value to make a torch op: "
                            f"as_torch_op({p.name}=...); each set of constexpr values is an op of its own")
        arg_spec(p, value, info.name)   # hashable, as a call's constexpr must be
        values.append(value)
    return tuple(values)


class _Runtime:
    def __repr__(self):
        return "<argument>"


_RUNTIME = _Runtime()


def _default_name(fn, values: tuple) -> str:
    """`module_qualname`, made an identifier; with constexprs, a digest of their values appended."""
    name = re.sub(r"[^0-9A-Za-z]+", "_", f"{fn.__module__}.{fn.__qualname__}").strip("_")
    if not name or name[0].isdigit():
        name = "f_" + name
    baked = [repr(v) for v in values if v is not _RUNTIME]
    if baked:
        name += "_c" + hashlib.sha1(", ".join(baked).encode()).hexdigest()[:8]
    return name


def _count_results(info) -> int:
    """How many tensors the function returns, read from its `return` statements: a tuple display gives
    its length, anything else one (`results=` says otherwise; a wrong count is an error when it runs)."""
    counts = set()
    for node in _returns(info.parsed.tree):
        if node.value is None or (isinstance(node.value, ast.Constant) and node.value.value is None):
            counts.add(0)
        elif isinstance(node.value, ast.Tuple):
            counts.add(len(node.value.elts))
        else:
            counts.add(1)
    if len(counts) > 1:
        shown = " or ".join(map(str, sorted(counts)))
        raise info.parsed.source_map.error(info.parsed.tree, f"{info.name}() returns {shown} results in different "
                                           "places; a torch op has one result count: pass results=<count>")
    return counts.pop() if counts else 0


def _returns(tree):
    todo = list(tree.body)
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Return):
            yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))


class TorchOp:
    """One registered op: the forward `<name>` and its backward `<name>_backward`."""

    def __init__(self, jitfn, name: str, values: tuple, results: int):
        self.jitfn, self.name, self.values, self.results = jitfn, name, values, results
        info = jitfn.info
        self.params = [p for p, v in zip(info.params, values) if v is _RUNTIME]
        self.types = [self._schema_type(p) for p in self.params]
        self.tensors = [t == "Tensor" for t in self.types]
        it = iter(self.types)
        self._all_types = [next(it) if v is _RUNTIME else None for v in values]   # None: a constexpr
        self._relax: dict = {}        # fake specs -> the generated Relax function's return type
        self._calls: dict = {}        # (specs, requires) -> autograd.Differentiable (its compiled backwards)
        args = ", ".join(self._schema_arg(p, t) for p, t in zip(self.params, self.types))
        rets = "Tensor" if results == 1 else "(" + ", ".join(["Tensor"] * results) + ")"
        qualified = f"{NAMESPACE}::{name}"
        self.forward = torch.library.custom_op(qualified, self._impl, mutates_args=(),
                                               schema=f"({args}) -> {rets}")
        self.forward.register_fake(self._fake)
        plain = ", ".join(f"{t} {p.name}" for p, t in zip(self.params, self.types))
        self.backward = torch.library.custom_op(
            f"{qualified}_backward", self._backward_impl, mutates_args=(),
            schema=f"({plain}{', ' if plain else ''}Tensor[] grads, bool[] outputs, bool[] requires) -> Tensor[]")
        self.backward.register_fake(self._backward_fake)
        self.forward.register_autograd(self._backward, setup_context=self._setup_context)
        self.packet = getattr(getattr(torch.ops, NAMESPACE), name)

    # -- schema -----------------------------------------------------------------------------------
    def _schema_type(self, p) -> str:
        """Tensor parameters (annotated or not) are Tensors, run-time scalars float/int/bool; an
        unannotated parameter with a number as default is a scalar of that type."""
        if p.kind == "scalar":
            return SCHEMA_SCALARS[p.annotation]
        if p.kind == "tensor":
            if p.default is not inspect.Parameter.empty:
                raise TypeError(f"{self.jitfn.__name__}(): parameter '{p.name}' is a tensor with a default; a torch "
                                "op's tensor arguments have none")
            return "Tensor"
        if p.default is inspect.Parameter.empty:
            return "Tensor"
        if type(p.default) in SCHEMA_SCALARS:
            return SCHEMA_SCALARS[type(p.default)]
        raise TypeError(f"{self.jitfn.__name__}(): parameter '{p.name}' has the default {p.default!r}; a torch op "
                        "takes tensors and int/float/bool scalars: annotate it, or make it bt.constexpr")

    @staticmethod
    def _schema_arg(p, kind: str) -> str:
        if kind == "Tensor" or p.default is inspect.Parameter.empty:
            return f"{kind} {p.name}"
        return f"{kind} {p.name}={p.default!r}"

    def _full(self, args) -> list:
        """The op's arguments with the baked-in constexprs, in the function's parameter order (the
        dispatcher leaves out trailing arguments equal to their defaults: put back)."""
        it = iter(tuple(args) + tuple(p.default for p in self.params[len(args):]))
        return [next(it) if v is _RUNTIME else v for v in self.values]

    def _real(self, args, detach: bool = True) -> list:
        """`_full` for running: tensors detached (the op's autograd is its own), each scalar the Python
        type its schema says (an int passed for a float must not compile as an int)."""
        return [(a.detach() if detach else a) if isinstance(a, torch.Tensor) else a if t is None else _PYTHON[t](a)
                for a, t in zip(self._full(args), self._all_types)]

    def _requires(self, needs) -> tuple[bool, ...]:
        """Per function parameter: differentiated (a floating-point tensor whose gradient is needed)."""
        it = iter(needs)
        return tuple(False if v is not _RUNTIME else bool(next(it)) for v in self.values)

    # -- forward ----------------------------------------------------------------------------------
    def _impl(self, *args):
        """The op's implementation: the direct @jit call on the detached arguments."""
        full = self._real(args)
        with _running():
            results = self._check_results(self.jitfn(*full))
        return self._unpack(autograd.unaliased(results, [a for a in full if isinstance(a, torch.Tensor)]))

    def _check_results(self, results) -> tuple:
        many = () if results is None else results if isinstance(results, tuple) else (results,)
        if len(many) != self.results or not all(isinstance(r, torch.Tensor) for r in many):
            got = ", ".join(type(r).__name__ for r in many) or "nothing"
            raise TypeError(f"torch op {NAMESPACE}::{self.name}: {self.jitfn.__name__}() returned {got}, but the op "
                            f"was made for {self.results} tensor result(s); pass results=<count> to as_torch_op()")
        return many

    def _fake(self, *args):
        """The results' shapes and dtypes, without running: from the Relax function's return type."""
        full = self._full(args)
        specs, sizes = self._fake_specs(full)
        device = next((a.device for a in full if isinstance(a, torch.Tensor)), torch.device(self.jitfn.info.device_kind))
        try:
            ret = self._relax.get(specs)
            if ret is None:
                info = self.jitfn.info
                named = dict(zip((p.name for p in info.params), specs))
                with unset_fake_temporarily():   # code generation may make torch tensors of its own
                    mod = RelaxCodeGen(info.parsed, named, info.codegen_options).build()
                ret = self._relax[specs] = mod[info.name].ret_ty
        except Specialise:   # ints the code needs at compile time (the op's calls specialise them)
            return self._fake_by_eager(full)
        except CompilationError:
            if not sizes:
                raise
            # Code that needs static sizes where the tracer keeps them symbolic: the eager
            # reference runs on the fake tensors (torch guards the sizes it reads).
            return self._fake_by_eager(full)
        fields = list(ret.fields) if hasattr(ret, "fields") else [ret]
        if sizes and len(fields) == self.results and not _mapped(fields, sizes):
            # Symbolic sizes the Relax cannot relate: torch.export gives each input's size its own
            # symbol even where one Dim is shared (the equality is checked after tracing), so
            # `(s0, n, k) @ (s1, k, m)` has no known shape. The eager reference on the fake tensors
            # gives it, and torch's own checks record the equalities the code needs (s1 == s0).
            return self._fake_by_eager(full)
        if len(fields) != self.results or any(getattr(f, "shape", None) is None for f in fields):
            got = f"{len(fields)} results" if hasattr(ret, "fields") else "one result"
            raise TypeError(f"torch op {NAMESPACE}::{self.name}: {self.jitfn.__name__}() returns {got} here (tensors of "
                            f"known rank?), but the op was made for {self.results} tensor result(s); pass "
                            "results=<count> to as_torch_op()")
        out = [torch.empty([_size(e, sizes) for e in f.shape.values], dtype=DTYPES[str(f.dtype)], device=device)
               for f in fields]
        return self._unpack(out)

    def _fake_by_eager(self, full):
        """The fake results by running the eager reference on the fake tensors (torch guards the sizes
        it reads): where the Relax return type cannot say the results' symbolic shapes."""
        return self._unpack([torch.empty_like(r, memory_format=torch.contiguous_format)
                             for r in self._check_results(self.jitfn.eager(*full))])

    def _unpack(self, results: list):
        if self.results == 1:
            return results[0]
        return tuple(results)

    def _fake_specs(self, full) -> tuple[tuple[ArgSpec, ...], dict]:
        """Specs of fake arguments: static sizes as ints; each distinct symbolic size expression named
        (sizes the tracer knows equal share one), so that the Relax return type can be mapped back."""
        specs, sizes, names = [], {}, {}
        for p, value in zip(self.jitfn.info.params, full):
            if p.kind == "constexpr":
                specs.append(ArgSpec("constexpr", value=value))
            elif not isinstance(value, torch.Tensor):
                specs.append(ArgSpec("scalar", dtype=SCALAR_TYPES[p.annotation if p.kind == "scalar" else type(p.default)]))
            else:
                shape = []
                for d in value.shape:
                    if isinstance(d, int):
                        shape.append(d)
                        continue
                    # one name per distinct expression, numbered in order of appearance (a name made of
                    # the expression's text would give `s0 + 1` and `s0 - 1` one name)
                    name = names.setdefault(d.node.expr, f"s_{len(names)}")
                    sizes[name] = d
                    shape.append(name)
                hint = [d if isinstance(d, int) else 1 for d in shape]
                # rank and dtype as a call checks them (symbolic sizes as 1)
                arg_spec(p, torch.empty(hint, dtype=value.dtype, device="meta"), self.jitfn.__name__)
                specs.append(ArgSpec("tensor", shape=tuple(shape), dtype=TORCH_TO_NAME[value.dtype]))
        return tuple(specs), sizes

    # -- backward ---------------------------------------------------------------------------------
    def _setup_context(self, ctx, inputs, output):
        ctx.save_for_backward(*(a for a in inputs if isinstance(a, torch.Tensor)))
        ctx.scalars = [None if isinstance(a, torch.Tensor) else a for a in inputs]
        results = output if isinstance(output, tuple) else (output,)
        ctx.outputs = [is_float_dtype(str(r.dtype).removeprefix("torch.")) for r in results]
        ctx.mark_non_differentiable(*(r for r, o in zip(results, ctx.outputs) if not o))

    def _backward(self, ctx, *grads):
        saved = iter(ctx.saved_tensors)
        args = [next(saved) if a is None else a for a in ctx.scalars]
        needs = [bool(n) and t and args[i].is_floating_point()
                 for i, (n, t) in enumerate(zip(ctx.needs_input_grad, self.tensors))]
        if not any(needs):
            return tuple(None for _ in args)
        if torch.is_grad_enabled():   # create_graph=True: a backward torch can differentiate again
            full = self._real(args, detach=False)
            got = autograd.eager_vjp(self.jitfn, full, grads, tuple(ctx.outputs), self._requires(needs), True)
            return tuple(g for g, v in zip(got, self.values) if v is _RUNTIME)
        grads = [g for g, o in zip(grads, ctx.outputs) if o]
        got = iter(self.backward(*args, grads, list(ctx.outputs), needs))
        return tuple(next(got) if n else None for n in needs)

    def _backward_impl(self, *args):
        """The backward op's implementation: its @jit calls are real ones (see `_running`)."""
        with _running():
            return self._run_backward(*args)

    def _run_backward(self, *args):
        """The compiled backward (or the fallback's torch autograd) for the differentiated inputs."""
        *args, grads, outputs, needs = args
        full = self._real(args)
        requires = self._requires(needs)
        grads = [g.detach() for g in grads]
        specs = self.jitfn.info.specs(full)
        call = self._calls.get((specs, requires))
        if call is None:
            call = self._calls[(specs, requires)] = autograd.Differentiable(
                self.jitfn, self.jitfn.compile(*full), None, specs, requires)
        outputs = tuple(outputs)
        run = call.backward_runner(full, outputs, grads)
        if run is False:
            it = iter(grads)
            every = [next(it) if o else None for o in outputs]
            with _autograd_on():
                got = autograd.eager_vjp(self.jitfn, full, every, outputs, requires, False)
            # an input the results don't depend on: torch says None, the op's Tensor[] says zeros
            got = [torch.zeros_like(a) if g is None else g for a, g, r in zip(full, got, requires) if r]
        else:
            got = run(tuple(full) + tuple(grads))
            got = list(got) if sum(requires) > 1 else [got]
        tensors = [a for a in full if isinstance(a, torch.Tensor)] + grads
        return autograd.unaliased(got, tensors)

    def _backward_fake(self, *args):
        *args, grads, outputs, needs = args
        tensors = [a for a, t in zip(args, self.tensors) if t]
        return [torch.empty_like(a, memory_format=torch.contiguous_format) for a, n in zip(tensors, needs) if n]


@contextlib.contextmanager
def _running():
    """An op's implementation runs: @jit calls in it are real calls (not the op again), even while a
    compile elsewhere in the process has torch.compiler.is_compiling() on."""
    outer = getattr(_direct, "on", False)
    _direct.on = True
    try:
        yield
    finally:
        _direct.on = outer


def _autograd_on():
    """Torch autograd back inside an op's implementation, which runs below the autograd dispatch keys
    (else the eager reference's results record no graph, and its gradients come out as None)."""
    exclude = torch._C._dispatch_tls_local_exclude_set().remove(torch._C.DispatchKey.AutogradFunctionality)
    return torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), exclude)


def _mapped(fields, sizes: dict) -> bool:
    """Whether every result has a known shape whose sizes are over the fake specs' size names only
    (a size Relax made up, e.g. of a match_cast, has no tracer size to map back to)."""
    for f in fields:
        if getattr(f, "shape", None) is None:
            return False
        for e in f.shape.values:
            if any(v.name not in sizes for v in tir.analysis.undefined_vars(e)):
                return False
    return True


def _size(expr, sizes: dict):
    """A Relax shape expression over the fake specs' size names, evaluated with the tracer's sizes."""
    if isinstance(expr, tir.IntImm):
        return int(expr.value)
    if isinstance(expr, tir.Var):
        return sizes[expr.name]
    binary = {tir.Add: lambda a, b: a + b, tir.Sub: lambda a, b: a - b, tir.Mul: lambda a, b: a * b,
              tir.FloorDiv: lambda a, b: a // b, tir.FloorMod: lambda a, b: a % b,
              tir.Max: lambda a, b: torch.sym_max(a, b), tir.Min: lambda a, b: torch.sym_min(a, b)}
    for kind, fn in binary.items():
        if isinstance(expr, kind):
            return fn(_size(expr.a, sizes), _size(expr.b, sizes))
    if isinstance(expr, tir.Cast):
        return _size(expr.value, sizes)
    raise TypeError(f"babytriton: a result size, {expr}, has a form the torch op's fake implementation cannot "
                    "evaluate")
