"""The block program's statements: a loop nest per block operation (annotated so that the schedule
finds it), buffers that hold materialised values, reductions and `dot` as reduction nests.

Annotations the schedule reads: "triton.program" (the loop over one grid axis), "triton.block" on the
outermost loop of a nest over a block's shape (its value: the rank), "triton.reduce" on the loop over
a reduced axis (inside the nest over the result's shape), "triton.mma" also on a dot's reduced loop whose
operands and result tensor cores take (its operands then plain shared buffers; gpu.py/mma.py)."""
from __future__ import annotations

import contextlib
import itertools

import tvm
from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from ..language import core
from .values import Block, cast, const

BLOCK, REDUCE, PROGRAM, ATOMIC = "triton.block", "triton.reduce", "triton.program", "triton.atomic"
MMA = "triton.mma"
MMA_INPUTS = ("float16", "bfloat16")   # operand types of mma.sync m16n8k16 with an fp32 accumulator


class Emitter:
    """Emits into the current IRBuilder frame; `gpu` picks where buffers live (shared by a program's
    threads, or each thread's own for scalars, which every thread computes alike)."""

    def __init__(self, ib: IRBuilder, gpu: bool):
        self.ib = ib
        self.gpu = gpu
        self._names = itertools.count()
        self.atomics = False     # whether the program updates memory atomically

    def name(self, prefix: str) -> str:
        return f"{prefix}_{next(self._names)}"

    @contextlib.contextmanager
    def block_loop(self, shape: tuple[int, ...], prefix: str = "i", atomic: bool = False):
        """A loop nest over `shape`, yielding its index (empty for a scalar: no loop); `atomic`: its
        elements update memory one after another (on a CPU, never vectorised)."""
        with contextlib.ExitStack() as stack:
            index = []
            for axis, size in enumerate(shape):
                notes = ({BLOCK: len(shape), ATOMIC: 1} if atomic else {BLOCK: len(shape)}) if axis == 0 else None
                var = stack.enter_context(T.serial(0, size, annotations=notes))
                index.append(self.ib.name(f"{prefix}{axis}", var))
            yield tuple(index)

    def alloc(self, shape: tuple[int, ...], dtype: core.dtype, prefix: str):
        """A buffer for a block value of this program (a one-element buffer for a scalar)."""
        scope = "local" if not shape or not self.gpu else "shared"
        return self.ib.name(self.name(prefix), T.alloc_buffer(list(shape) or [1], _storage(dtype), scope=scope))

    def materialise(self, block: Block, prefix: str = "v") -> Block:
        """`block` computed once into a buffer; the result reads the buffer."""
        dtype = core.int64 if block.is_pointer else block.dtype
        buf = self.alloc(block.shape, dtype, prefix)
        self.fill(buf, block)
        return reading(buf, block)

    def fill(self, buf, block: Block) -> None:
        """Store every element of `block` into `buf` (a buffer of its shape)."""
        with self.block_loop(block.shape) as index:
            T.buffer_store(buf, _stored(block.at(index), buf), list(index) or [0])

    def atomic_add(self, buf, offset, value) -> None:
        """buf[offset] += value, atomically: CUDA's atomicAdd; on a CPU a plain update, as the programs
        of a kernel with atomics run one after another there (schedule.py)."""
        if self.gpu:
            T.evaluate(tirx.call_intrin(str(value.ty.dtype), "tirx.cuda.atomic_add",
                                        tirx.address_of(buf[offset]), value))
        else:
            T.buffer_store(buf, buf[offset] + value, [offset])
        self.atomics = True

    def reduce(self, block: Block, axis: int, combine, init, dtype: core.dtype, prefix: str) -> Block:
        """`block` reduced along `axis`: combine(accumulated, element) from `init` (its identity), in `dtype`."""
        out_shape = block.shape[:axis] + block.shape[axis + 1:]
        buf = self.alloc(out_shape, dtype, prefix)
        x, y = tirx.Var("x", dtype.tvm), tirx.Var("y", dtype.tvm)
        reducer = tirx.CommReducer([x], [y], [combine(x, y)], [init])
        self._reduction(out_shape, (buf,), (init,), lambda index, r: [combine(element(buf, index), cast(
            block.at(index[:axis] + (r,) + index[axis:]), dtype))], block.shape[axis], reducer)
        return reading(buf, Block(dtype, out_shape, None))

    def arg_reduce(self, block: Block, axis: int, better, identity, prefix: str) -> tuple[Block, Block]:
        """The best value along `axis` (`better` than the rest, from `identity`) and its int32 index,
        the first of equal ones."""
        out_shape = block.shape[:axis] + block.shape[axis + 1:]
        values = self.alloc(out_shape, block.dtype, prefix)
        indices = self.alloc(out_shape, core.int32, prefix + "_index")

        def step(index, r):
            x = block.at(index[:axis] + (r,) + index[axis:])
            best = element(values, index)
            take = better(x, best)
            # the index first: the value's update would change `take`
            return [tirx.Select(take, r, element(indices, index)), tirx.Select(take, x, best)]
        # across threads: the better value, or of equal ones the lower index
        i0, i1 = tirx.Var("i0", "int32"), tirx.Var("i1", "int32")
        v0, v1 = tirx.Var("v0", block.dtype.tvm), tirx.Var("v1", block.dtype.tvm)
        take = tirx.Or(better(v1, v0), tirx.And(tirx.EQ(v1, v0), i1 < i0))
        reducer = tirx.CommReducer([i0, v0], [i1, v1], [tirx.Select(take, i1, i0), tirx.Select(take, v1, v0)],
                                   [tirx.const(0, "int32"), identity])
        self._reduction(out_shape, (indices, values), (tirx.const(0, "int32"), identity), step, block.shape[axis],
                        reducer)
        return (reading(values, Block(block.dtype, out_shape, None)),
                reading(indices, Block(core.int32, out_shape, None)))

    def dot(self, a: Block, b: Block, acc: Block | None, dtype: core.dtype, compute: core.dtype, into=None) -> Block:
        """The M x N product of `a` (M x K) and `b` (K x N), in `compute`, added to `acc`; `into`: acc's
        own buffer, to accumulate in place."""
        # on a GPU, operands that tensor cores can take are read from their own buffers (by ldmatrix)
        mma = self.gpu and a.dtype == b.dtype and a.dtype.tvm in MMA_INPUTS and dtype.tvm == compute.tvm == "float32"
        a = a if a.buffer is not None and (not mma or _plain(a)) else self.materialise(a, "dot_a")
        b = b if b.buffer is not None and (not mma or _plain(b)) else self.materialise(b, "dot_b")
        (m, k), n = a.shape, b.shape[1]
        buf = into if into is not None else self.alloc((m, n), dtype, "acc")
        start = (lambda index: cast(acc.element(index), dtype)) if acc is not None else const(0, dtype)
        inits = () if into is not None else (start,)
        self._reduction((m, n), (buf,), inits, lambda index, r: [element(buf, index) + cast(
            cast(a.at((index[0], r)), compute) * cast(b.at((r, index[1])), compute), dtype)], k, None,
                        {MMA: 1} if mma else None)
        return reading(buf, Block(dtype, (m, n), None))

    def _reduction(self, out_shape, bufs: tuple, inits: tuple, step, extent: int, reducer, notes=None) -> None:
        """The nest: over the result's shape, set `inits`, then a loop over the reduced axis, annotated
        with the `reducer` (tirx.CommReducer) that combines partial results (None: none may be) and `notes`."""
        # a scalar result is a one-element nest (on a GPU, its threads each reduce a part, then together)
        with self.block_loop(out_shape or (1,), "o") as index:
            index = index if out_shape else ()
            where = list(index) or [0]
            for buf, init in zip(bufs, inits):
                T.buffer_store(buf, init(index) if callable(init) else init, where)
            with T.serial(0, extent, annotations={REDUCE: reducer if reducer is not None else 0, **(notes or {})}) as r:
                self.ib.name("r", r)
                for buf, value in zip(bufs, step(index, r)):
                    T.buffer_store(buf, value, where)


def element(buf, index: tuple):
    """The element of a program's buffer at a block index (a scalar's buffer has one element)."""
    return buf[tuple(index) or (0,)]


def reading(buf, like: Block) -> Block:
    """A block that reads `buf` (shaped as `like`, a pointer block's offsets for a pointer)."""
    return Block(like.dtype, like.shape, lambda index: element(buf, index), like.base, buf)


def _plain(block: Block) -> bool:
    """Whether `block` reads its buffer, of its own shape, at its own index (not a view of it)."""
    index = tuple(tirx.Var(f"i{axis}", "int32") for axis in range(len(block.shape)))
    expr = block.at(index)
    return isinstance(expr, tvm.ir.TensorLoad) and expr.source.same_as(block.buffer) and \
        [int(d) for d in block.buffer.ty.shape] == list(block.shape) and \
        all(i.same_as(j) for i, j in zip(expr.indices, index))


def _storage(dtype: core.dtype) -> str:
    return dtype.tvm


def _stored(expr, buf):
    """`expr` in the buffer's element type (pointer offsets are int64)."""
    want = str(buf.ty.dtype) if hasattr(buf.ty, "dtype") else None
    if want and str(expr.ty.dtype) != want:
        return tirx.Cast(want, expr)
    return expr
