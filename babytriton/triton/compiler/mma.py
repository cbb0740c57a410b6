"""`tl.dot` on tensor cores (gpu.py): the product of a block program's dot nest made by the warps'
mma.sync m16n8k16 instructions. The thread block's warps form a grid over the M x N result, each warp
a tile of 16 x 8 fragments; a thread holds four elements of each fragment of its warp, in registers,
in the order the instruction leaves them (its `Layout`). Every block nest over a buffer of that shape
that is kept in registers runs in this layout (gpu.py), so a dot's accumulator stays in the
fragments across a K loop and the nests that read it (an activation, a conversion, a store) read the
same registers; a nest that reads it across threads (a row sum) gets a copy in shared memory made
just before it. The operands are read from shared memory with ldmatrix, their rows padded by 16
bytes so that the eight rows an ldmatrix reads fall in distinct banks."""
from __future__ import annotations

import dataclasses

import tvm
import tvm_ffi
from tvm import tirx
from tvm.script.ir_builder import IRBuilder
from tvm.script.ir_builder import tirx as T

from .emit import MMA

WARP = 32
FRAG_M, FRAG_N, FRAG_K = 16, 8, 16          # the instruction's shape
INPUTS = {"float16": "fp16", "bfloat16": "bf16"}
PAD = 8                                     # elements (16 bytes) added to each operand row in shared memory


