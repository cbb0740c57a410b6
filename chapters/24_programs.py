# Chapter 24 - a grid of programs: a block kernel as one TIR PrimFunc
#
# After the exercises, on chapter 21 (the TIR back end): from whole tensors to
# blocks, Triton's way of writing a kernel.
#
# Exercise 11, the course's own, solved on chapter 21: exercises/24_programs.py
# is this file with the answer (the language's rules and the loops they make)
# taken out; `diff exercises/24_programs.py chapters/24_programs.py` shows it.
#
# What: a block kernel is written for ONE program, a block of the work:
#     pid = program_id(0)                    # which program am I
#     offs = pid * BLOCK + arange(0, BLOCK)  # the BLOCK elements I own
#     mask = offs < n                        # the last program may run past n
#     store(out + offs, load(x + offs, mask=mask) * 2.0, mask=mask)
# and launched over a grid of programs, `double[(cdiv(n, BLOCK),)](x, out, n,
# BLOCK=128)`. `BLOCK: constexpr` is known when compiling, so a block has a
# static shape; `n` is a run-time int32. A tensor argument is a pointer: `x +
# offs` is a block of addresses, `load` reads them where the mask is true
# (`other` elsewhere) and `store` writes them where it is true.
# `BlockCodeGenerator` (chapter 21's generator, with new values) turns the
# kernel into one PrimFunc:
#   - the grid is a loop over programs: `T.parallel` on the CPU (one task per
#     program; a second axis of the grid is a serial loop inside it),
#     `blockIdx.x` on a GPU; its size is a parameter, `grid0`;
#   - a block value is not computed when it is assigned. It is a `Block`: a
#     shape and a rule giving its element at an index as a TIR expression
#     (`arange(0, B)` at i is i; `a + b` at i is a's element plus b's). Each
#     `store` is where the block becomes a loop: one loop over the block
#     (vectorised on the CPU, `threadIdx.x` on a GPU) in which every value
#     the store needs is inlined, so elementwise code fuses by construction;
#   - a mask is a predicate: `if offs < n:` around the store, and
#     `T.if_then_else(mask, x[...], other)` in a load, which reads memory only
#     where the mask holds.
# The kernel is compiled once per kind of argument (dtypes, which are ints and
# floats, constexpr values), not per size: sizes and the grid are parameters.
#
# Why: a whole-tensor compiler decides how work is split; a block kernel says
# it. The kernel author picks BLOCK, the grid, and what a program keeps
# together, and the compiler's job shrinks to mapping programs and blocks onto
# the hardware. Because a load is inlined where its value is used, a value used
# twice is read twice, and a value loaded before a store to the same place is
# read after it (chapter 25 keeps the values that must be kept).
#
# babytriton/triton/ is the full version: Triton's own `tl` names, strides,
# far more of the language, an interpreter, scheduled GPU kernels.
#
# What to look at: the PrimFunc of `double`: `for pid in T.parallel(grid0)`,
# inside it one vectorised loop over the block, guarded by `if pid0 * 128 + i
# < n`; a run at a ragged size (1000 = 7 full blocks and one of 104) equal to
# torch; then the CUDA source of the same kernel for sm_90, with `blockIdx.x`
# and `threadIdx.x` where the loops were (run and compared on a GPU, if any).
#
# Run: python chapters/24_programs.py
import ast
import importlib
import inspect
import operator

import torch
import tvm
from tvm import tirx
from tvm.script.ir_builder import tirx as T

ch21 = importlib.import_module("21_tir_backend")
dtype_of, is_expr = ch21.dtype_of, ch21.is_expr
COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge}
GPU_AXES = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
ZERO = tirx.const(0, "int32")


class constexpr:
    """The annotation of a parameter known when compiling (a block size): passed as a keyword."""


# The language: a kernel calls these names, and the code generator reads each call as a rule
# (`LANGUAGE` below); their bodies run only if called outside a kernel.
def program_id(axis):
    raise RuntimeError("program_id() is for kernels compiled by @jit")


