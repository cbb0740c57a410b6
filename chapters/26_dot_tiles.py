# Chapter 26 - tiles: `dot`, a loop over K and an accumulator
#
# On chapter 25 (reductions inside a block): a program computes one tile of a
# matrix product, the kernel every Triton tutorial builds up to.
#
# Exercise 13, the course's own, solved on chapter 25: exercises/26_dot_tiles.py
# is this file with the answer (zeros, dot and the accumulator's update) taken
# out; `diff exercises/26_dot_tiles.py chapters/26_dot_tiles.py` shows it.
#
# What: program (pid_m, pid_n) of a 2-D grid owns a BLOCK_M x BLOCK_N tile of
# c = a @ b. It walks K a BLOCK_K slice at a time, `for k in range(0,
# cdiv(K, BLOCK_K))`, loads a BLOCK_M x BLOCK_K tile of a and a BLOCK_K x
# BLOCK_N tile of b (masked at the ragged edges, 0 outside) and adds their
# product into an accumulator, `acc += dot(a, b)`; after the loop it stores
# acc once. Three new things:
#   - `zeros(shape)` is a block that must outlive an iteration: a kept buffer
#     (chapter 25's word), float32, filled with zeros, named after the variable;
#   - assigning to a name that holds a kept block writes into its buffer (a
#     loop over the block) instead of naming a new value: that is how `acc`
#     carries from one iteration of the K loop to the next. Chapter 21's
#     `for` already makes the loop, a serial one;
#   - `dot(a, b)` keeps its (M, N) result too, in float32 whatever the input
#     dtype (as Triton's `dot` accumulates): zeroed, then for each kk of the
#     K tile one loop over the (M, N) block adds a[i, kk] * b[kk, j]. With kk
#     outermost the innermost loop runs along N, so it is the block's
#     vectorised (CPU) or threadIdx.x (GPU) loop, as every block loop here.
#
# Why: a tile is the unit of reuse. Each element of the a tile is used
# BLOCK_N times and each of the b tile BLOCK_M times while the program
# computes its tile, and the accumulator stays in the program for the whole K
# walk instead of going to memory. This chapter reads a and b through the
# inlined loads, so the reuse is only the cache's; staging the tiles in
# shared memory (or registers) and using tensor cores is what a scheduled
# matmul adds: babytriton/triton/ maps `tl.dot` onto them.
#
# What to look at: in `matmul`'s PrimFunc, two program loops (pid0, pid1),
# `acc = T.alloc_buffer((16, 16))` zeroed, then `for k in range(...)` holding
# `dot0` zeroed, the kk loop adding products, and acc updated from dot0; the
# store of acc as float16 after the loop. A run at ragged sizes (50 x 70 times
# 70 x 40, tiles 16 x 16 x 16) equal to torch; the CUDA source for sm_90.
#
# Run: python chapters/26_dot_tiles.py
import ast
import importlib

import torch
import tvm
from tvm import tirx
from tvm.script.ir_builder import tirx as T

ch25 = importlib.import_module("25_block_reductions")
Block, constexpr, element, cdiv = ch25.Block, ch25.constexpr, ch25.element, ch25.cdiv
program_id, arange, load, store = ch25.program_id, ch25.arange, ch25.load, ch25.store


def zeros(shape):
    raise RuntimeError("zeros() is for kernels compiled by @jit")


def dot(a, b):
    raise RuntimeError("dot() is for kernels compiled by @jit")


class Kept(Block):
    """A block held in a buffer of its shape, which assignments to its name write into."""

    def __init__(self, buffer, shape):
        super().__init__(shape, lambda index: buffer[index])
        self.buffer = buffer


# this chapter's functions of the language -> the code generator's method for a call of each
TILES = {zeros: "zeros", dot: "dot", cdiv: "cdiv"}