@dataclasses.dataclass(frozen=True)
class Layout:
    """An m x n block over the warps of a thread block: warps_m x warps_n warps, each a tile of
    frags_m x frags_n fragments; thread tx's register `it` holds element at(it, tx)."""
    m: int
    n: int
    warps_m: int
    warps_n: int

    @property
    def frags_m(self) -> int:
        return self.m // self.warps_m // FRAG_M

    @property
    def frags_n(self) -> int:
        return self.n // self.warps_n // FRAG_N

    @property
    def rounds(self) -> int:
        """Registers a thread holds: four per fragment of its warp's tile."""
        return self.frags_m * self.frags_n * 4

    def warp_origin(self, tx):
        """The (row, column) of the tile of thread tx's warp."""
        warp = _div(tx, WARP)
        return _div(warp, self.warps_n) * (self.m // self.warps_m), _mod(warp, self.warps_n) * (self.n // self.warps_n)

    def at(self, it, tx) -> tuple:
        """The (row, column) of register `it` of thread tx: fragment it // 4 of its warp's tile (row
        major), in it the accumulator's place for register it % 4 (PTX ISA, mma.m16n8k16)."""
        row0, col0 = self.warp_origin(tx)
        lane = _mod(tx, WARP)
        frag, reg = _div(it, 4), _mod(it, 4)
        row = row0 + _div(frag, self.frags_n) * FRAG_M + _div(lane, 4) + _div(reg, 2) * 8
        col = col0 + _mod(frag, self.frags_n) * FRAG_N + _mod(lane, 4) * 2 + _mod(reg, 2)
        return row, col


def _div(x, d: int):
    """x // d of a Python int or a TIR expression (the layout is also evaluated in Python, by tests)."""
    return x // d if isinstance(x, int) else tirx.floordiv(x, d)


def _mod(x, d: int):
    return x % d if isinstance(x, int) else tirx.floormod(x, d)


def layout(m: int, n: int, threads: int) -> Layout | None:
    """The warp grid for an m x n result whose warp tiles are the squarest (the fewest operand rows
    and columns each warp reads per product); None when no grid divides the block into fragments."""
    warps = threads // WARP
    fits = [Layout(m, n, wm, warps // wm) for wm in range(1, warps + 1)
            if warps % wm == 0 and m % (wm * FRAG_M) == 0 and n % (warps // wm * FRAG_N) == 0]
    return min(fits, key=lambda l: (m // l.warps_m + n // l.warps_n, l.warps_n), default=None)


@dataclasses.dataclass(frozen=True)
class Dot:
    """A dot nest (emit.py's, annotated MMA): c[o0, o1] (+)= a[o0, r] * b[r, o1] over r, after `inits`."""
    nest: list
    inits: list
    c: object
    a: object
    b: object
    k: int


def dot(nest: list) -> Dot | None:
    """The dot that a block nest computes, when emit.py marked it for tensor cores."""
    body = nest[-1].body
    last = body.seq[-1] if isinstance(body, tirx.SeqStmt) else body
    if len(nest) != 2 or not isinstance(last, tirx.For) or MMA not in last.annotations or \
            not isinstance(last.body, tirx.BufferStore):
        return None
    o0, o1, r = nest[0].loop_var, nest[1].loop_var, last.loop_var
    loads = []
    tvm_ffi.structural_walk(last.body.value, (tvm.ir.TensorLoad, loads.append))

    def operand(first, second):
        found = [ld.source for ld in loads if len(ld.indices) == 2 and ld.indices[0].same_as(first)
                 and ld.indices[1].same_as(second)]
        return found[0] if found else None
    a, b = operand(o0, r), operand(r, o1)
    if a is None or b is None:
        return None
    inits = list(body.seq[:-1]) if isinstance(body, tirx.SeqStmt) else []
    return Dot(nest, inits, last.body.buffer, a, b, int(last.extent))


def usable(d: Dot, threads: int) -> Layout | None:
    """The dot's layout when tensor cores can make it (fp16/bf16 operands, an fp32 result, shapes
    in whole fragments), else None."""
    a_type, b_type, c_type = (str(buf.ty.dtype) for buf in (d.a, d.b, d.c))
    if a_type not in INPUTS or a_type != b_type or c_type != "float32" or d.k % FRAG_K:
        return None
    return layout(int(d.nest[0].extent), int(d.nest[1].extent), threads)


def padded(buf) -> object:
    """`buf` (an operand in shared memory) with each row PAD elements longer."""
    rows, cols = (int(x) for x in buf.ty.shape)
    return tirx.decl_buffer((rows, cols + PAD), buf.ty.dtype, buf.name, scope=buf.ty.storage_scope)


def product(d: Dot, lay: Layout, tx, acc, a_at=0, b_at=0, between=()) -> None:
    """Into the current IRBuilder frame: acc (each thread's `lay.rounds` fp32 registers, in the
    layout) += a @ b, K / 16 steps of: each warp's A and B fragments loaded from shared memory
    with ldmatrix, then one mma per fragment of its tile. a_at, b_at: the elements before the
    tiles in their buffers (a pipeline's slot); `between`: statements spread over the steps, each
    after a step's mma (a pipeline's copies, issued while the tensor cores work on the step's)."""
    dtype = str(d.a.ty.dtype)
    lane = tirx.floormod(tx, WARP)
    row0, col0 = lay.warp_origin(tx)
    lda, ldb = int(d.a.ty.shape[1]), int(d.b.ty.shape[1])
    # ldmatrix: lanes 0-15 give the rows of the fragment's first 8 columns, lanes 16-31 the next 8
    row, half = tirx.floormod(lane, 16), tirx.floordiv(lane, 16) * 8
    a_frag = IRBuilder.name("a_frag", T.alloc_buffer((lay.frags_m * 8,), dtype, scope="local"))
    b_frag = IRBuilder.name("b_frag", T.alloc_buffer((lay.frags_n * 4,), dtype, scope="local"))
    steps = d.k // FRAG_K
    for kk in range(steps):   # unrolled here, so that `between` can go between the steps
        for i in range(lay.frags_m):
            T.evaluate(T.ptx_legacy.ldmatrix(False, 4, ".b16", a_frag.data, i * 8, d.a.access_ptr("r"),
                                             a_at + (row0 + i * FRAG_M + row) * lda + kk * FRAG_K + half, dtype=dtype))
        for j in range(0, lay.frags_n, 2):   # two n8 fragments (k16 x n16) an ldmatrix, transposed
            T.evaluate(T.ptx_legacy.ldmatrix(True, 4 if j + 1 < lay.frags_n else 2, ".b16", b_frag.data, j * 4,
                                             d.b.access_ptr("r"),
                                             b_at + (kk * FRAG_K + row) * ldb + col0 + j * FRAG_N + half, dtype=dtype))
        for i in range(lay.frags_m):
            for j in range(lay.frags_n):
                T.evaluate(T.ptx_legacy.mma("m16n8k16", "row", "col", INPUTS[dtype], INPUTS[dtype], "fp32",
                                            a_frag.data, i * 8, b_frag.data, j * 4, acc.data,
                                            (i * lay.frags_n + j) * 4, False, dtype="float32"))
        for stmt in between[kk * len(between) // steps:(kk + 1) * len(between) // steps]:
            T.add_to_parent(stmt)
