# Chapter 21 - a second back end: Python loops straight to TensorIR
#
# Exercise 8 of the tutorial, solved on chapter 13 alone: this file holds that
# answer and nothing else. exercises/21_tir_backend.py is the same file with the answer
# taken out; `diff exercises/21_tir_backend.py chapters/21_tir_backend.py` shows it.
#
# What: `@jit(backend="tir")` swaps the code generator. Instead of Relax
# operations on whole tensors, `TIRCodeGenerator` turns loop-level Python
# into one TIR PrimFunc with TVM's TIR IRBuilder (`tvm.script.ir_builder.tirx`):
#   - each parameter is a buffer, `T.arg("a", T.buffer((4, 3), "float32"))`;
#   - `for i in range(n)` is a TIR loop, `with T.serial(0, n) as i:`;
#   - `c[i, j] = ...` is `T.buffer_store`, and `a[i, j]` in an expression a
#     load from a buffer;
#   - a scalar local (`acc = 0.0`) is a one-element buffer in "local" memory,
#     which TVMScript prints as `acc: T.float32`;
#   - `math.exp`, `math.sqrt`, `max` and `min` are TIR intrinsics.
# Results are written into parameters, destination-passing style, like the
# kernels of chapter 19; a call returns the parameters the function writes.
#
# Why: with Relax, the compiler decides the loops (LegalizeOps writes them,
# FuseTIR merges them, Dlight schedules them). Some computations are easier
# to say as loops: a row softmax that walks each row three times, a scan, a
# matmul with an explicit accumulator. With this back end, the loops you
# write are the loops that run, and the TIR they become reads almost like
# the Python. Nothing fuses and nothing is scheduled: the PrimFunc is built
# with LLVM as it is.
#
# The new code generator reuses chapter 06's error reporting (a SyntaxError
# at the user's line) and nothing else of the Relax one; it has its own
# symbol table of frames (a name first assigned inside a loop body belongs to
# that body, as chapter 16 does for branches) and `x += y` (as chapter 17),
# because its values are TIR expressions, not Relax ones.
# Types follow the buffers: a Python number takes the dtype of what it meets,
# integers meeting floats become floats, `/` divides as floats, `//` and `%`
# floor, as in Python. A scalar local keeps the dtype of its first value.
#
# This chapter's back end makes CPU code. For a GPU, loops must be bound to
# threads; the package's `backend="tir"` does that for loops written
# `for i in bt.parallel(n)`, and also has `if`, `while` and symbolic sizes.
#
# What to look at: the TIR of `matmul`, with `acc: T.float32` inside the
# (i, j) loops that TVMScript shows as `T.grid(4, 5)`; and `row_softmax`,
# three loops over each row in one PrimFunc.
#
# Run: python chapters/21_tir_backend.py
import ast
import builtins
import contextlib
import functools
import importlib
import inspect
import math
import operator

import torch
import tvm
from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import ir as I
from tvm.script.ir_builder import tirx as T

ch13 = importlib.import_module("13_fusion")
Tensor = ch13.Tensor
BACKENDS = ("relax", "tir")

ARITH = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
         ast.Div: tirx.Div, ast.FloorDiv: tirx.floordiv, ast.Mod: tirx.floormod, ast.Pow: tirx.pow}
PYTHON_ARITH = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
                ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod, ast.Pow: operator.pow}
INTRINSICS = {math.exp: tirx.exp, math.sqrt: tirx.sqrt, math.log: tirx.log, max: tirx.max, min: tirx.min}


class Local:
    """A scalar local variable: a one-element buffer."""

    def __init__(self, buffer, dtype):
        self.buffer, self.dtype = buffer, dtype


def dtype_of(expr):
    return str(expr.ty)


def is_expr(value):
    """A TIR scalar expression (a load, a loop index, arithmetic on them)."""
    return isinstance(value, tvm.ir.Expr) and isinstance(value.ty, tvm.ir.PrimType)


def is_buffer(value):
    return isinstance(value, tvm.ir.Var) and isinstance(value.ty, tirx.BufferType)


class Scope:
    """The symbol table as a stack of frames (as in chapter 16): a name first assigned inside a loop
    body lives in that body's frame and vanishes with it."""

    def __init__(self):
        self.frames = [{}]

    @contextlib.contextmanager
    def frame(self):
        self.frames.append({})
        try:
            yield self.frames[-1]
        finally:
            self.frames.pop()

    def __contains__(self, name):
        return any(name in frame for frame in self.frames)

    def __getitem__(self, name):
        for frame in reversed(self.frames):
            if name in frame:
                return frame[name]
        raise KeyError(name)

    def __setitem__(self, name, value):
        self.frames[-1][name] = value