def arange(start, stop):
    raise RuntimeError("arange() is for kernels compiled by @jit")


def load(pointer, mask=None, other=0):
    raise RuntimeError("load() is for kernels compiled by @jit")


def store(pointer, value, mask=None):
    raise RuntimeError("store() is for kernels compiled by @jit")


def cdiv(a, b):
    """Programs needed to cover `a` elements, `b` at a time: for the grid, on the host."""
    return (a + b - 1) // b


class Block:
    """A block value: a static shape and `at(index)`, the TIR expression of its element at an index."""

    def __init__(self, shape, at):
        self.shape, self.at = tuple(shape), at
        self.dtype = dtype_of(at((ZERO,) * len(self.shape)))


class Pointer:
    """A tensor argument moved by an offset in elements: a scalar, or a Block of offsets."""

    def __init__(self, buffer, offset=ZERO):
        self.buffer, self.offset = buffer, offset


def element(value, index):
    """`value` at `index` of a block it is broadcast to (numpy's rule: aligned from the right, a dimension
    of size 1 is read at 0); a scalar is the same everywhere."""
    if not isinstance(value, Block):
        return value
    index = index[len(index) - len(value.shape):]
    return value.at(tuple(ZERO if size == 1 else i for size, i in zip(value.shape, index)))


# the language's functions -> the code generator's method for a call of each
LANGUAGE = {program_id: "program_id", arange: "arange", load: "load", store: "store"}


