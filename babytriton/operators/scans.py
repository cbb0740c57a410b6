"""cumsum and cumprod on a GPU as kernels of our own: TIR templates made for the scan's iteration space.

A scan of axis `a` of a tensor is (outer, n, inner): `outer` the product of the sizes before `a`,
`n` its size, `inner` the product of those after it. Two templates cover every such space:

- rows (inner == 1, the scanned axis contiguous): a warp, or a block of warps, per row. Each thread
  loads a few vectors (16 bytes each), scans them in registers; the warp scans its threads' totals
  with shuffles, a block its warps' totals through shared memory; a running total carries the row's
  sum across tiles of a long row, and each thread writes its elements back. Where a warp (or a part
  of one) holds a row, a thread's u-th vector is the u-th of the row's threads' consecutive vectors
  (one 512-byte span a warp a load, as an element-wise kernel reads), each such chunk scanned across
  the threads in turn; a block of warps a row keeps each thread's vectors contiguous.
- columns (inner > 1): a thread per (outer, inner) column (a few adjacent columns with vector loads),
  each running down its column sequentially: adjacent threads read adjacent addresses. Where the
  columns are too few to fill the GPU, the scanned axis is split into chunks: a first kernel sums each
  chunk, a second scans those sums (the row template: the sums are stored a column's chunks contiguous,
  so that thousands of chunks are scanned by warps in parallel, not by a thread each column walking them),
  the third scans each chunk from its prefix.

Both are written as TVMScript templates, functions of the scan's extents and dtypes (static or symbolic),
handed to the Relax module as call_tir in place of the scan (offload._SortsToTorch), marked scheduled so
that Dlight leaves them alone. A half scan reads and writes its halves, accumulating in float32.

A few long rows (a 1-d cumsum of millions of elements) stay with torch's scan (offload._SortsToTorch):
a block per row would leave most of the GPU idle, and CUB's single-pass scan with decoupled look-back
is near bandwidth there. TVM's own GPU scan is not used: it gave wrong scans over middle and outer axes.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import tvm
from tvm import relax, s_tir, tirx
from tvm.script import tirx as T

RULE_ATTR = "babytriton.rule"   # schedules.wrappers.RULE_ATTR (not imported: schedules imports offload)
SCAN_ATTR = "babytriton.scan"   # "op axis exclusive" of the scan a kernel computes (rounded_once)
OPAQUE = 8                      # relax.transform's OpPatternKind.kOpaque: FuseOps leaves the kernel alone
FULL_MASK = tirx.const(0xFFFFFFFF, "uint32")
I64 = lambda value: tirx.IntImm("int64", value)  # noqa: E731
WARP = 32
VECTOR_BYTES = 16               # one 128-bit load or store per vector
THREAD_BYTES = 64               # a row scan's elements a thread, in the accumulator's dtype
TARGET_WARPS = 4096             # warps that keep an H100/H200's memory busy (132 SMs x ~32)
TARGET_THREADS = 131072         # column threads: ~1000 a SM, each with a few loads in flight
MIN_CHUNK = 32                  # a chunk of a split column scan: long enough to amortise its carry
# elements of a column thread's rows unrolled (their loads in flight together), in the chunk-sum pass and
# in the scan pass; 1: a loop. H200, sums: p50 x[294521, 7] f16 3.4 -> 2.6 us, p115 x[63701, 512] f32
# 42.2 -> 36.8 us; scan pass (16): p115 71.6 -> 66.0 us but p50 7.0 -> 8.5 us (scalar half stores), so off
SUM_UNROLL, UNROLL = 16, 1
FEW_ROWS, LONG_ROW = 32, 32768  # fewer rows than this, longer than that: torch's single-pass scan
HALVES = ("float16", "bfloat16")
DTYPES = ("float32", "float64", "int32", "int64") + HALVES

# op name -> (combine, identity)
STEPS = {"relax.cumsum": (lambda a, b: a + b, 0), "relax.cumprod": (lambda a, b: a * b, 1)}


@dataclass(frozen=True)
class Scan:
    """One scan: its op, the input's shape (static ints or symbolic sizes), axis and dtypes."""
    op: str
    shape: tuple
    axis: int
    in_dtype: str
    out_dtype: str
    exclusive: bool
    dtype: str = ""      # in which it accumulates: the result's, float32 for a half result

    def __post_init__(self):
        if not self.dtype:
            object.__setattr__(self, "dtype", "float32" if self.out_dtype in HALVES else self.out_dtype)

    def split(self):
        """(outer, n, inner) as PrimExprs of `self.shape`."""
        one = tirx.const(1, "int64")
        prod = lambda sizes: math.prod(sizes, start=one)  # noqa: E731
        return prod(self.shape[:self.axis]), self.shape[self.axis], prod(self.shape[self.axis + 1:])

    def cast(self, value):
        """An input value in the accumulator's dtype (no cast where they are one: nothing to hide)."""
        return value if self.in_dtype == self.dtype else tirx.Cast(self.dtype, value)

    def rounded(self, value):
        """An accumulated value in the result's dtype: a half result is rounded once, at its store."""
        return value if self.out_dtype == self.dtype else tirx.Cast(self.out_dtype, value)

    def combine(self, a, b):
        return STEPS[self.op][0](a, b)

    @property
    def identity(self):
        return tirx.const(STEPS[self.op][1], self.dtype)

    @property
    def narrowest(self) -> str:
        """The narrower of the input's and the result's dtypes, which sets the vector width."""
        return min(self.in_dtype, self.out_dtype, key=lambda d: tvm.DataType(d).bits)