class TIRCodeGenerator(ast.NodeVisitor):
    """Loop-level Python to one TIR PrimFunc: loops stay loops, subscripts are loads and stores."""
    error = ch13.JIT.CodeGenerator.error            # chapter 06: a SyntaxError at the user's line
    generic_visit = ch13.JIT.CodeGenerator.generic_visit

    def __init__(self, fn):
        self.fn = fn
        self.symbols = Scope()
        self.local_to = {}  # name -> the loop it was first assigned in (and dropped after)
        self.written = []   # the parameters the function stores into, in order

    # ---- statements --------------------------------------------------------------------------
    def visit_Module(self, node):
        with IRBuilder() as ib:
            self.ib = ib
            with I.ir_module():
                for stmt in node.body:
                    self.visit(stmt)
        return ib.get()

    def visit_FunctionDef(self, node):
        with T.prim_func():
            T.func_name(node.name)
            T.func_attr({"tirx.noalias": True})  # TVM 0.27 spelling (2024: "tir.noalias")
            annotations = inspect.get_annotations(self.fn, eval_str=True)
            for arg in node.args.args:
                if not isinstance(annotations.get(arg.arg), Tensor):
                    raise self.error(arg, f"parameter {arg.arg!r} needs a Tensor annotation (it is a buffer)")
                ann = annotations[arg.arg]
                self.symbols[arg.arg] = T.arg(arg.arg, T.buffer(ann.shape, ann.dtype))
            for stmt in node.body:
                self.visit(stmt)

    def visit_Expr(self, node):
        if not (isinstance(node.value, ast.Constant) and isinstance(node.value.value, str)):
            raise self.error(node, "an expression on its own does nothing here")

    def visit_Pass(self, node):
        pass

    def visit_AugAssign(self, node):
        # x += y is x = x + y
        if not isinstance(node.target, ast.Name):
            raise self.error(node, "only `name += value` is supported")
        load = ast.copy_location(ast.Name(node.target.id, ast.Load()), node.target)
        value = ast.copy_location(ast.BinOp(load, node.op, node.value), node)
        self.visit(ast.copy_location(ast.Assign([node.target], value), node))

    def file_line(self, node):
        return node.lineno + self.fn.__code__.co_firstlineno - 1

    def visit_Return(self, node):
        raise self.error(node, "the TIR back end writes its results into parameters: no `return`")

    def visit_For(self, node):
        call = node.iter
        if not (isinstance(node.target, ast.Name) and isinstance(call, ast.Call) and not node.orelse
                and isinstance(call.func, ast.Name) and call.func.id == "range" and 1 <= len(call.args) <= 2):
            raise self.error(node, "loops are `for name in range(stop)` or `range(start, stop)`")
        bounds = [self.visit(arg) for arg in call.args]
        start, stop = (0, *bounds) if len(bounds) == 1 else bounds
        with T.serial(start, stop) as index:
            self.ib.name(node.target.id, index)
            with self.symbols.frame() as frame:
                self.symbols[node.target.id] = index
                for stmt in node.body:
                    self.visit(stmt)
        for name, value in frame.items():
            if isinstance(value, Local):
                self.local_to[name] = f"the body of the loop on line {self.file_line(node)}"

    def visit_Assign(self, node):
        if len(node.targets) != 1:
            raise self.error(node, "assign one target at a time")
        target, value = node.targets[0], self.visit(node.value)
        if isinstance(target, ast.Subscript):  # c[i, j] = value: a store into a parameter
            buffer = self.visit(target.value)
            if not is_buffer(buffer):
                raise self.error(target, f"`{ast.unparse(target.value)}` is not a tensor parameter")
            T.buffer_store(buffer, self.as_dtype(target, value, str(buffer.ty.dtype)), self.indices(target))
            if target.value.id not in self.written:
                self.written.append(target.value.id)
        elif isinstance(target, ast.Name):  # a scalar local
            local = self.symbols[target.id] if target.id in self.symbols else None
            if local is None:
                dtype = dtype_of(value) if is_expr(value) else \
                    "float32" if type(value) is float else "int64"
                local = Local(self.ib.name(target.id, T.alloc_buffer((1,), dtype, scope="local")), dtype)
                self.symbols[target.id] = local
            elif not isinstance(local, Local):
                raise self.error(target, f"{target.id!r} is a parameter or a loop index: it cannot be assigned")
            T.buffer_store(local.buffer, self.as_dtype(node, value, local.dtype), [0])
        else:
            raise self.error(target, "assign to a name or to an element, `c[i, j] = ...`")

    # ---- expressions -------------------------------------------------------------------------
    def visit_Constant(self, node):
        if type(node.value) not in (bool, int, float):
            raise self.error(node, f"constant {node.value!r} is not a number")
        return node.value

    def visit_Name(self, node):
        if node.id not in self.symbols:
            where = self.local_to.get(node.id)
            raise self.error(node, f"name {node.id!r} is " + (f"only assigned in {where}, so it has no value here"
                                                              if where else "not defined"))
        value = self.symbols[node.id]
        return value.buffer[0] if isinstance(value, Local) else value

    def visit_Attribute(self, node):
        value = self.visit(node.value)
        if is_buffer(value) and node.attr == "shape":
            return tuple(int(d) for d in value.ty.shape)
        raise self.error(node, "only `tensor.shape` is supported")

    def visit_Subscript(self, node):
        value = self.visit(node.value)
        if isinstance(value, tuple):  # x.shape[0]
            return value[self.visit(node.slice)]
        if not is_buffer(value):
            raise self.error(node, f"`{ast.unparse(node.value)}` cannot be indexed")
        return value[tuple(self.indices(node))]

    def indices(self, node):
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        buffer = self.visit(node.value)
        if len(elts) != len(buffer.ty.shape):
            raise self.error(node, f"`{ast.unparse(node.value)}` has {len(buffer.ty.shape)} dimensions, "
                                   f"indexed with {len(elts)}")
        return [self.visit(e) for e in elts]

    def visit_BinOp(self, node):
        lhs, rhs = self.visit(node.left), self.visit(node.right)
        kind = type(node.op)
        if kind not in ARITH:
            raise self.error(node, f"operator {kind.__name__} is not supported here")
        if not is_expr(lhs) and not is_expr(rhs):
            return PYTHON_ARITH[kind](lhs, rhs)  # numbers fold
        lhs, rhs = self.common_dtype(node, lhs, rhs, float_only=kind in (ast.Div, ast.Pow))
        return ARITH[kind](lhs, rhs)

    def visit_UnaryOp(self, node):
        value = self.visit(node.operand)
        if isinstance(node.op, ast.USub):
            return -value
        raise self.error(node, "only unary `-` is supported here")

    def visit_Call(self, node):
        callee = self.callee(node.func)
        if callee not in INTRINSICS or node.keywords:
            raise self.error(node, f"cannot call `{ast.unparse(node.func)}`; the intrinsics here are "
                                   "math.exp, math.sqrt, math.log, max and min")
        args = [self.visit(arg) for arg in node.args]
        if callee in (max, min):
            if len(args) != 2:
                raise self.error(node, f"{callee.__name__}() takes two values here")
            return INTRINSICS[callee](*self.common_dtype(node, *args))
        (value,) = self.common_dtype(node, *args, float_only=True)
        return INTRINSICS[callee](value)

    def callee(self, func):
        if isinstance(func, ast.Name):
            return self.fn.__globals__.get(func.id, getattr(builtins, func.id, None))
        if isinstance(func, ast.Attribute):
            return getattr(self.callee(func.value), func.attr, None)
        return None

    # ---- dtypes ------------------------------------------------------------------------------
    def common_dtype(self, node, *values, float_only=False):
        """Values as TIR expressions of one dtype: floats win over integers, numbers adapt."""
        dtypes = [dtype_of(v) for v in values if is_expr(v)]
        dtypes += ["float32" for v in values if type(v) is float]
        floats = [d for d in dtypes if d.startswith("float")]
        dtype = floats[0] if floats else "float32" if float_only else dtypes[0] if dtypes else "int64"
        if len(set(floats)) > 1:
            raise self.error(node, f"mixed float dtypes {sorted(set(floats))}: convert one first")
        return [self.as_dtype(node, v, dtype) for v in values]

    def as_dtype(self, node, value, dtype):
        if not is_expr(value):
            return tirx.const(value, dtype)
        if dtype_of(value) == dtype:
            return value
        if dtype_of(value).startswith("float") and not dtype.startswith("float"):
            raise self.error(node, f"a {dtype_of(value)} value cannot be stored as {dtype} without losing its "
                                   "fraction: the variable's dtype comes from its first value")
        return value.astype(dtype)