class BlockCodeGenerator(ch21.TIRCodeGenerator):
    """A block kernel, written for one program, to one PrimFunc looping over the grid's programs."""
    language = LANGUAGE
    grid_queries = (program_id,)  # the functions whose argument is an axis of the grid

    def __init__(self, fn, arguments, gpu):
        super().__init__(fn)
        self.arguments, self.gpu = arguments, gpu  # parameter name -> torch tensor, number or constexpr value
        self.programs = ()  # the program loop's variables, one per grid axis
        self.extents = []   # the grid's sizes, parameters grid0, grid1, ...

    def visit_FunctionDef(self, node):
        with T.prim_func():
            T.func_name(node.name)
            T.func_attr({"tirx.noalias": True})
            constants = constexprs(self.fn)
            for name, value in self.arguments.items():
                self.symbols[name] = value if name in constants else self.parameter(node, name, value)
            self.extents = [T.arg(f"grid{axis}", T.int32()) for axis in range(self.grid_rank(node))]
            self.program_loops(node, self.extents)

    def parameter(self, node, name, value):
        """A tensor is a flat buffer (a pointer to its first element); a Python int or float a scalar."""
        if isinstance(value, torch.Tensor):
            size = tirx.Var(f"{name}_size", "int64")  # a size variable: one compilation for every size
            return Pointer(T.arg(name, T.buffer((size,), str(value.dtype).removeprefix("torch."))))
        if type(value) in (int, float):
            return T.arg(name, T.int32() if type(value) is int else T.float32())
        raise self.error(node, f"argument {name!r} is a {type(value).__name__}: pass a tensor, an int or a float")

    def grid_rank(self, node):
        """How many axes the grid has: one more than the highest axis the kernel asks about."""
        axes = [call.args[0].value for call in ast.walk(node) if isinstance(call, ast.Call) and call.args
                and self.callee(call.func) in self.grid_queries and isinstance(call.args[0], ast.Constant)]
        return max(axes, default=0) + 1

    def program_loops(self, node, extents):
        """The grid: nested loops over the programs, parallel CPU tasks or blockIdx on a GPU."""
        if len(self.programs) == len(extents):
            for stmt in node.body:
                self.visit(stmt)
            return
        axis = len(self.programs)  # (TVM's CPU thread pool runs one level of parallel loops: the outermost)
        loop = (T.thread_binding(0, extents[axis], GPU_AXES[axis]) if self.gpu else
                T.parallel(0, extents[axis]) if axis == 0 else T.serial(0, extents[axis]))
        with loop as pid:
            self.ib.name(f"pid{axis}", pid)
            self.programs += (pid,)
            self.program_loops(node, extents)

    def block_loops(self, shape):
        """Loops over a block's elements, yielding the index: the block's last axis vectorised on the CPU,
        threadIdx.x on a GPU, the axes before it serial."""
        def nest(done):
            axis = len(done)
            if axis == len(shape):
                yield done
                return
            last = axis == len(shape) - 1
            loop = (T.thread_binding(0, shape[axis], "threadIdx.x") if self.gpu and last else
                    T.vectorized(0, shape[axis]) if last else T.serial(0, shape[axis]))
            with loop as i:
                self.ib.name("ijk"[axis], i)
                yield from nest(done + (i,))
        return nest(())

    # ---- values ------------------------------------------------------------------------------
    def visit_Assign(self, node):
        if len(node.targets) != 1 or not isinstance(node.targets[0], ast.Name):
            raise self.error(node, "assign to one name: a block value is named, not stored (use store)")
        self.symbols[node.targets[0].id] = self.visit(node.value)

    def visit_Expr(self, node):
        if isinstance(node.value, ast.Call) and self.callee(node.value.func) is store:
            self.visit(node.value)
        else:
            super().visit_Expr(node)

    def visit_BinOp(self, node):
        lhs, rhs = self.visit(node.left), self.visit(node.right)
        if isinstance(lhs, Pointer) or isinstance(rhs, Pointer):
            if not (isinstance(lhs, Pointer) and isinstance(node.op, ast.Add)):
                raise self.error(node, "a pointer moves by `pointer + offsets`, nothing else")
            return Pointer(lhs.buffer, self.combine(node, operator.add, lhs.offset, rhs))
        if type(node.op) not in ch21.ARITH:
            raise self.error(node, f"operator {type(node.op).__name__} is not supported here")
        return self.combine(node, ch21.ARITH[type(node.op)], lhs, rhs, python=ch21.PYTHON_ARITH[type(node.op)],
                            float_only=isinstance(node.op, (ast.Div, ast.Pow)))

    def visit_Compare(self, node):
        if len(node.ops) != 1 or type(node.ops[0]) not in COMPARE:
            raise self.error(node, "compare two values with <, <=, > or >=")
        op = COMPARE[type(node.ops[0])]
        return self.combine(node, op, self.visit(node.left), self.visit(node.comparators[0]), python=op)

    def combine(self, node, op, *values, python=None, float_only=False, unify=True):
        """`op` elementwise, on values of one dtype (unless `unify` is False): numbers fold, scalars stay
        scalars, and with a block among them the result is a block of their broadcast shape."""
        if python and not any(is_expr(v) or isinstance(v, Block) for v in values):
            return python(*values)

        def apply(*elements):
            return op(*self.common_dtype(node, *elements, float_only=float_only)) if unify else op(*elements)
        shape = self.shape_of(node, *values)
        if shape is None:
            return apply(*values)
        return Block(shape, lambda index: apply(*(element(v, index) for v in values)))

    def shape_of(self, node, *values):
        """The shape the blocks among `values` broadcast to (numpy's rule); None without a block."""
        shapes = [v.shape for v in values if isinstance(v, Block)]
        try:
            return tuple(torch.broadcast_shapes(*shapes)) if shapes else None
        except RuntimeError:
            raise self.error(node, f"blocks of shapes {' and '.join(map(str, shapes))} do not broadcast") from None

    # ---- the language ------------------------------------------------------------------------
    def visit_Call(self, node):
        name = self.language.get(self.callee(node.func))
        if name is None:
            raise self.error(node, f"cannot call `{ast.unparse(node.func)}` in a kernel; the language here is "
                                   + ", ".join(fn.__name__ for fn in self.language))
        rule = getattr(self, name)
        try:
            bound = inspect.signature(rule).bind(node, *node.args, **{k.arg: k.value for k in node.keywords})
        except TypeError as err:
            raise self.error(node, f"{ast.unparse(node.func)}(): {err}") from None
        return rule(*bound.args, **bound.kwargs)

    def callee(self, func):
        """What a called name means; a kernel defined inside a function also sees that function's names."""
        if isinstance(func, ast.Name):
            outer = inspect.getclosurevars(self.fn).nonlocals
            if func.id in outer:
                return outer[func.id]
        return super().callee(func)

    def constant(self, node, what):
        value = self.visit(node)
        if type(value) is not int:
            raise self.error(node, f"{what} must be a constant int (a number or a constexpr)")
        return value

    def program_id(self, node, axis):
        return self.programs[self.constant(axis, "program_id's axis")]

    def arange(self, node, start, stop):
        start, stop = self.constant(start, "arange's start"), self.constant(stop, "arange's stop")
        return Block((stop - start,), lambda index: index[0] + start)

    def pointer(self, node, value, what):
        pointer = self.visit(value)
        if not isinstance(pointer, Pointer):
            raise self.error(value, f"{what} takes a pointer (a tensor argument plus offsets)")
        return pointer

    def load(self, node, pointer, mask=None, other=None):
        """A block (or scalar) read through a pointer; where the mask is false, `other` (0 by default)."""
        pointer = self.pointer(node, pointer, "load")
        mask = None if mask is None else self.visit(mask)
        other = 0 if other is None else self.visit(other)
        dtype = str(pointer.buffer.ty.dtype)

        def read(offset, keep, other):
            value = pointer.buffer[offset]
            return value if keep is None else tirx.if_then_else(keep, value, self.as_dtype(node, other, dtype))
        return self.combine(node, read, pointer.offset, mask, other, unify=False)

    def store(self, node, pointer, value, mask=None):
        """The one place a block becomes loops: every element of the block, written where the mask holds."""
        pointer, value = self.pointer(node, pointer, "store"), self.visit(value)
        mask = None if mask is None else self.visit(mask)
        dtype = str(pointer.buffer.ty.dtype)
        for index in self.block_loops(self.shape_of(node, pointer.offset, value, mask) or ()):
            write = (pointer.buffer, self.as_dtype(node, element(value, index), dtype),
                     [element(pointer.offset, index)])
            if mask is None:
                T.buffer_store(*write)
            else:
                with T.If(element(mask, index)):
                    with T.Then():
                        T.buffer_store(*write)


