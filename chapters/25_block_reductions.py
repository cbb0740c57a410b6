# Chapter 25 - block values in two dimensions, and reductions inside a block
#
# On chapter 24 (a grid of programs): a program's block gets a second axis,
# and a program reduces its block, which is how a fused softmax is written.
#
# Exercise 12, the course's own, solved on chapter 24: exercises/25_block_reductions.py
# is this file with the answer (the broadcast subscripts and the reduction)
# taken out; `diff exercises/25_block_reductions.py chapters/25_block_reductions.py`
# shows it.
#
# What: two new things in the block language.
#   - `rows[:, None]` and `cols[None, :]` give a 1-D block a new axis of size
#     1, and arithmetic broadcasts (numpy's rule, `torch.broadcast_shapes`):
#     `x + rows[:, None] * stride + cols[None, :]` is a (BLOCK_M, BLOCK_N)
#     block of addresses, and `(rows < m)[:, None] & (cols < n)[None, :]` its
#     mask. A Block needs nothing new for this: the element of `v[:, None]` at
#     (i, j) is v's element at i.
#   - `block_sum(v, axis)` and `block_max(v, axis)` (Triton's `tl.sum` and
#     `tl.max`) reduce one axis of a block. Here a block value must be kept:
#     its elements are first written into a buffer with the block's shape, one
#     per program, then combined by a tree: half of the axis adds the other
#     half, log2(size) times, so block sizes are powers of two (`arange`
#     checks). The result is a Block again, reading element 0 of that axis.
# On the CPU the tree's steps are loops over the half still active,
# vectorised. On a GPU the buffer is in shared memory, the block's last axis
# is spread over threads (`threadIdx.x`, as in chapter 24), and each step is
# one step of all threads followed by a barrier (`T.tvm_storage_sync`): a
# cross-thread reduction. babytriton/triton/ reduces with warp shuffles, and
# shared memory only between warps, which is what TVM's
# `LowerThreadAllreduce` makes of `T.tvm_thread_allreduce`.
#
# Why: a softmax over a row needs the row's maximum and sum before it can
# write anything. Whole-tensor compilers make that three kernels or fuse them
# with a schedule; a block kernel that owns a whole row does it in one
# program, reading the row from memory once per use and writing it once. The
# reduction is the one place values are kept; everything elementwise is still
# inlined into the loop that needs it (so `exp` runs once for the sum and once
# for the store: arithmetic is cheaper than memory).
#
# What to look at: in `softmax`'s PrimFunc, the buffer `max0` with the
# block's shape, the loops `for i in T.vectorized(64)`, `32`, ... `1` of the
# tree, then the same for `sum1`, and the store reading `max0[0]` and
# `sum1[0]`; a run on a 37 x 100 matrix (BLOCK 128: the mask and `other=-inf`
# matter) equal to torch; `row_stats`, a 2-D block with a reduction along
# each axis; then the CUDA source: `__shared__`, `__syncthreads()` (run and
# compared on a GPU, if any).
#
# Run: python chapters/25_block_reductions.py
import ast
import importlib

import torch
import tvm
from tvm import tirx
from tvm.script.ir_builder import tirx as T

ch24 = importlib.import_module("24_programs")
Block, constexpr, element, cdiv, jit = ch24.Block, ch24.constexpr, ch24.element, ch24.cdiv, ch24.jit
program_id, arange, load, store = ch24.program_id, ch24.arange, ch24.load, ch24.store


def block_sum(value, axis):
    raise RuntimeError("block_sum() is for kernels compiled by @jit")


def block_max(value, axis):
    raise RuntimeError("block_max() is for kernels compiled by @jit")


def exp(value):
    raise RuntimeError("exp() is for kernels compiled by @jit")


# a reduction's name -> how it combines two elements
COMBINE = {"sum": lambda a, b: a + b, "max": tirx.max}
# this chapter's functions of the language -> the code generator's method for a call of each
REDUCTIONS = {block_sum: "block_sum", block_max: "block_max", exp: "exp"}