class BlockCodeGenerator(ch25.BlockCodeGenerator):
    language = {**ch25.ch24.LANGUAGE, **ch25.REDUCTIONS, **TILES}

    def visit_Assign(self, node):
        target = node.targets[0]
        if len(node.targets) == 1 and isinstance(target, ast.Name) and target.id in self.symbols \
                and isinstance(self.symbols[target.id], Kept):
            self.write(node, self.symbols[target.id], self.visit(node.value))
        else:
            super().visit_Assign(node)
            if isinstance(self.symbols[target.id], Kept):  # acc = zeros(...): its buffer is `acc`
                self.ib.name(target.id, self.symbols[target.id].buffer)

    def kept(self, node, name, shape):
        """A new float32 buffer of a block's shape, zeroed (shared memory on a GPU, as chapter 25's)."""
        buffer = self.ib.name(name, T.alloc_buffer(shape, "float32", scope="shared" if self.gpu else "global"))
        block = Kept(buffer, shape)
        self.write(node, block, 0.0)
        return block

    def write(self, node, block, value):
        """Every element of a kept block replaced by the value's (the old ones may be read: `acc + d`)."""
        self.barrier()
        for index in self.block_loops(block.shape):
            T.buffer_store(block.buffer, self.as_dtype(node, element(value, index), block.dtype), index)
        self.barrier()

    def zeros(self, node, shape):
        sizes = shape.elts if isinstance(shape, ast.Tuple) else [shape]
        return self.kept(node, "zeros", tuple(self.constant(size, "a size of zeros()") for size in sizes))

    def dot(self, node, a, b):
        """(M, K) x (K, N) -> (M, N), accumulated in float32: for each kk, one loop over the (M, N) block."""
        a, b = self.visit(a), self.visit(b)
        if not (isinstance(a, Block) and isinstance(b, Block) and len(a.shape) == len(b.shape) == 2
                and a.shape[1] == b.shape[0]):
            raise self.error(node, "dot multiplies an (M, K) block by a (K, N) block")
        product = self.kept(node, f"dot{self.reductions}", (a.shape[0], b.shape[1]))
        self.reductions += 1
        with T.serial(0, a.shape[1]) as kk:
            self.ib.name("kk", kk)
            for i, j in self.block_loops(product.shape):
                terms = [self.as_dtype(node, element(v, index), "float32") for v, index in ((a, (i, kk)), (b, (kk, j)))]
                T.buffer_store(product.buffer, product.buffer[i, j] + terms[0] * terms[1], [i, j])
        self.barrier()
        return product

    def cdiv(self, node, a, b):
        return self.combine(node, lambda x, y: tirx.floordiv(x + y - 1, y), self.visit(a), self.visit(b),
                            python=lambda x, y: (x + y - 1) // y)


class Kernel(ch25.Kernel):
    generator = BlockCodeGenerator


def jit(fn):
    return Kernel(fn)


if __name__ == "__main__":

    @jit
    def matmul(a, b, c, M, N, K, BLOCK_M: constexpr, BLOCK_N: constexpr, BLOCK_K: constexpr):
        rows = program_id(0) * BLOCK_M + arange(0, BLOCK_M)
        cols = program_id(1) * BLOCK_N + arange(0, BLOCK_N)
        acc = zeros((BLOCK_M, BLOCK_N))
        for k in range(0, cdiv(K, BLOCK_K)):
            ks = k * BLOCK_K + arange(0, BLOCK_K)
            a_tile = load(a + rows[:, None] * K + ks[None, :], mask=(rows < M)[:, None] & (ks < K)[None, :])
            b_tile = load(b + ks[:, None] * N + cols[None, :], mask=(ks < K)[:, None] & (cols < N)[None, :])
            acc += dot(a_tile, b_tile)
        store(c + rows[:, None] * N + cols[None, :], acc, mask=(rows < M)[:, None] & (cols < N)[None, :])

    a, b = torch.randn(50, 70, dtype=torch.float16), torch.randn(70, 40, dtype=torch.float16)
    c = torch.empty(50, 40, dtype=torch.float16)
    tiles = dict(BLOCK_M=16, BLOCK_N=16, BLOCK_K=16)
    print("matmul as TIR, one 16 x 16 tile of c per program:")
    matmul_tir = matmul.codegen(a, b, c, 50, 40, 70, **tiles).script()
    print(matmul_tir)
    matmul[(cdiv(50, 16), cdiv(40, 16))](a, b, c, 50, 40, 70, **tiles)
    torch.testing.assert_close(c, (a.float() @ b.float()).half())
    print("matmul of 50 x 70 by 70 x 40 in float16 (a float32 accumulator), 4 x 3 programs, matches torch")

    cuda = tvm.compile(matmul.codegen(a, b, c, 50, 40, 70, **tiles, gpu=True),
                       target=tvm.target.Target({"kind": "cuda", "arch": "sm_90"}))
    source = cuda.mod.imports[0].inspect_source()
    start = source.rindex('extern "C" __global__ void __launch_bounds__(16) matmul_kernel(')
    print("\nmatmul for a GPU (built for sm_90):")
    print(source[start:source.index("\n}\n", start) + 2])
    if torch.cuda.is_available() and tvm.cuda().exist:
        on_gpu = torch.empty(50, 40, dtype=torch.float16, device="cuda")
        matmul[(cdiv(50, 16), cdiv(40, 16))](a.cuda(), b.cuda(), on_gpu, 50, 40, 70, **tiles)
        torch.testing.assert_close(on_gpu.cpu(), (a.float() @ b.float()).half())
        print("matmul ran on the GPU and matches torch")
    else:
        print("(no GPU here: built, not run)")

    @jit
    def mismatched(a, c, BLOCK: constexpr):
        tile = load(a + arange(0, BLOCK)[:, None] * BLOCK + arange(0, BLOCK)[None, :])
        store(c + arange(0, BLOCK), dot(tile, arange(0, BLOCK)))

    try:
        mismatched.codegen(a, c, BLOCK=16)
        raise AssertionError("dot of a 2-D and a 1-D block is refused")
    except SyntaxError as err:
        print(f"\nrefused: {err.msg}")

    print("Checking: a K loop, an accumulator carried across it, dot accumulating in float32")
    assert "for pid1 in range(grid1):" in matmul_tir and "acc = T.alloc_buffer((16, 16))" in matmul_tir
    assert "for kk, i in T.grid(16, 16):" in matmul_tir and "T.Cast(\"float32\"" in matmul_tir
    assert "__shared__" in source and "blockIdx.y" in source