def constexprs(fn):
    return {name for name, kind in inspect.get_annotations(fn, eval_str=True).items() if kind is constexpr}


class Kernel:
    """A block kernel: `kernel[grid](*args, **constexprs)` compiles it for those kinds of argument (once)
    and runs one program per point of the grid."""

    generator = BlockCodeGenerator

    def __init__(self, fn):
        self.fn, self.compiled = fn, {}

    def arguments(self, args, kwargs):
        bound = inspect.signature(self.fn).bind(*args, **kwargs)
        return dict(bound.arguments)

    def codegen(self, *args, gpu=False, **kwargs):
        generator = self.generator(self.fn, self.arguments(args, kwargs), gpu)
        return generator.visit(ch21.JIT(self.fn).parse())  # chapter 02: the source as an AST

    def __getitem__(self, grid):
        grid = grid if isinstance(grid, tuple) else (grid,)
        return lambda *args, **kwargs: self.launch(grid, args, kwargs)

    def launch(self, grid, args, kwargs):
        arguments, constants = self.arguments(args, kwargs), constexprs(self.fn)
        gpu = any(isinstance(value, torch.Tensor) and value.is_cuda for value in arguments.values())
        key = (gpu,) + tuple(value if name in constants else str(value.dtype) if isinstance(value, torch.Tensor)
                             else type(value) for name, value in arguments.items())
        if key not in self.compiled:
            target = tvm.target.Target.from_device(tvm.cuda()) if gpu else "llvm"
            self.compiled[key] = tvm.compile(self.codegen(*args, gpu=gpu, **kwargs), target=target)
        values = [tvm.runtime.from_dlpack(v.reshape(-1)) if isinstance(v, torch.Tensor) else v
                  for name, v in arguments.items() if name not in constants]
        self.compiled[key][self.fn.__name__](*values, *grid)