class BlockCodeGenerator(ch24.BlockCodeGenerator):
    language = {**ch24.LANGUAGE, **REDUCTIONS}

    def __init__(self, fn, arguments, gpu):
        super().__init__(fn, arguments, gpu)
        self.reductions = 0  # numbers the buffers of reductions: max0, sum1, ...

    def visit_Attribute(self, node):
        value = self.callee(node)  # a number named in the kernel's module, such as math.inf
        return value if type(value) in (int, float) else super().visit_Attribute(node)

    def visit_BinOp(self, node):
        if not isinstance(node.op, ast.BitAnd):
            return super().visit_BinOp(node)
        return self.combine(node, tirx.And, self.visit(node.left), self.visit(node.right))  # masks

    def visit_Subscript(self, node):
        """`v[:, None]`, `v[None, :]`: a new axis of size 1 where None is, the others kept."""
        value = self.visit(node.value)
        if not isinstance(value, Block):
            return super().visit_Subscript(node)
        elts = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        new = [isinstance(e, ast.Constant) and e.value is None for e in elts]
        kept = [isinstance(e, ast.Slice) and e.lower is e.upper is e.step is None for e in elts]
        if not all(n or k for n, k in zip(new, kept)) or sum(kept) != len(value.shape):
            raise self.error(node, "a block is indexed with `:` for each of its axes and None for a new one")
        sizes = iter(value.shape)
        shape = [1 if n else next(sizes) for n in new]
        return Block(shape, lambda index: value.at(tuple(i for i, n in zip(index, new) if not n)))

    def arange(self, node, start, stop):
        block = super().arange(node, start, stop)
        size = block.shape[0]
        if size < 1 or size & (size - 1):
            raise self.error(node, f"arange's size is {size}: a block's sizes are powers of two")
        return block

    def exp(self, node, value):
        return self.combine(node, tirx.exp, self.visit(value), float_only=True)

    def block_sum(self, node, value, axis):
        return self.reduce(node, "sum", self.visit(value), self.constant(axis, "the axis"))

    def block_max(self, node, value, axis):
        return self.reduce(node, "max", self.visit(value), self.constant(axis, "the axis"))

    def reduce(self, node, kind, value, axis):
        """Keep the block in a buffer of its shape (shared memory on a GPU), reduce `axis` by a tree, and
        read the result at element 0 of that axis."""
        if not isinstance(value, Block) or not 0 <= axis < len(value.shape):
            raise self.error(node, f"block_{kind} reduces an axis of a block")
        shape = value.shape
        name = f"{kind}{self.reductions}"
        self.reductions += 1
        kept = self.ib.name(name, T.alloc_buffer(shape, value.dtype, scope="shared" if self.gpu else "global"))
        for index in self.block_loops(shape):
            T.buffer_store(kept, element(value, index), index)
        self.tree_steps(kept, shape, axis, COMBINE[kind])
        rest = shape[:axis] + shape[axis + 1:]
        return Block(rest, lambda index: kept[index[:axis] + (ch24.ZERO,) + index[axis:]])

    def tree_steps(self, kept, shape, axis, combine):
        """Halve `axis` until one element is left: element i takes in element i + half. On a GPU all threads
        take every step (the ones past `half` idle) between barriers; on a CPU a step loops over `half`."""
        half = shape[axis] // 2
        while half >= 1:
            self.barrier()
            looped = shape if self.gpu else shape[:axis] + (half,) + shape[axis + 1:]
            for index in self.block_loops(looped):
                partner = index[:axis] + (index[axis] + half,) + index[axis + 1:]
                step = (kept, combine(kept[index], kept[partner]), index)
                if self.gpu:
                    with T.If(index[axis] < half):
                        with T.Then():
                            T.buffer_store(*step)
                else:
                    T.buffer_store(*step)
            half //= 2
        self.barrier()

    def barrier(self):
        """On a GPU, wait until every thread of the block has written: the next step reads their elements."""
        if self.gpu:
            T.evaluate(T.tvm_storage_sync("shared"))


