"""cumsum/cumprod on a GPU as our own kernels (babytriton/operators/scans.py): a row template (scanned axis
contiguous: registers, warp shuffles, shared memory, a carry across tiles) and a column template
(a thread a column, the scanned axis split into chunks where the columns are few).

Here (no GPU): the templates' choices by shape; the column template's meaning, its threads run as
serial loops on the CPU (it has no shuffles); every case's CUDA generated and compiled by nvcc. On a
GPU (`-m gpu`): every axis of several shapes in every dtype, NaN/inf, exclusive scans, symbolic and
empty sizes, compared with torch.
"""
import contextlib
import re
import shutil

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
import torch
import tvm
import tvm_ffi
from tvm import tirx

import babytriton as bt
from babytriton.operators import scans

SM90 = {"kind": "cuda", "arch": "sm_90"}
I64 = lambda v: tirx.IntImm("int64", v)  # noqa: E731


def _scan(shape, axis, op="relax.cumsum", in_dtype="float32", out_dtype="float32", exclusive=False):
    return scans.Scan(op, tuple(I64(s) if isinstance(s, int) else s for s in shape), axis, in_dtype, out_dtype,
                      exclusive)


# --------------------------------------------------------------------------------------------------
# choices by shape
# --------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("shape, axis, want", [
    ((8192, 4096), 1, (4, 4, 32, 1, 8)),     # many long rows: a warp a row, four float4 a thread
    ((192, 9158), 1, (2, 8, 32, 16, 1)),     # few long rows: 16 warps a row; 9158 = 2 x 4579: float2
    ((100000, 4), 1, (4, 4, 1, 1, 8)),       # short rows: a lane a row, 32 rows a warp
    ((300, 60), 1, (4, 4, 4, 1, 8)),         # 4 lanes a row
    ((7, 1), 0, (1, 16, 1, 1, 1)),           # (n=7 of one row) a single lane, scalar loads
])
def test_row_shapes_follow_the_iteration_space(shape, axis, want):
    assert scans.row_shape(_scan(shape, axis)) == want


def test_column_shapes_split_few_columns_into_chunks():
    assert scans.column_shape(_scan((8192, 4096), 0)) == (4, 128)        # 1024 threads x 128 chunks of 64
    assert scans.column_shape(_scan((12, 16, 9158), 1)) == (2, 1)        # 16 rows: too short to split
    assert scans.column_shape(_scan((503, 2049), 0)) == (1, 15)          # odd width: scalar columns
    n = tirx.Var("n", "int64")
    assert scans.column_shape(_scan((n, 64), 0)) == (4, 16)    # an unknown length: 16 chunks, empty where n is short
    assert scans.column_shape(_scan((64, n), 0)) == (1, 1)     # unknown columns: assumed many


def test_thousands_of_chunks_are_scanned_by_warps_not_a_thread_a_column():
    """x[294521, 7] down its rows (H200: a thread a column walking 9203 chunk sums took 102 us): the
    sums are 7 rows of 9200 chunks, a column's contiguous, scanned by 16 warps a row with float4 loads."""
    scan = _scan((294521, 7), 0, in_dtype="float16")
    assert scans.column_shape(scan) == (1, 9200)
    prefixes = scans.prefix_scan(scan)
    assert [scans._static(e) for e in prefixes.split()] == [7, 9200, 1] and prefixes.exclusive
    assert scans.row_shape(prefixes) == (4, 4, 32, 16, 1)


@settings(max_examples=200, deadline=None)
@given(outer=st.integers(1, 1 << 12), n=st.integers(2, 1 << 22), inner=st.integers(2, 1 << 12),
       dtype=st.sampled_from(["float32", "float16", "float64", "int64"]))