def jit(fn):
    return Kernel(fn)


if __name__ == "__main__":

    @jit
    def double(x, out, n, BLOCK: constexpr):
        pid = program_id(0)
        offs = pid * BLOCK + arange(0, BLOCK)
        mask = offs < n
        store(out + offs, load(x + offs, mask=mask) * 2.0, mask=mask)

    n = 1000
    x, out = torch.randn(n), torch.empty(n)
    print("double as TIR, one PrimFunc for the whole grid:")
    double_tir = double.codegen(x, out, n, BLOCK=128).script()
    print(double_tir)
    double[(cdiv(n, 128),)](x, out, n, BLOCK=128)
    torch.testing.assert_close(out, x * 2.0)
    print(f"double at n = {n} ({cdiv(n, 128)} programs of 128, the last one masked) matches torch")
    x3, out3 = torch.randn(3), torch.full((3,), 7.0)
    double[(1,)](x3, out3, 2, BLOCK=128)  # the same compiled kernel: n = 2 of 3, so out3[2] stays 7
    torch.testing.assert_close(out3, torch.cat([x3[:2] * 2.0, torch.tensor([7.0])]))
    print("at n = 2 the same compiled kernel runs, and writes only the first 2 elements")

    @jit
    def axpy(alpha, x, y, out, n, BLOCK: constexpr):
        offs = program_id(0) * BLOCK + arange(0, BLOCK)
        mask = offs < n
        a = load(x + offs, mask=mask)
        b = load(y + offs, mask=mask, other=1.0)
        store(out + offs, alpha * a + b, mask=mask)

    v, w, z = torch.randn(77), torch.randn(77), torch.empty(77, dtype=torch.float16)
    axpy[(cdiv(77, 32),)](0.5, v, w, z, 77, BLOCK=32)
    torch.testing.assert_close(z, (0.5 * v + w).half())
    print("axpy at n = 77 (3 programs of 32), stored as float16, matches torch")

    cuda = tvm.compile(double.codegen(x, out, n, BLOCK=128, gpu=True),
                       target=tvm.target.Target({"kind": "cuda", "arch": "sm_90"}))
    source = cuda.mod.imports[0].inspect_source()
    start = source.rindex('extern "C" __global__ void __launch_bounds__(128) double_kernel(')
    print("\nThe same kernel for a GPU (built for sm_90):")
    print(source[start:source.index("\n}\n", start) + 2])
    compilations = len(double.compiled)
    if torch.cuda.is_available() and tvm.cuda().exist:
        on_gpu = torch.empty(n, device="cuda")
        double[(cdiv(n, 128),)](x.cuda(), on_gpu, n, BLOCK=128)
        torch.testing.assert_close(on_gpu.cpu(), x * 2.0)
        print("double ran on the GPU and matches torch")
    else:
        print("(no GPU here: built, not run)")

    @jit
    def exp_kernel(x, out, n, BLOCK: constexpr):
        offs = program_id(0) * BLOCK + arange(0, BLOCK)
        store(out + offs, torch.exp(load(x + offs)))

    try:
        exp_kernel.codegen(x, out, n, BLOCK=128)
        raise AssertionError("torch.exp is not in the kernel language")
    except SyntaxError as err:
        print(f"\nrefused: {err.msg}")

    print("Checking: one program loop over grid0, a vectorised masked loop, blockIdx.x and threadIdx.x on the GPU")
    assert "for pid0 in T.parallel(grid0):" in double_tir and "T.vectorized(128)" in double_tir
    assert "T.if_then_else(" in double_tir and compilations == 1
    assert "blockIdx.x" in source and "threadIdx.x" in source