class Kernel(ch24.Kernel):
    generator = BlockCodeGenerator


def jit(fn):
    return Kernel(fn)


if __name__ == "__main__":
    import math

    @jit
    def softmax(x, out, n_cols, BLOCK: constexpr):
        row = program_id(0)
        cols = arange(0, BLOCK)
        mask = cols < n_cols
        v = load(x + row * n_cols + cols, mask=mask, other=-math.inf)
        v = v - block_max(v, axis=0)
        num = exp(v)
        store(out + row * n_cols + cols, num / block_sum(num, axis=0), mask=mask)

    x = torch.randn(37, 100) * 3
    out = torch.empty_like(x)
    print("softmax as TIR, one row per program:")
    softmax_tir = softmax.codegen(x, out, 100, BLOCK=128).script()
    print(softmax_tir)
    softmax[(37,)](x, out, 100, BLOCK=128)
    torch.testing.assert_close(out, torch.softmax(x, dim=1))
    print("softmax of a 37 x 100 matrix (rows of 100 in blocks of 128) matches torch")

    @jit
    def row_stats(x, sums, maxes, m, n, BLOCK_M: constexpr, BLOCK_N: constexpr):
        rows = program_id(0) * BLOCK_M + arange(0, BLOCK_M)
        cols = arange(0, BLOCK_N)
        mask = (rows < m)[:, None] & (cols < n)[None, :]
        v = load(x + rows[:, None] * n + cols[None, :], mask=mask)
        store(sums + rows, block_sum(v, axis=1), mask=rows < m)
        centred = v - block_max(v, axis=0)[None, :]  # each column's maximum, within this program's rows
        store(maxes + rows[:, None] * n + cols[None, :], centred, mask=mask)

    y = torch.randn(10, 6)
    sums, centred = torch.empty(10), torch.empty(10, 6)
    row_stats[(cdiv(10, 4),)](y, sums, centred, 10, 6, BLOCK_M=4, BLOCK_N=8)
    torch.testing.assert_close(sums, y.sum(dim=1))
    padded = torch.cat([y, y.new_zeros(2, 6)]).view(3, 4, 6)  # masked rows load 0, as in the kernel
    torch.testing.assert_close(centred, (padded - padded.amax(dim=1, keepdim=True)).view(12, 6)[:10])
    print("row_stats on a 10 x 6 matrix in blocks of 4 x 8: sums along axis 1, maxima along axis 0, match torch")

    cuda = tvm.compile(softmax.codegen(x, out, 100, BLOCK=128, gpu=True),
                       target=tvm.target.Target({"kind": "cuda", "arch": "sm_90"}))
    source = cuda.mod.imports[0].inspect_source()
    start = source.rindex('extern "C" __global__ void __launch_bounds__(128) softmax_kernel(')
    print("\nsoftmax for a GPU (built for sm_90):")
    print(source[start:source.index("\n}\n", start) + 2])
    if torch.cuda.is_available() and tvm.cuda().exist:
        on_gpu = torch.empty(37, 100, device="cuda")
        softmax[(37,)](x.cuda(), on_gpu, 100, BLOCK=128)
        torch.testing.assert_close(on_gpu.cpu(), torch.softmax(x, dim=1))
        print("softmax ran on the GPU and matches torch")
    else:
        print("(no GPU here: built, not run)")

    @jit
    def odd_block(x, out, BLOCK: constexpr):
        store(out + arange(0, BLOCK), load(x + arange(0, BLOCK)))

    try:
        odd_block.codegen(x, out, BLOCK=100)
        raise AssertionError("a block of 100 cannot be reduced by halving")
    except SyntaxError as err:
        print(f"\nrefused: {err.msg}")

    print("Checking: kept buffers and halving loops on the CPU, shared memory and barriers on the GPU")
    assert "max0 = T.alloc_buffer((128,))" in softmax_tir and "for i in T.vectorized(64):" in softmax_tir
    assert "__shared__" in source and "__syncthreads()" in source