def test_generated_split_column_scans_keep_every_stage_short(outer, n, inner, dtype):
    """Whatever the shape: chunks of at least MIN_CHUNK rows, many a multiple of a vector of sums, and the
    chunk-prefix stage a row scan of a few tiles a row (not a serial walk over the chunks)."""
    scan = _scan((outer, n, inner), 1, in_dtype=dtype, out_dtype=dtype)
    lanes, chunks = scans.column_shape(scan)
    if chunks == 1:
        return
    align = scans.VECTOR_BYTES * 8 // tvm.DataType(scan.dtype).bits
    assert n // chunks >= scans.MIN_CHUNK and (chunks % align == 0 or chunks < 8 * align)
    assert outer * chunks * (inner // lanes) <= 2 * scans.TARGET_THREADS + outer * inner
    p_lanes, vectors, threads, warps, _ = scans.row_shape(scans.prefix_scan(scan))
    tile = (32 * warps if warps > 1 else threads) * p_lanes * vectors
    assert -(-chunks // tile) <= 16 and (p_lanes == align or chunks < 8 * align)


def test_few_long_rows_and_unknown_ranks_stay_with_torch():
    from tvm import relax
    x = relax.Var("x", relax.TensorType((4, 100000), "float32"))
    assert scans.plan("relax.cumsum", x, 1, False, "float32") is None
    assert scans.plan("relax.cumsum", x, 0, False, "float32") is not None   # columns: 100000 threads
    y = relax.Var("y", relax.TensorType(ndim=2, dtype="float32"))
    assert scans.plan("relax.cumsum", y, 1, False, "float32") is None


# --------------------------------------------------------------------------------------------------
# the column template's meaning, run on the CPU
# --------------------------------------------------------------------------------------------------

def _serial(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """`func` with its thread loops run one after another: what the GPU computes, for a kernel whose
    threads never talk to each other."""
    def serial(loop):
        if loop.kind != tirx.ForKind.THREAD_BINDING:
            return loop
        return tirx.For(loop.loop_var, loop.min, loop.extent, tirx.ForKind.SERIAL, loop.body)
    return func.with_body(tvm_ffi.structural_map(func.body, (tirx.For, serial)))


def _run_columns(scan: scans.Scan, x: torch.Tensor) -> torch.Tensor:
    """The column kernels run on the CPU; a split scan's chunk prefixes (the row template: warp shuffles,
    which the CPU has not) by torch's exclusive scan of the first kernel's sums, a column's chunks contiguous."""
    made = scans.column_kernels(scan)
    kernels = [tvm.compile(tvm.IRModule({"main": _serial(k).with_attr("global_symbol", "main")}), target="llvm")
               for k in (made if len(made) == 1 else made[::2])]
    out = tvm.runtime.empty(tuple(x.shape), scan.out_dtype, tvm.cpu())
    x_ = tvm.runtime.tensor(x.numpy())
    if len(kernels) == 1:
        kernels[0](x_, out)
    else:
        outer, inner = int(np.prod(x.shape[:scan.axis])), int(np.prod(x.shape[scan.axis + 1:]))
        sums = tvm.runtime.empty((outer, inner, scans.column_shape(scan)[1]), scan.dtype, tvm.cpu())
        kernels[0](x_, sums)
        prefixes = _reference(torch.from_numpy(sums.numpy()), 2, scan.op, True, getattr(torch, scan.dtype))
        kernels[1](x_, tvm.runtime.tensor(prefixes.numpy()), out)
    return torch.from_numpy(out.numpy())


def _reference(x: torch.Tensor, axis: int, op: str, exclusive: bool, dtype) -> torch.Tensor:
    step, identity = (torch.cumsum, 0) if op == "relax.cumsum" else (torch.cumprod, 1)
    y = step(x.to(dtype), dim=axis)
    if not exclusive or y.shape[axis] == 0:    # an empty axis has no first element to shift in
        return y
    first = torch.full_like(y.narrow(axis, 0, 1), identity)
    return torch.cat([first, y.narrow(axis, 0, y.shape[axis] - 1)], dim=axis)


def _values(shape, dtype: torch.dtype, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    if dtype.is_floating_point:
        x = 1 + torch.randn(*shape, generator=g) / 64     # products stay finite over long axes
        flat = x.view(-1)
        if flat.numel() > 7:
            flat[3], flat[flat.numel() // 2], flat[-2] = float("nan"), float("inf"), float("-inf")
        return x.to(dtype)
    return torch.randint(-3, 4, shape, generator=g).to(dtype)


COLUMN_CASES = [
    ((2048, 64), 0, "relax.cumsum", "float32", False),    # 16 threads of 4 columns: 64 chunks
    ((300, 7, 5), 1, "relax.cumprod", "float32", True),   # middle axis, odd sizes, exclusive
    ((40, 3, 6), 0, "relax.cumsum", "int64", False),
    ((1000, 4, 2), 0, "relax.cumsum", "int32", True),     # int32 in, accumulated in int64
    ((5, 0, 3), 1, "relax.cumsum", "float32", False),     # an empty scanned axis
    ((3, 500, 6), 1, "relax.cumprod", "float32", True),   # a middle axis in 15 chunks, each (o, i) column's sums a row
    ((2, 2000, 3), 1, "relax.cumsum", "int64", False),    # 62 chunks of 33 rows, the last 13
    ((20000, 2), 0, "relax.cumsum", "float64", True),     # 624 chunks, a multiple of 2 float64 sums
]


@pytest.mark.parametrize("shape, axis, op, dtype, exclusive", COLUMN_CASES)
def test_column_template_matches_torch_on_the_cpu(shape, axis, op, dtype, exclusive):
    x = _values(shape, getattr(torch, dtype))
    out = "int64" if dtype.startswith("int") else dtype
    got = _run_columns(_scan(shape, axis, op, dtype, out, exclusive), x)
    want = _reference(x, axis, op, exclusive, getattr(torch, out))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4, equal_nan=True)


def test_column_template_takes_symbolic_sizes():
    n, m = tirx.Var("n", "int64"), tirx.Var("m", "int64")
    scan = _scan((n, 3, m), 0, exclusive=True)
    for shape in [(37, 3, 5), (1, 3, 8)]:
        x = _values(shape, torch.float32, seed=shape[0])
        torch.testing.assert_close(_run_columns(scan, x), _reference(x, 0, scan.op, True, torch.float32),
                                   rtol=1e-5, atol=1e-4, equal_nan=True)


@pytest.mark.parametrize("rows", [1, 37, 1000])
def test_a_symbolic_length_over_static_columns_is_split_into_16_chunks(rows):
    """x[n, 64] down n unknown: 16 chunks of ceil(n / 16) rows, the last ones empty where n is short."""
    scan = _scan((tirx.Var("n", "int64"), 64), 0)
    assert scans.column_shape(scan) == (4, 16)
    x = _values((rows, 64), torch.float32, seed=rows)
    torch.testing.assert_close(_run_columns(scan, x), _reference(x, 0, scan.op, False, torch.float32),
                               rtol=1e-5, atol=1e-4, equal_nan=True)


@settings(max_examples=8, deadline=None)
@given(n=st.integers(64, 20000), inner=st.integers(2, 9), op=st.sampled_from(["relax.cumsum", "relax.cumprod"]),
       out=st.sampled_from(["float32", "float16"]), exclusive=st.booleans(), unroll=st.sampled_from(["1", "4", "16"]))
def test_generated_many_chunk_half_scans_match_torch_on_the_cpu(n, inner, op, out, exclusive, unroll):
    """Few columns down many rows (hundreds of chunks): float16 in (numpy has no bfloat16: nvcc and the
    GPU tests take that), float32 or float16 out, NaN and inf; a chunk's rows in a loop or unrolled."""
    x = _values((n, inner), torch.float16, seed=n)
    scan = _scan((n, inner), 0, op, "float16", out, exclusive)
    assert scans.column_shape(scan)[1] > 1
    want = _reference(x.float(), 0, op, exclusive, torch.float32).to(getattr(torch, out))
    with _patched("UNROLL", int(unroll)), _patched("SUM_UNROLL", 20 // int(unroll)):
        got = _run_columns(scan, x)
    torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2, equal_nan=True)


@contextlib.contextmanager
def _patched(name: str, value: int):
    """scans.NAME set to value inside (hypothesis runs several examples per fixture: no monkeypatch)."""
    old = getattr(scans, name)
    setattr(scans, name, value)
    try:
        yield
    finally:
        setattr(scans, name, old)


SHAPES = st.lists(st.integers(1, 40), min_size=2, max_size=3)


@settings(max_examples=4, deadline=None)
@given(shape=SHAPES, data=st.data())
def test_generated_column_scans_match_torch_on_the_cpu(shape, data):
    axis = data.draw(st.integers(0, len(shape) - 2))      # an axis with something after it
    op = data.draw(st.sampled_from(["relax.cumsum", "relax.cumprod"]))
    dtype, exclusive = data.draw(st.sampled_from(["float32", "int64"])), data.draw(st.booleans())
    x = _values(shape, getattr(torch, dtype), seed=len(shape))
    got = _run_columns(_scan(shape, axis, op, dtype, dtype, exclusive), x)
    torch.testing.assert_close(got, _reference(x, axis, op, exclusive, getattr(torch, dtype)),
                               rtol=1e-5, atol=1e-4, equal_nan=True)


@settings(max_examples=40, deadline=None)
@given(rows=st.integers(1, 1 << 20), n=st.integers(1, 1 << 16), dtype=st.sampled_from(["float32", "float16", "int64"]))
def test_generated_row_shapes_cover_their_rows(rows, n, dtype):
    """Every row gets a power-of-two team of threads inside one block, whole vectors a thread."""
    scan = _scan((rows, n), 1, in_dtype=dtype, out_dtype=dtype)
    lanes, vectors, threads, warps, per_block = scans.row_shape(scan)
    assert threads & (threads - 1) == 0 and 1 <= threads <= 32 and (warps == 1 or threads == 32)
    assert warps & (warps - 1) == 0 and 32 * warps * per_block <= 1024
    assert per_block == 1 or warps == 1                  # shared memory only among one row's warps
    assert n % lanes == 0 and lanes * vectors * tvm.DataType(scan.dtype).bits >= 8 * scans.THREAD_BYTES


# --------------------------------------------------------------------------------------------------
# whole programs built for sm_90 and compiled by nvcc
# --------------------------------------------------------------------------------------------------

def _nvcc(source: str):
    if shutil.which("nvcc"):
        from tvm.support import nvcc
        with tvm.target.Target(SM90):
            assert b".entry" in nvcc.compile_cuda(source, target_format="ptx", compiler="nvcc")


TEMPLATE_CASES = [   # (shape, axis, input dtype, result dtype, exclusive): every dtype each template takes
    ((64, 4096), 0, "float16", "float16", True), ((64, 4096), 1, "bfloat16", "bfloat16", False),
    ((1000, 60), 1, "float16", "float32", False), ((40, 8, 64), 1, "int32", "int64", True),
    ((40, 8, 64), 2, "float64", "float64", False), ((192, 9158), 1, "float32", "float32", True),
    ((40, 8, 64), 0, "bfloat16", "float32", False), ((100000, 3), 1, "int64", "int64", False),
    # split column scans: chunk prefixes as row scans of float32, float64, int64 sums
    ((294521, 7), 0, "float16", "float32", False), ((3000, 3, 2), 0, "float64", "float64", True),
    ((5000, 5), 0, "int32", "int64", True), ((7, 4000, 6), 1, "bfloat16", "bfloat16", False),
]


def test_templates_build_with_nvcc_in_every_dtype():
    """The kernels of every case in one module (one nvcc run): vector casts of halves, int64 shuffles,
    float64, shared memory across warps."""
    target = tvm.target.Target(SM90)
    kernels = {}
    for k, (shape, axis, in_dtype, out_dtype, exclusive) in enumerate(TEMPLATE_CASES):
        scan = _scan(shape, axis, "relax.cumprod" if k % 2 else "relax.cumsum", in_dtype, out_dtype, exclusive)
        made = [scans.row_kernel(scan)] if scans._static(scan.split()[2]) == 1 else scans.column_kernels(scan)
        for j, func in enumerate(made):
            kernels[f"k{k}_{j}"] = func.with_attr("global_symbol", f"k{k}_{j}").with_attr("target", target)
    module = tvm.compile(tvm.IRModule(kernels), target=target).mod
    source = (module.imports[0] if module.imports else module).inspect_source()
    assert source.count("__global__") >= len(kernels)
    _nvcc(source)


@pytest.mark.parametrize("dtype, lanes, vector", [("float32", 4, "float4"), ("float16", 8, "uint4"),
                                                   ("int64", 2, "longlong2")])
def test_a_warps_row_loads_and_stores_whole_spans(dtype, lanes, vector):
    """Rows of 4096, a warp a row: a thread's u-th vector lies beside its neighbours' (the warp's u-th
    load and store are 32 x 16 contiguous bytes, at `u * 32 * lanes`), not 16 contiguous elements a
    thread (each load then half of each 32-byte sector: H200, float32 rows at 2.2 TB/s)."""
    scan = _scan((8192, 4096), 1, in_dtype=dtype, out_dtype=dtype)
    assert scans.row_shape(scan)[2:4] == (32, 1)
    target = tvm.target.Target(SM90)
    func = scans.row_kernel(scan).with_attr("global_symbol", "rows").with_attr("target", target)
    source = tvm.compile(tvm.IRModule({"rows": func}), target=target).mod.imports[0].inspect_source()
    span = rf"\(u(_1)? \* {32 * lanes}\)\) \+ \(\(\(int\)threadIdx.x\) \* {lanes}\)\)\)"
    assert re.search(rf"= \*\({vector}\*\)\(Xf_ptr \+ .*{span}", source), source
    assert re.search(rf"\*\({vector}\*\)\(Yf_ptr \+ .*{span} =", source), source
    assert source.count("__shfl_up_sync((uint)") == 6 * scans.row_shape(scan)[1]   # a warp scan a chunk
    _nvcc(source)


def test_a_block_of_warps_a_row_keeps_a_threads_elements_together():
    """Few long rows (16 warps a row): each thread's vectors stay contiguous, one warp scan a tile."""
    scan = _scan((192, 9158), 1)
    target = tvm.target.Target(SM90)
    func = scans.row_kernel(scan).with_attr("global_symbol", "rows").with_attr("target", target)
    source = tvm.compile(tvm.IRModule({"rows": func}), target=target).mod.imports[0].inspect_source()
    assert "((int)threadIdx.x) * 16)" in source and source.count("__shfl_up_sync((uint)") == 6, source


def every_scan(x3, x2, xi, xh):
    """Each axis of a float32 3-d tensor, both ops; exclusive; ints; a half tensor's two axes."""
    sums = [torch.cumsum(x3 * 2, dim=d) for d in range(3)] + [torch.cumprod(x3, dim=2)]
    return (*sums, bt.cumsum(x2, axis=1, exclusive=True), bt.cumsum(x2, axis=0, exclusive=True),
            torch.cumsum(xi, dim=1), torch.cumprod(xi, dim=0), torch.cumsum(xh, dim=0), torch.cumsum(xh, dim=1))


def symbolic_scans(x: bt.Tensor(("n", 16, "m"))):
    return torch.cumsum(x, dim=0), torch.cumsum(x, dim=1), torch.cumprod(x, dim=2)


def test_every_scan_is_ours_and_builds_with_nvcc():
    meta = lambda shape, dtype: torch.empty(shape, dtype=dtype, device="meta")  # noqa: E731
    k = bt.jit(every_scan, target=SM90).compile(meta((12, 16, 9158), torch.float32), meta((503, 2048), torch.float32),
                                                meta((299, 96), torch.int32), meta((33, 1031), torch.float16))
    scan_kernels = [kernel for kernel in k.fusion if "cum" in kernel.name]
    assert len(scan_kernels) >= 10 and all(kernel.rule.startswith("Scan") for kernel in scan_kernels), k.fusion
    # a half scan reads and writes its halves itself: no float32 copies, no rounding kernel after it
    assert not any(kernel.name.startswith("cast") for kernel in k.fusion), k.fusion
    _nvcc(k.source)


def test_symbolic_scans_build_with_nvcc():
    k = bt.jit(symbolic_scans, target=SM90).compile(torch.empty((5, 16, 7), device="meta"))
    assert [kernel.rule.split(" ")[0] for kernel in k.fusion if "cum" in kernel.name].count("Scan") == 3, k.fusion
    _nvcc(k.source)


def few_columns(x):
    h = torch.clamp(x, min=0.0)
    return torch.cumsum(h.float(), dim=0).to(torch.float16)


def test_thousands_of_chunks_build_with_nvcc_and_no_thread_walks_them():
    """perf program p50's scan: the chunk prefixes a block a column, no loop in any scan kernel
    longer than 33 steps (each chunk's rows; a tile loop of 2)."""
    k = bt.jit(few_columns, target=SM90).compile(torch.empty((294521, 7), dtype=torch.float16, device="meta"))
    prefixes = [kernel for kernel in k.fusion if kernel.name.endswith("chunk_prefixes")]
    assert len(prefixes) == 1 and prefixes[0].launch == "grid 7 x block (512, 1)", k.fusion
    loops = [int(m) for m in re.findall(r"for \(int \w+ = 0; \w+ < (\d+);", k.source)]
    assert loops and max(loops) <= 33, loops
    _nvcc(k.source)


def symbolic_length(x: bt.Tensor(("n", 64))):
    return torch.cumsum(x, dim=0)


def test_a_symbolic_length_split_into_chunks_builds_with_nvcc():
    k = bt.jit(symbolic_length, target=SM90).compile(torch.empty((5, 64), device="meta"))
    scan = [kernel.name for kernel in k.fusion if kernel.name.startswith("cumsum")]
    assert scan == ["cumsum_chunk_sums", "cumsum_chunk_prefixes", "cumsum_columns"], k.fusion
    _nvcc(k.source)


def row_sums(x):
    return torch.cumsum(x, dim=1)


def test_few_long_rows_go_to_torchs_scan():
    k = bt.jit(row_sums, target=SM90).compile(torch.empty((4, 100000), device="meta"))
    assert [kernel.rule for kernel in k.fusion] == ["torch.cumsum"], k.fusion


# --------------------------------------------------------------------------------------------------
# on a GPU, against torch
# --------------------------------------------------------------------------------------------------

GPU_SHAPES = [(12, 16, 9158), (299, 4, 96), (503, 2048), (7, 1), (33, 1031), (100000, 3), (3, 50000), (5, 0),
              (60000, 7)]   # 1872 chunks: their prefixes by warps


def _tolerance(dtype, n):
    if not dtype.is_floating_point:
        return {"rtol": 0, "atol": 0}
    if dtype in (torch.float16, torch.bfloat16):
        return {"rtol": 1e-2, "atol": 1e-2}   # rounded once from float32, as the reference is
    return {"rtol": 1e-4, "atol": 1e-5 * max(n, 1)}


def _gpu_reference(x, axis, op, exclusive):
    """torch's scan of float32 (int64) copies, rounded once to the half dtype."""
    wide = torch.int64 if not x.dtype.is_floating_point else torch.float32
    out = x.dtype if x.dtype in (torch.float16, torch.bfloat16) else wide
    return _reference(x.to(wide), axis, op, exclusive, wide).to(out)


@pytest.mark.gpu
@pytest.mark.parametrize("shape", GPU_SHAPES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int32])
def test_gpu_scans_over_every_axis_match_torch(shape, dtype):
    x = _values(shape, dtype).cuda()
    for axis in range(x.dim()):
        def both(t, axis=axis):
            return torch.cumsum(t, dim=axis), torch.cumprod(t, dim=axis), bt.cumsum(t, axis=axis, exclusive=True)
        got = bt.jit(both, target="gpu")(x)
        for g, op, exclusive in zip(got, ["relax.cumsum", "relax.cumprod", "relax.cumsum"], [False, False, True]):
            want = _gpu_reference(x, axis, op, exclusive)
            assert g.dtype == want.dtype or exclusive, (g.dtype, want.dtype)
            torch.testing.assert_close(g, want.to(g.dtype), equal_nan=True, **_tolerance(dtype, shape[axis]))


def scan_last(x, axis: bt.constexpr):
    return torch.cumsum(x, dim=axis), torch.cumprod(x, dim=axis)


@pytest.mark.gpu
@settings(max_examples=25, deadline=None)
@given(shape=st.lists(st.integers(1, 3000), min_size=1, max_size=3), data=st.data())
def test_gpu_generated_scans_match_torch(shape, data):
    """Ragged sizes: rows that share warps, rows over several tiles, odd widths without vectors."""
    axis = data.draw(st.integers(0, len(shape) - 1))
    dtype = data.draw(st.sampled_from([torch.float32, torch.bfloat16, torch.int64]))
    x = _values(shape, dtype, seed=sum(shape)).cuda()
    for g, op in zip(bt.jit(scan_last, target="gpu")(x, axis), ["relax.cumsum", "relax.cumprod"]):
        torch.testing.assert_close(g, _gpu_reference(x, axis, op, False).to(g.dtype), equal_nan=True,
                                   **_tolerance(dtype, shape[axis]))


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(5, 16, 3000), (300, 16, 64), (1, 16, 1), (2000, 16, 9)])
def test_gpu_symbolic_scans_match_torch(shape):
    x = _values(shape, torch.float32).cuda()
    got = bt.jit(symbolic_scans, target="gpu")(x)
    for g, axis, op in zip(got, [0, 1, 2], ["relax.cumsum", "relax.cumsum", "relax.cumprod"]):
        torch.testing.assert_close(g, _gpu_reference(x, axis, op, False), equal_nan=True,
                                   **_tolerance(torch.float32, shape[axis]))


def transposed_sums(t):
    return torch.cumsum(t.transpose(0, 1), dim=1)


@pytest.mark.gpu
def test_gpu_scan_of_a_non_contiguous_view_matches_torch():
    x = _values((4096, 512), torch.float32).cuda()
    got = bt.jit(transposed_sums, target="gpu")(x)
    torch.testing.assert_close(got, torch.cumsum(x.t(), dim=1), equal_nan=True, rtol=1e-4, atol=0.05)