def _static(expr) -> int | None:
    """The value of a size known at compile time, None for a symbolic one."""
    expr = tvm.sym.Analyzer().simplify(expr)
    return int(expr.value) if isinstance(expr, tirx.IntImm) else None


def _lanes(dtype: str, extent) -> int:
    """Elements per vector of `dtype` where `extent` (static) is a multiple of it, else 1: rows and
    columns then start at vector-aligned addresses."""
    lanes = VECTOR_BYTES // (tvm.DataType(dtype).bits // 8)
    size = _static(extent)
    while lanes > 1 and (size is None or size % lanes):
        lanes //= 2
    return lanes


def _ceildiv(a, b):
    return tirx.floordiv(a + b - 1, b)


def _pow2_at_most(x: int) -> int:
    return 1 << (max(1, x).bit_length() - 1)


# --------------------------------------------------------------------------------------------------
# rows: the scanned axis contiguous
# --------------------------------------------------------------------------------------------------

def row_shape(scan: Scan) -> tuple[int, int, int, int, int]:
    """(lanes, vectors per thread, threads per row, warps per row, warps per block) of a row scan:
    vectors (16 bytes of the narrower dtype) of THREAD_BYTES a thread; short rows share a warp (segments of
    2..16 lanes), long ones take several warps where the rows are too few to keep memory busy."""
    rows, n, _ = scan.split()
    rows, n = _static(rows), _static(n)
    lanes = _lanes(scan.narrowest, n)
    # 64 bytes of accumulator a thread: four float4 loads in flight before the first is used
    per_thread = max(lanes, THREAD_BYTES // (tvm.DataType(scan.dtype).bits // 8))
    if n is None:
        return lanes, per_thread // lanes, WARP, 1 if rows is not None and rows >= TARGET_WARPS else 4, 1
    threads = min(WARP, 1 << (_ceil(n, per_thread) - 1).bit_length())
    warps = 1 if rows is None or threads < WARP else \
        min(32, _pow2_at_most(TARGET_WARPS // max(rows, 1)), _pow2_at_most(_ceil(n, WARP * per_thread)))
    rows_a_block = _ceil(rows, WARP // threads) if rows is not None else 8
    return lanes, per_thread // lanes, threads, warps, (min(8, rows_a_block) if warps == 1 else 1)


def _ceil(a: int, b: int) -> int:
    return -(-a // b)


class _RowTemplate:
    """What the row template is built from: its sizes and dtypes, and its index expressions (written
    out at each use, not bound to names: a bound index hides its alignment from the CUDA code
    generator, which then gathers a vector's elements one by one)."""

    def __init__(self, scan: Scan):
        self.lanes, self.vectors, seg, self.warps, self.per_block = row_shape(scan)
        self.rows, self.n, _ = scan.split()
        self.per_thread = self.lanes * self.vectors
        threads = WARP * self.warps if self.warps > 1 else seg   # a row's threads
        self.threads, self.tile, self.steps = threads, threads * self.per_thread, (min(threads, WARP) - 1).bit_length()
        self.total = self.rows * self.n
        self.shape, self.in_dtype, self.out_dtype, self.dtype = scan.shape, scan.in_dtype, scan.out_dtype, scan.dtype
        self.ident, self.combine, self.cast, self.rounded = scan.identity, scan.combine, scan.cast, scan.rounded
        self.exclusive = scan.exclusive
        self.aligned = self.lanes > 1
        self.width = min(threads, WARP)   # the shuffles' segment
        # a thread's vectors contiguous, the warp's u-th loads then 64 bytes apart, half a sector each
        # (H200: rows of 4096 float32 at 2.2 TB/s, float16 with 32 bytes a thread at 2.8): instead the
        # row's threads' u-th vectors side by side, a chunk scanned across them at a time (a shuffle scan
        # a vector); not for a block of warps a row (a barrier a chunk) nor single elements (one a lane)
        self.coalesced = self.warps == 1 and self.lanes > 1
        self.blocks = _ceildiv(self.rows, self.per_block * (WARP // self.width)) if self.warps == 1 else self.rows

    def row(self, bx, ty, tx):
        if self.warps == 1:
            return (bx * self.per_block + ty) * (WARP // self.width) + tx // self.width
        return bx

    def lane(self, tx):
        return tx % self.width   # within the row's segment or warp

    def start(self, t, tx, u):
        """The row position of the thread's u-th vector in tile t (see `coalesced`)."""
        if self.coalesced:
            return t * self.tile + u * (self.threads * self.lanes) + (tx % self.threads) * self.lanes
        return t * self.tile + (tx % self.threads) * self.per_thread + u * self.lanes

    def base(self, bx, ty, t, tx, u):
        return self.row(bx, ty, tx) * self.n + self.start(t, tx, u)

    def full(self, bx, ty, t, tx, u):
        """Whether the thread's u-th vector lies in the row: it loads and stores it whole, whatever the others do."""
        return T.And(self.row(bx, ty, tx) < self.rows, self.start(t, tx, u) + self.lanes <= self.n)

    def inside(self, bx, ty, t, tx, u, v):
        return T.And(self.row(bx, ty, tx) < self.rows, self.start(t, tx, u) + v < self.n)


def row_kernel(scan: Scan) -> tirx.PrimFunc:
    """The row template for `scan` (inner size 1): a tile is `threads x per_thread` elements of a row,
    each thread scanning its elements in registers, the row's threads their totals (shuffles within
    a segment of a warp; across warps through shared memory), the carry adding earlier tiles' totals."""
    p = _RowTemplate(scan)

    # state: 0 the row's carry, 1 the thread's inclusive prefix among its warp, 2 the thread's prefix.
    # Every lane runs every shuffle (a row past the end too): its loads and stores are guarded instead.
    @T.prim_func(private=True)
    def scan_rows(x: T.handle, y: T.handle):
        X = T.match_buffer(x, p.shape, p.in_dtype)
        Y = T.match_buffer(y, p.shape, p.out_dtype)
        Xf = T.decl_buffer((p.total,), p.in_dtype, data=X.data)
        Yf = T.decl_buffer((p.total,), p.out_dtype, data=Y.data)
        for bx in T.thread_binding(p.blocks, thread="blockIdx.x"):
            for ty in T.thread_binding(p.per_block, thread="threadIdx.y"):
                for tx in T.thread_binding(WARP * p.warps, thread="threadIdx.x"):
                    vals = T.alloc_buffer((p.per_thread,), p.dtype, scope="local")
                    state = T.alloc_buffer((3,), p.dtype, scope="local")
                    totals = T.alloc_buffer((2, p.warps), p.dtype, scope="shared")
                    state[0] = p.ident
                    for t in T.serial(_ceildiv(p.n, p.tile)):
                        _load_row_tile(p, Xf, vals, bx, ty, t, tx)
                        _scan_row_tile(p, vals, state, totals, t, tx)
                        _store_row_tile(p, Yf, vals, state, bx, ty, t, tx)
    return scan_rows


@T.macro
def _load_row_tile(p, Xf, vals, bx, ty, t, tx):
    """The thread's elements of tile t, in the accumulator's dtype (the identity past the row's end)."""
    for u in T.serial(p.vectors):
        if p.aligned and p.full(bx, ty, t, tx, u):
            for v in T.vectorized(p.lanes):
                vals[u * p.lanes + v] = p.cast(Xf[p.base(bx, ty, t, tx, u) + v])
        else:
            for v in T.serial(p.lanes):
                vals[u * p.lanes + v] = T.if_then_else(p.inside(bx, ty, t, tx, u, v),
                                                       p.cast(Xf[p.base(bx, ty, t, tx, u) + v]), p.ident)


@T.macro
def _warp_prefix(p, state, tx, total):
    """state[1]: the inclusive scan of `total` over the segment's lanes; state[2]: the carry and the
    lanes before this one (every lane runs every shuffle)."""
    state[1] = total
    for k in T.unroll(p.steps):
        up = T.tvm_warp_shuffle_up(FULL_MASK, state[1], T.shift_left(1, k), p.width, WARP)
        if p.lane(tx) >= T.shift_left(1, k):
            state[1] = p.combine(up, state[1])
    before = T.tvm_warp_shuffle_up(FULL_MASK, state[1], 1, p.width, WARP)
    state[2] = p.combine(state[0], T.if_then_else(p.lane(tx) == 0, p.ident, before))


@T.macro
def _given_prefix(p, vals, state, first, count):
    """vals[first:first + count], scanned in registers, each combined with the thread's prefix
    state[2] (shifted by one element for an exclusive scan)."""
    if p.exclusive:
        for v in T.serial(count - 1):
            vals[first + count - 1 - v] = p.combine(state[2], vals[first + count - 2 - v])
        vals[first] = state[2]
    else:
        for v in T.serial(count):
            vals[first + v] = p.combine(state[2], vals[first + v])


@T.macro
def _scan_row_chunk(p, vals, state, tx, u):
    """Chunk u (the row's threads' u-th vectors): the thread's vector scanned in registers, the vectors'
    totals across the threads (shuffles), each element given its prefix; the carry grows by the chunk."""
    for v in T.serial(p.lanes - 1):
        vals[u * p.lanes + v + 1] = p.combine(vals[u * p.lanes + v], vals[u * p.lanes + v + 1])
    _warp_prefix(p, state, tx, vals[u * p.lanes + p.lanes - 1])
    state[0] = p.combine(state[0], T.tvm_warp_shuffle(FULL_MASK, state[1], p.width - 1, p.width, WARP))
    _given_prefix(p, vals, state, u * p.lanes, p.lanes)


@T.macro
def _scan_row_thread_tile(p, vals, state, totals, t, tx):
    """Tile t of contiguous elements a thread: scanned in registers, then the threads' totals across the row."""
    for e in T.serial(p.per_thread - 1):
        vals[e + 1] = p.combine(vals[e], vals[e + 1])
    _warp_prefix(p, state, tx, vals[p.per_thread - 1])
    if p.warps == 1:
        state[0] = p.combine(state[0], T.tvm_warp_shuffle(FULL_MASK, state[1], p.width - 1, p.width, WARP))
    else:
        # two slots: a tile's totals never overwrite those the last tile still reads
        if p.lane(tx) == WARP - 1:
            totals[t % 2, tx // WARP] = state[1]
        T.tvm_storage_sync("shared")
        for w in T.serial(p.warps):
            if w < tx // WARP:
                state[2] = p.combine(state[2], totals[t % 2, w])
            state[0] = p.combine(state[0], totals[t % 2, w])


@T.macro
def _scan_row_tile(p, vals, state, totals, t, tx):
    """Tile t scanned in registers, then across the row's threads; the carry grows by the tile's total
    (by each chunk's in turn where `coalesced`, the elements then already given their prefixes)."""
    if p.coalesced:
        for u in T.unroll(p.vectors):
            _scan_row_chunk(p, vals, state, tx, u)
    else:
        _scan_row_thread_tile(p, vals, state, totals, t, tx)


@T.macro
def _store_row_tile(p, Yf, vals, state, bx, ty, t, tx):
    """Tile t's elements from the thread's prefix (shifted by one for an exclusive scan; `coalesced`
    chunks have theirs already), stored."""
    if not p.coalesced:
        _given_prefix(p, vals, state, 0, p.per_thread)
    for u in T.serial(p.vectors):
        if p.aligned and p.full(bx, ty, t, tx, u):
            for v in T.vectorized(p.lanes):
                Yf[p.base(bx, ty, t, tx, u) + v] = p.rounded(vals[u * p.lanes + v])
        else:
            for v in T.serial(p.lanes):
                if p.inside(bx, ty, t, tx, u, v):
                    Yf[p.base(bx, ty, t, tx, u) + v] = p.rounded(vals[u * p.lanes + v])


# --------------------------------------------------------------------------------------------------
# columns: the scanned axis outer or in the middle
# --------------------------------------------------------------------------------------------------

def column_shape(scan: Scan) -> tuple[int, int]:
    """(lanes, chunks) of a column scan: adjacent columns per thread (one vector), and how many
    chunks the scanned axis is split into so that enough threads run."""
    outer, n, inner = scan.split()
    # no wider than a 16-byte accumulator: TVM writes a float32x8 register vector as a ulonglong4 that
    # make_ulonglong4 of 8 floats builds, which nvcc refuses
    lanes = min(_lanes(scan.narrowest, inner), VECTOR_BYTES // (tvm.DataType(scan.dtype).bits // 8))
    columns, n = _static(outer * inner), _static(n)
    if columns is None:
        return lanes, 1
    wanted = _ceil(TARGET_THREADS, max(columns // lanes, 1))
    chunks = max(1, min(wanted, n // MIN_CHUNK if n is not None else 16))
    # many chunks: a multiple of a vector of sums, the chunk-prefix row scan then loads each column's sums
    # 16 bytes at a time (a few chunks: their count kept, dropping one would idle 1/n of the column threads)
    align = VECTOR_BYTES // (tvm.DataType(scan.dtype).bits // 8)
    return lanes, chunks - chunks % align if chunks >= 8 * align else chunks


def _column_grid(scan: Scan, lanes: int, chunks: int):
    outer, n, inner = scan.split()
    threads = outer * chunks * tirx.floordiv(inner, lanes)
    per_block = 256 if _static(threads) is None else max(WARP, min(256, _static(threads)))
    return threads, per_block


class _ColumnTemplate:
    """What the column template is built from: sizes, dtypes and index expressions (written out, as
    the row template's): thread g runs `lanes` adjacent columns from i (outer index o) over chunk c."""

    def __init__(self, scan: Scan, split: bool):
        self.lanes, chunks = column_shape(scan)
        self.chunks = chunks if split else 1
        self.outer, self.n, self.inner = scan.split()
        self.threads, self.per_block = _column_grid(scan, self.lanes, self.chunks)
        self.vectors = tirx.floordiv(self.inner, self.lanes)
        self.chunk = _ceildiv(self.n, self.chunks)
        self.total, self.sums = self.outer * self.n * self.inner, self.outer * self.chunks * self.inner
        self.shape, self.in_dtype, self.out_dtype, self.dtype = scan.shape, scan.in_dtype, scan.out_dtype, scan.dtype
        self.ident, self.combine, self.cast, self.rounded = scan.identity, scan.combine, scan.cast, scan.rounded
        self.exclusive = scan.exclusive
        self.split = self.chunks > 1
        # a column's loads are independent of its running total: unrolled, a thread has them all in flight
        # (the loop of a runtime length otherwise waits a load latency every few rows)
        self.sum_unroll = max(1, SUM_UNROLL // self.lanes)
        self.unroll = max(1, UNROLL // self.lanes)

    def g(self, bx, tx):
        return bx * self.per_block + tx

    def i(self, bx, tx):
        return self.g(bx, tx) % self.vectors * self.lanes

    def c(self, bx, tx):
        return self.g(bx, tx) // self.vectors % self.chunks

    def o(self, bx, tx):
        return self.g(bx, tx) // self.vectors // self.chunks

    def at(self, bx, tx, j):
        return (self.o(bx, tx) * self.n + self.c(bx, tx) * self.chunk + j) * self.inner + self.i(bx, tx)

    def sum_at(self, bx, tx, v):
        """Column i + v's sum of chunk c: the sums are (outer, inner, chunks), a column's chunks contiguous."""
        return ((self.o(bx, tx) * self.inner + self.i(bx, tx) + v) * self.chunks + self.c(bx, tx))

    def length(self, bx, tx):
        return T.max(T.min(self.n, (self.c(bx, tx) + 1) * self.chunk) - self.c(bx, tx) * self.chunk, 0)


@T.macro
def _sum_row(p, Xf, acc, bx, tx, j):
    """Row j of the thread's chunk added to its columns' sums."""
    for v in T.vectorized(p.lanes):
        acc[v] = p.combine(acc[v], p.cast(Xf[p.at(bx, tx, j) + v]))


@T.macro
def _scan_row(p, Xf, Yf, acc, bx, tx, j):
    """Row j of the thread's chunk scanned: the running totals stored after (before, exclusive) it."""
    if p.exclusive:
        for v in T.vectorized(p.lanes):
            Yf[p.at(bx, tx, j) + v] = p.rounded(acc[v])
            acc[v] = p.combine(acc[v], p.cast(Xf[p.at(bx, tx, j) + v]))
    else:
        for v in T.vectorized(p.lanes):
            acc[v] = p.combine(acc[v], p.cast(Xf[p.at(bx, tx, j) + v]))
            Yf[p.at(bx, tx, j) + v] = p.rounded(acc[v])


def column_kernels(scan: Scan, split: bool = True) -> list[tirx.PrimFunc]:
    """The column template for `scan`: one kernel (always, for split=False), or three: each chunk's
    sum, the exclusive scan of those sums (the row template over each column's chunks: a thread a column
    walking thousands of chunks took 100 us on an H200, x[294521, 7]), and the scan of each chunk from its
    prefix."""
    p = _ColumnTemplate(scan, split)
    if not p.split:
        return [_columns(p)]

    @T.prim_func(private=True)
    def chunk_sums(x: T.handle, s: T.handle):
        X = T.match_buffer(x, p.shape, p.in_dtype)
        S = T.match_buffer(s, (p.outer, p.inner, p.chunks), p.dtype)
        Xf = T.decl_buffer((p.total,), p.in_dtype, data=X.data)
        Sf = T.decl_buffer((p.sums,), p.dtype, data=S.data)
        for bx in T.thread_binding(_ceildiv(p.threads, p.per_block), thread="blockIdx.x"):
            for tx in T.thread_binding(p.per_block, thread="threadIdx.x"):
                acc = T.alloc_buffer((p.lanes,), p.dtype, scope="local")
                if p.g(bx, tx) < p.threads:
                    for v in T.vectorized(p.lanes):
                        acc[v] = p.ident
                    if p.sum_unroll > 1:
                        for jo in T.serial(p.length(bx, tx) // p.sum_unroll):
                            for ju in T.unroll(p.sum_unroll):
                                _sum_row(p, Xf, acc, bx, tx, jo * p.sum_unroll + ju)
                        for jt in T.serial(p.length(bx, tx) % p.sum_unroll):
                            _sum_row(p, Xf, acc, bx, tx, p.length(bx, tx) // p.sum_unroll * p.sum_unroll + jt)
                    else:
                        for j in T.serial(p.length(bx, tx)):
                            _sum_row(p, Xf, acc, bx, tx, j)
                    for v in T.serial(p.lanes):
                        Sf[p.sum_at(bx, tx, v)] = acc[v]

    @T.prim_func(private=True)
    def scan_chunks(x: T.handle, s: T.handle, y: T.handle):
        X = T.match_buffer(x, p.shape, p.in_dtype)
        S = T.match_buffer(s, (p.outer, p.inner, p.chunks), p.dtype)
        Y = T.match_buffer(y, p.shape, p.out_dtype)
        Xf = T.decl_buffer((p.total,), p.in_dtype, data=X.data)
        Sf = T.decl_buffer((p.sums,), p.dtype, data=S.data)
        Yf = T.decl_buffer((p.total,), p.out_dtype, data=Y.data)
        _scan_columns(p, Xf, Sf, Yf)
    return [chunk_sums, row_kernel(prefix_scan(scan)), scan_chunks]


def prefix_scan(scan: Scan) -> Scan:
    """The exclusive scan of a split column scan's chunk sums: rows of (outer, inner, chunks)."""
    outer, _, inner = scan.split()
    chunks = column_shape(scan)[1]
    size = lambda e, name: I64(_static(e)) if _static(e) is not None else tirx.Var(name, "int64")  # noqa: E731
    return Scan(scan.op, (size(outer, "outer"), size(inner, "inner"), I64(chunks)), 2, scan.dtype, scan.dtype,
                True, scan.dtype)


@T.macro
def _scan_columns(p, Xf, Sf, Yf):
    """Each thread's columns scanned down its chunk, from the chunk's prefix in Sf where split."""
    for bx in T.thread_binding(_ceildiv(p.threads, p.per_block), thread="blockIdx.x"):
        for tx in T.thread_binding(p.per_block, thread="threadIdx.x"):
            acc = T.alloc_buffer((p.lanes,), p.dtype, scope="local")
            if p.g(bx, tx) < p.threads:
                for v in T.vectorized(p.lanes):
                    acc[v] = p.ident
                if p.split:
                    for v in T.serial(p.lanes):
                        acc[v] = Sf[p.sum_at(bx, tx, v)]
                if p.unroll > 1:
                    for jo in T.serial(p.length(bx, tx) // p.unroll):
                        for ju in T.unroll(p.unroll):
                            _scan_row(p, Xf, Yf, acc, bx, tx, jo * p.unroll + ju)
                    for jt in T.serial(p.length(bx, tx) % p.unroll):
                        _scan_row(p, Xf, Yf, acc, bx, tx, p.length(bx, tx) // p.unroll * p.unroll + jt)
                else:
                    for j in T.serial(p.length(bx, tx)):
                        _scan_row(p, Xf, Yf, acc, bx, tx, j)


def _columns(p: _ColumnTemplate) -> tirx.PrimFunc:
    """The unsplit column scan: `_scan_columns` with no chunk sums."""
    @T.prim_func(private=True)
    def scan_columns(x: T.handle, y: T.handle):
        X = T.match_buffer(x, p.shape, p.in_dtype)
        Y = T.match_buffer(y, p.shape, p.out_dtype)
        Xf = T.decl_buffer((p.total,), p.in_dtype, data=X.data)
        Yf = T.decl_buffer((p.total,), p.out_dtype, data=Y.data)
        _scan_columns(p, Xf, None, Yf)
    return scan_columns


# --------------------------------------------------------------------------------------------------
# Relax
# --------------------------------------------------------------------------------------------------

def plan(op: str, x: relax.Expr, axis: int, exclusive: bool, dtype: str, out_dtype: str | None = None) -> Scan | None:
    """The Scan of `x` (the scan's input, or the half tensor its float32 input was cast from) along
    `axis`, accumulated in `dtype` and written in `out_dtype` (default: dtype); None where the templates
    decline it."""
    if op not in STEPS or not isinstance(x.ty.shape, relax.ShapeExpr):
        return None
    if str(x.ty.dtype) not in DTYPES or dtype not in DTYPES:
        return None   # narrow integers and bools arrive as int64 (the library accumulates them there)
    shape = tuple(_size(s, f"n{k}") for k, s in enumerate(x.ty.shape.values))
    scan = Scan(op, shape, axis % len(shape), str(x.ty.dtype), out_dtype or dtype, exclusive, dtype)
    rows, n, inner = (_static(s) for s in scan.split())
    if 0 in (rows, n, inner):
        return None   # nothing to scan: a launch of no blocks is a CUDA error (torch's scan returns at once)
    if inner == 1 and rows is not None and rows < FEW_ROWS and (n is None or n > LONG_ROW):
        return None   # a few long rows: torch's single-pass scan fills the GPU, a block per row would not
    return scan


def _size(size, name: str):
    """A size for the kernel: an int64 constant, or a variable of its own for a symbolic one (Relax's
    may be an expression, `m + 1`, which a kernel's buffer cannot bind)."""
    return tirx.IntImm("int64", int(size.value)) if isinstance(size, tirx.IntImm) else tirx.Var(name, "int64")


def _prepared(func: tirx.PrimFunc, rule: str, scan: Scan) -> tirx.PrimFunc:
    """A kernel as the pipeline takes a scheduled one: a root block, scheduled, opaque, named; SCAN_ATTR
    says which scan it computes (`rounded_once` reads it)."""
    root = s_tir.SBlockRealize([], True, s_tir.SBlock([], [], [], "root", func.body))
    return func.with_body(root).with_attrs({"s_tir": True, "tirx.is_scheduled": True, "op_pattern": OPAQUE,
                                            RULE_ATTR: rule, SCAN_ATTR: f"{scan.op} {scan.axis} {int(scan.exclusive)}"})


def _half_source(x: relax.Expr, bound) -> relax.Expr:
    """The half tensor a float32 scan input was cast from where the scan alone reads the cast (the
    library scans halves as float32 copies, codegen.library.VIA_FLOAT32): the kernel casts as it
    loads, reading 2 bytes an element instead of a producer writing 4 for it. Else x."""
    value = bound(x)
    if isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and value.op.name == "relax.astype" \
            and str(value.args[0].ty.dtype) in HALVES and str(x.ty.dtype) == "float32":
        return value.args[0]
    return x


def rewrite(builder: relax.BlockBuilder, call: relax.Call, bound=lambda x: None) -> relax.Expr | None:
    """The Relax cumsum/cumprod `call` as call_tir of our kernels (added to the builder's module),
    None to decline. `bound(var)`: the value var is bound to, where the scan alone reads it."""
    if call.attrs.axis is None:
        return None   # the library reshapes to 1-d first; a Relax module of our own may not
    return _scan_call(builder, call.op.name, _half_source(call.args[0], bound), int(call.attrs.axis),
                      bool(call.attrs.exclusive), call.ty)


def _scan_call(builder, op: str, x, axis: int, exclusive: bool, ty, out_dtype=None, sums=None):
    """call_tir of the kernels of a scan of x giving `ty` (or its shape in `out_dtype`); `sums`: the
    chunk sums of a split column scan, already computed."""
    scan = plan(op, x, axis, exclusive, str(ty.dtype), out_dtype)
    if scan is None:
        return None
    out_ty = relax.TensorType(ty.shape, scan.out_dtype, ty.vdevice)
    inner = scan.split()[2]
    name = op.split(".")[1]
    if _static(inner) == 1:
        gv = builder.add_func(_prepared(row_kernel(scan), _row_rule(scan), scan), f"{name}_rows")
        return relax.call_tir(gv, [x], out_ty)
    kernels = column_kernels(scan)
    lanes, chunks = column_shape(scan)
    rule = f"Scan (columns: {lanes} a thread, {chunks} chunk{'s' * (chunks > 1)})"
    prefix_rule = f"{rule}: chunk prefixes ({_row_threads(prefix_scan(scan))} a column's chunks)"
    if len(kernels) == 1:
        gv = builder.add_func(_prepared(kernels[0], rule, scan), f"{name}_columns")
        return relax.call_tir(gv, [x], out_ty)
    if sums is None:   # each chunk's sum, then the scan of those: each chunk's prefix
        sums_gv = builder.add_func(_prepared(kernels[0], rule + ": chunk sums", scan), f"{name}_chunk_sums")
        prefix_gv = builder.add_func(_prepared(kernels[1], prefix_rule, scan), f"{name}_chunk_prefixes")
        sizes = list(x.ty.shape.values)   # the chunk sums' shape in the caller's sizes
        one = tirx.const(1, "int64")
        outer, inner = math.prod(sizes[:scan.axis], start=one), math.prod(sizes[scan.axis + 1:], start=one)
        sums_ty = relax.TensorType([outer, inner, chunks], scan.dtype, out_ty.vdevice)
        sums = builder.emit(relax.call_tir(sums_gv, [x], sums_ty))
        sums = builder.emit(relax.call_tir(prefix_gv, [sums], sums_ty))
    gv = builder.add_func(_prepared(kernels[2], rule, scan), f"{name}_columns")
    return relax.call_tir(gv, [x, sums], out_ty)


def _row_threads(scan: Scan) -> str:
    """A row scan's threads a row, in words."""
    _, _, seg, warps, _ = row_shape(scan)
    return f"{warps} warps" if warps > 1 else "1 warp" if seg == WARP else f"{seg} lane{'s' * (seg > 1)}"


def _row_rule(scan: Scan) -> str:
    """The rule a row scan's kernel reports: its threads a row and elements a thread."""
    lanes, vectors = row_shape(scan)[:2]
    return f"Scan (rows: {_row_threads(scan)} a row, {lanes * vectors} elements a thread)"


def rounded_once(builder: relax.BlockBuilder, call: relax.Call, bound) -> relax.Expr | None:
    """`astype(scan, half)` of one of our float32 scans that nothing else reads, as that scan writing
    the half result itself, rounded once from its float32 accumulator; None for any other call."""
    if not (isinstance(call.op, tvm.ir.Op) and call.op.name == "relax.astype" and str(call.attrs.dtype) in HALVES):
        return None
    value = bound(call.args[0])
    if not (isinstance(value, relax.Call) and isinstance(value.op, tvm.ir.Op) and value.op.name == "relax.call_tir"
            and str(value.ty.dtype) == "float32"):
        return None
    kernel = builder.get()[value.args[0]]
    if kernel.attrs is None or SCAN_ATTR not in kernel.attrs:
        return None
    op, axis, exclusive = str(kernel.attrs[SCAN_ATTR]).split()
    operands = list(value.args[1].fields)
    return _scan_call(builder, op, operands[0], int(axis), exclusive == "1", value.ty, str(call.attrs.dtype),
                      operands[1] if len(operands) > 1 else None)