class JIT(ch13.JIT):
    def __init__(self, fn, backend="relax", **options):
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, not {backend!r}")
        super().__init__(fn, **options)
        self.backend = backend
        self.written = None

    @classmethod
    def decorator(cls, fn=None, **options):
        if fn is None:
            return functools.partial(cls, **options)
        return cls(fn, **options)

    def codegen(self):
        if self.backend == "relax":
            return super().codegen()
        generator = TIRCodeGenerator(self.fn)
        mod = generator.visit(self.parse())
        self.written = generator.written
        return mod

    def compile(self):
        if self.backend == "relax":
            return super().compile()
        if self.target != "cpu":
            raise NotImplementedError("this chapter's TIR back end makes CPU loops (see the top of the file)")
        return tvm.compile(self.codegen(), target=self.tvm_target())

    def __call__(self, *args):
        if self.backend == "relax":
            return super().__call__(*args)
        kernel = self.executable[self.fn.__name__]  # a compiled PrimFunc: no VM, a plain function
        kernel(*(a.data for a in args))
        names = list(inspect.signature(self.fn).parameters)
        out = tuple(torch.from_dlpack(args[names.index(n)].data) for n in self.written)
        return out[0] if len(out) == 1 else out


jit = JIT.decorator


if __name__ == "__main__":

    @jit(backend="tir")
    def matmul(p: Tensor((4, 3), "float32"), q: Tensor((3, 5), "float32"), r: Tensor((4, 5), "float32")):
        for i in range(p.shape[0]):
            for j in range(q.shape[1]):
                acc = 0.0
                for k in range(p.shape[1]):
                    acc += p[i, k] * q[k, j]
                r[i, j] = acc

    print("matmul as TIR:")
    matmul_tir = matmul.codegen().script()
    print(matmul_tir)

    @jit(backend="tir")
    def row_softmax(x: Tensor((6, 10), "float32"), y: Tensor((6, 10), "float32")):
        for i in range(6):
            row_max = x[i, 0]
            for j in range(1, 10):
                row_max = max(row_max, x[i, j])
            total = 0.0
            for j in range(10):
                y[i, j] = math.exp(x[i, j] - row_max)
                total += y[i, j]
            for j in range(10):
                y[i, j] = y[i, j] / total

    print("\nrow_softmax as TIR:")
    print(row_softmax.codegen().script())

    @jit(backend="tir")
    def counts(a: Tensor((8,), "int32"), out: Tensor((8,), "float32")):
        for i in range(8):
            out[i] = a[i] // 3 + a[i] % 3 / 2   # integers floor; `/` divides as floats

    p, q, r = torch.rand(4, 3), torch.rand(3, 5), torch.empty(4, 5)
    product = matmul(Tensor.of(p), Tensor.of(q), Tensor.of(r))
    torch.testing.assert_close(product, p @ q)
    x = torch.randn(6, 10) * 4
    torch.testing.assert_close(row_softmax(Tensor.of(x), Tensor.of(torch.empty(6, 10))), torch.softmax(x, dim=1))
    a = torch.arange(-4, 4, dtype=torch.int32)
    torch.testing.assert_close(counts(Tensor.of(a), Tensor.of(torch.empty(8))), a // 3 + a % 3 / 2)
    print("\nmatmul, row_softmax and counts match torch; the results were written into r, y and out.")

    @jit(backend="tir")
    def leaks(v: Tensor((4,), "float32"), w: Tensor((4,), "float32")):
        for i in range(4):
            last = v[i]
        w[0] = last

    try:
        leaks.codegen()
        raise AssertionError("a local of a loop body should not be visible after the loop")
    except SyntaxError as err:
        print(f"\nrefused: {err.msg}")

    print("Checking: one PrimFunc with an accumulator, no Relax function, results written in place")
    mod = matmul.codegen()
    assert [type(f).__name__ for f in mod.functions.values()] == ["PrimFunc"]
    assert "acc: T.float32" in matmul_tir and "for k in range(3):" in matmul_tir
    assert product.data_ptr() == r.data_ptr()
