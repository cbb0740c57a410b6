"""Schedule modes: Dlight (+ babytriton's rules), Fallback, MetaSchedule with a reused database."""
import inspect
import math
import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
import tvm
from tvm.relax.op import gather_elements, scatter_elements, split

import babytriton as bt
from babytriton import schedules

# this module tests babytriton's own CPU product kernels, which a CPU's vendor would otherwise decide
pytestmark = pytest.mark.usefixtures("products_as_kernels")

SM90 = {"kind": "cuda", "arch": "sm_90"}
BIG = bt.Tensor((1024, 1024), "float32")


def chain(a: BIG, b: BIG):
    return (a + b) * a - b


def test_elementwise_rule_vectorises_on_gpu():
    k = bt.jit(target=SM90)(chain).compile()
    assert "T.vectorized(T.int64(4))" in k.stages["schedule"]
    assert "float4" in k.source
    fallback = bt.jit(target=SM90, schedule="fallback")(chain).compile()
    assert "float4" not in fallback.source and "T.vectorized" not in fallback.stages["schedule"]


def ragged(a: bt.Tensor((999, 3), "float32")):
    return a * 2.0


def test_elementwise_rule_vectorises_ragged_sizes_with_a_scalar_tail():
    k = bt.jit(target=SM90)(ragged).compile()  # 2997 elements: 749 float4 and one more
    assert "T.vectorized(T.int64(4))" in k.stages["schedule"] and '"T_multiply_tail"' in k.stages["schedule"]
    assert "*(float4*)(a_ptr + " in k.source and k.fusion[0].rule == "Elementwise"


def mm(a: bt.Tensor((64, 32), "float16"), b: bt.Tensor((32, 16), "float16")):
    return a @ b + 1.0


def test_gpu_matmul_goes_to_cublas_through_torch():
    k = bt.jit(target=SM90)(mm).compile()
    assert 'R.call_dps_packed("babytriton.torch_matmul"' in k.stages["MatmulToTorch"]
    assert "matmul" not in k.stages["FuseTIR"].split("def ")[1].split("(")[0]  # only the add is a kernel
    tir = bt.jit(target=SM90, schedule="fallback")(mm).compile()
    assert "MatmulToTorch" not in tir.stages and "matmul" in tir.source


def test_cpu_schedule_stage_and_results():
    f = bt.jit(target="cpu")(chain)
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    torch.testing.assert_close(f(a, b), (a + b) * a - b)
    assert "T.prim_func" in f.compile(a, b).stages["schedule"]


def test_meta_schedule_explains_missing_extras(monkeypatch):
    import importlib.util
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "xgboost" else real(name, *a))
    with pytest.raises(ImportError, match=r"needs xgboost: pip install 'babytriton\[tune\]'"):
        schedules.require_tuning_extras()


SMALL = bt.Tensor((32, 32), "float32")


def tuned(a: SMALL, b: SMALL):
    return a @ b + 1.0


def tuned_quickly(a: SMALL, b: SMALL):
    """An element-wise kernel: MetaSchedule tunes it in half the time of the matrix product."""
    return a * b + 1.0


def test_meta_schedule_tunes_once_and_later_processes_reuse(tmp_path, monkeypatch):
    monkeypatch.setenv("BABYTRITON_CACHE_DIR", str(tmp_path))
    f = bt.jit(schedule="meta_schedule", trials=4)(tuned_quickly)
    a, b = torch.randn(32, 32), torch.randn(32, 32)
    torch.testing.assert_close(f(a, b), a * b + 1.0, rtol=1e-4, atol=1e-4)
    assert "tirx.is_scheduled" in f.compile(a, b).stages["schedule"]
    assert any((tmp_path / "meta_schedule").rglob("database_tuning_record.json"))

    # a new process: the database answers, so tuning must not run (it would raise here)
    script = textwrap.dedent(f"""
        import sys, torch
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        import tvm.s_tir.meta_schedule as ms
        def refuse(*a, **k):
            raise AssertionError("tuned again")
        ms.tune_tasks = refuse
        import babytriton as bt
        from test_schedules import tuned_quickly
        f = bt.jit(schedule="meta_schedule", trials=4)(tuned_quickly)
        a, b = torch.randn(32, 32), torch.randn(32, 32)
        torch.testing.assert_close(f(a, b), a * b + 1.0, rtol=1e-4, atol=1e-4)
        print("reused")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         env={**os.environ, "BABYTRITON_CACHE_DIR": str(tmp_path)}, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert "reused" in out.stdout


@pytest.mark.gpu
@pytest.mark.parametrize("schedule", ["dlight", "fallback"])
def test_gpu_schedules_agree_with_torch(schedule):
    f = bt.jit(target="gpu", schedule=schedule)(chain)
    a, b = torch.randn(1024, 1024, device="cuda"), torch.randn(1024, 1024, device="cuda")
    torch.testing.assert_close(f(a, b), (a + b) * a - b)
    g = bt.jit(target="gpu", schedule=schedule)(mm)
    x = torch.randn(64, 32, device="cuda", dtype=torch.float16)
    y = torch.randn(32, 16, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(g(x, y), x @ y + 1.0, rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
def test_gpu_meta_schedule(tmp_path, monkeypatch):
    for extra in schedules.TUNE_EXTRAS:
        pytest.importorskip(extra)
    monkeypatch.setenv("BABYTRITON_CACHE_DIR", str(tmp_path))
    f = bt.jit(target="gpu", schedule="meta_schedule", trials=8)(tuned)
    a, b = torch.randn(32, 32, device="cuda"), torch.randn(32, 32, device="cuda")
    torch.testing.assert_close(f(a, b), a @ b + 1.0, rtol=1e-3, atol=1e-3)


def row_sum(x: bt.Tensor((512, 2048), "float32")):
    return x.sum(axis=-1)


def column_sum(x: bt.Tensor((512, 2048), "float32")):
    return x.sum(axis=0)


def test_row_reduction_rule_takes_contiguous_row_reductions_only():
    rows = bt.jit(target=SM90)(row_sum).compile()
    assert 'T.int64(256), thread="threadIdx.x"' in rows.stages["schedule"]
    assert "T.unroll(T.int64(4))" in rows.stages["schedule"] and "__shfl_down_sync" in rows.source
    columns = bt.jit(target=SM90)(column_sum).compile()
    # (a column sum's rule stages 4 rows a thread, also unrolled by 4: the rule's name tells them apart)
    assert [k.rule for k in columns.fusion] == ["OuterReduction"], str(columns.fusion)
    assert rows.fusion[0].rule != "OuterReduction", str(rows.fusion)


@pytest.mark.gpu
def test_gpu_row_reductions_agree_with_torch():
    x = torch.randn(512, 2048, device="cuda")
    torch.testing.assert_close(bt.jit(target="gpu")(row_sum)(x), x.sum(-1), rtol=1e-4, atol=1e-3)
    torch.testing.assert_close(bt.jit(target="gpu")(column_sum)(x), x.sum(0), rtol=1e-4, atol=1e-3)


# -- every layout: the Elementwise rule vectorises only what is contiguous in every buffer -------

def transposed_half(a: bt.Tensor((512, 256), "float16")):
    return bt.permute_dims(a) * 2.0


def batch_swap(a: bt.Tensor((64, 32, 128), "float16")):
    return bt.permute_dims(a, [1, 0, 2]) + 1.0  # rows move, each row stays contiguous


def scaled_rows(a: BIG, w: bt.Tensor((1024,), "float32")):
    return a * w + 1.0


@pytest.fixture(scope="module")
def nvcc_batch_of_module():
    """The sources this module's tests hand to nvcc, compiled in one run at its end (nvcc_batch.py)."""
    from nvcc_batch import AtModuleEnd   # here: a later process imports this module without tests/ on its path
    batch = AtModuleEnd()
    yield batch
    if shutil.which("nvcc"):
        batch.check()


@pytest.fixture
def nvcc_at_module_end(nvcc_batch_of_module, request):
    """nvcc must accept this CUDA source: checked with the module's other sources when it ends."""
    return lambda source: nvcc_batch_of_module.add(request.node.name, source)


def nvcc_ptx(source: str) -> bytes:
    from tvm.support import nvcc
    with tvm.target.Target(SM90):
        return nvcc.compile_cuda(source, target_format="ptx", compiler="nvcc")


def test_a_transpose_goes_through_shared_memory_tiles(nvcc_at_module_end):
    k = bt.jit(target=SM90)(transposed_half).compile()
    assert k.fusion[0].rule == "Tiled" and '"shared"' in k.stages["schedule"]
    nvcc_at_module_end(k.source)  # vectorised, this was make_uint4 of 8 halves: nvcc rejected it


def test_elementwise_rule_vectorises_contiguous_rows_and_broadcasts():
    assert "T.vectorized(T.int64(8))" in bt.jit(target=SM90)(batch_swap).compile().stages["schedule"]
    assert "T.vectorized(T.int64(4))" in bt.jit(target=SM90)(scaled_rows).compile().stages["schedule"]


@pytest.mark.gpu
def test_gpu_transposed_half_agrees_with_torch():
    x = torch.randn(512, 256, device="cuda", dtype=torch.float16)
    torch.testing.assert_close(bt.jit(target="gpu")(transposed_half)(x), x.T * 2.0)


# -- concat and split along the innermost axis (rotary embeddings): whole vectors where legal -------

def rotary(dtype, dim):
    """Rotary embedding of (batch, seq, heads, dim) rows: the halves of a row swap, one negated."""
    X, CS = bt.Tensor((2, 64, 4, dim), dtype), bt.Tensor((64, 1, dim), dtype)

    def rotate(x: X, cos: CS, sin: CS):
        x1, x2 = split(x, 2, axis=-1)
        return x * cos + bt.concat((-x2, x1), axis=-1) * sin
    return rotate


def roll(dtype, row, cuts):
    """The pieces of each row cut at `cuts` (unequal widths), last piece first, one negated."""
    X = bt.Tensor((512, row), dtype)

    def rolled(x: X):
        if len(cuts) == 1:
            a, b = split(x, cuts, axis=-1)
            return bt.concat((b, -a), axis=-1) * 2.0
        a, b, c = split(x, cuts, axis=-1)
        return bt.concat((c, -a, b), axis=-1) * 2.0
    return rolled


def torch_rotary(x, cos, sin):
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


def rotary_tolerance(dtype) -> dict:
    """float16: the fused kernel may round `x * cos + r * sin` once (a fused multiply-add) where torch
    rounds each product, an ulp of a product apart (seen on an H100, and on a CPU with float16 math)."""
    return {"rtol": 1e-2, "atol": 1e-2} if dtype == "float16" else {}


def torch_roll(x, cuts):
    pieces = torch.tensor_split(x, cuts, dim=-1)
    return torch.cat((pieces[-1], -pieces[0], *pieces[1:-1]), dim=-1) * 2.0


# (kernel, dtype, lanes the GPU rule may use): 16 bytes at most, and only as many as every piece's
# width and offset in the row allow (an odd or unaligned cut leaves the kernel to Fallback)
CONCATS = [
    ("rotary", "float32", 128, 4), ("rotary", "float16", 128, 8), ("rotary", "float32", 68, 2),
    ("rotary", "float16", 72, 4), ("rotary", "float16", 68, 2), ("rotary", "float32", 66, 1),
    ("rotary", "float16", 66, 1), ("rotary", "float32", 6, 1),
    # float16 `* 2.0` computes in float32 (torch's rule for a number): 4 lanes, CUDA's widest float vector
    ("roll", "float32", (32, [8]), 4), ("roll", "float16", (32, [8]), 4), ("roll", "float16", (32, [4]), 4),
    ("roll", "float32", (32, [2]), 2), ("roll", "float32", (32, [1]), 1), ("roll", "float16", (32, [8, 20]), 4),
    ("roll", "float32", (34, [8, 16]), 2), ("roll", "float16", (32, [8, 13]), 1),
]
VECTOR_TYPES = {("float32", 4): "float4", ("float32", 2): "float2",
                ("float16", 8): "uint4", ("float16", 4): "half4", ("float16", 2): "half2"}


def concat_kernel(kind, dtype, shape):
    return rotary(dtype, shape) if kind == "rotary" else roll(dtype, *shape)


@pytest.mark.parametrize("kind, dtype, shape, lanes", CONCATS)
def test_elementwise_rule_loads_concat_pieces_as_whole_vectors_where_aligned(kind, dtype, shape, lanes, nvcc_at_module_end):
    k = bt.jit(target=SM90)(concat_kernel(kind, dtype, shape)).compile()
    schedule = k.stages["schedule"]
    if lanes == 1:  # a piece starts inside a vector: its elements are read one by one, the result whole
        assert '"babytriton.rule": "Elementwise"' in schedule and "x_ptr[" in k.source
    else:
        assert f"T.vectorized(T.int64({lanes}))" in schedule and '"babytriton.rule": "Elementwise"' in schedule
        # every load of x is a vector one: the branch to a piece is taken by the vector, not by a lane
        assert f"*({VECTOR_TYPES[dtype, lanes]}*)(x_ptr + " in k.source and "x_ptr[" not in k.source
    nvcc_at_module_end(k.source)


def test_rotary_on_the_gpu_indexes_with_shifts_and_masks():
    """The benchmark's rotary kernel: one float4 per thread and buffer, no division by the row."""
    k = bt.jit(target=SM90)(rotary("float32", 128)).compile()
    body = k.source[k.source.index("__global__ void __launch_bounds__(256)"):]
    assert body.count("*(float4*)(x_ptr + ") == 3 and "T_add_intermediate_ptr + " in body
    assert " / " not in body and " % " not in body


@pytest.mark.parametrize("kind, dtype, shape", [c[:3] for c in CONCATS if c[2] != 6])
def test_concat_kernels_on_the_cpu_agree_with_torch(kind, dtype, shape):
    k = bt.jit(target="cpu")(concat_kernel(kind, dtype, shape))
    torch_dtype = getattr(torch, dtype)
    if kind == "rotary":
        x, cos, sin = (torch.randn(*s, dtype=torch_dtype) for s in ((2, 64, 4, shape), (64, 1, shape), (64, 1, shape)))
        x[0, 0, 0, :3] = torch.tensor([float("nan"), float("inf"), -0.0])
        torch.testing.assert_close(k(x, cos, sin), torch_rotary(x, cos, sin), equal_nan=True, **rotary_tolerance(dtype))
    else:
        x = torch.randn(512, shape[0], dtype=torch_dtype)
        torch.testing.assert_close(k(x), torch_roll(x, shape[1]))


def test_cpu_rule_vectorises_concat_pieces_whole():
    k = bt.jit(target="cpu")(rotary("float32", 128)).compile()
    lanes = int(re.search(r"T.vectorized\(T.int64\((\d+)\)\)", k.stages["schedule"]).group(1))
    assert lanes >= 4 and f"v3 // T.int64({lanes}) >= T.int64({64 // lanes})" in k.stages["schedule"]  # per vector
    assert "load float," not in k.source and f"load <{lanes} x float>" in k.source  # no lane loaded alone


@pytest.mark.gpu
@pytest.mark.parametrize("kind, dtype, shape", [c[:3] for c in CONCATS])
def test_gpu_concat_kernels_agree_with_torch(kind, dtype, shape):
    k = bt.jit(target="gpu")(concat_kernel(kind, dtype, shape))
    torch_dtype = getattr(torch, dtype)
    if kind == "rotary":
        x, cos, sin = (torch.randn(*s, dtype=torch_dtype, device="cuda")
                       for s in ((2, 64, 4, shape), (64, 1, shape), (64, 1, shape)))
        torch.testing.assert_close(k(x, cos, sin), torch_rotary(x, cos, sin), **rotary_tolerance(dtype))
    else:
        x = torch.randn(512, shape[0], dtype=torch_dtype, device="cuda")
        torch.testing.assert_close(k(x), torch_roll(x, shape[1]))


# --------------------------------------------------------------------------------------------------
# CPU rules
# --------------------------------------------------------------------------------------------------
import warnings  # noqa: E402

import tvm  # noqa: E402
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

HALF_TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.float16: dict(rtol=1e-2, atol=2e-2),
            torch.bfloat16: dict(rtol=2e-2, atol=5e-2)}


def ew_chain(a: bt.Tensor(("n", 37), "float32"), b: bt.Tensor(("n", 37), "float32")):
    return bt.sigmoid((a + b) * a - b) + bt.exp(a)


def ew_static(a: bt.Tensor((64, 1024), "float32")):
    return bt.exp(a) * 2.0 - a


def ew_half(a: bt.Tensor((256, 129), "float16"), b: bt.Tensor((256, 129), "bfloat16")):
    return a * 2.0 + 1.0, bt.sigmoid(b)


def row_max(x: bt.Tensor(("n", "m"), "float32")):
    return x.max(axis=-1)


def row_mean(x: bt.Tensor((300, 1000), "float32")):
    return x.mean(axis=-1)


def full_sum(x: bt.Tensor(("n",), "float32")):
    return x.sum()


def full_mean_2d(x: bt.Tensor((1000, 999), "float32")):
    return x.mean()


def few_rows(x: bt.Tensor((3, 70000), "float32")):
    return x.sum(axis=1)


def col_sum(x: bt.Tensor((777, 1024), "float32")):
    return x.sum(axis=0)


def col_sum_sym(x: bt.Tensor(("n", "m"), "float32")):
    return x.sum(axis=0)


def middle_sum(x: bt.Tensor((16, 300, 64), "float32")):
    return x.sum(axis=1)


def lib_softmax(x: bt.Tensor((100, 1000), "float32")):
    return bt.softmax(x, axis=-1)


def lib_layer_norm(x: bt.Tensor((64, 512), "float32"), g: bt.Tensor((512,), "float32"),
                   b: bt.Tensor((512,), "float32")):
    return bt.layer_norm(x, g, b, axes=[-1])


def user_softmax(x: bt.Tensor(("n", 256), "float32")):
    e = bt.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def cpu_matmul(a: bt.Tensor((65, 48), "float32"), b: bt.Tensor((48, 33), "float32")):
    return a @ b + 1.0


def hyperbolic(x: bt.Tensor((300, 256), "float32")):
    return cosh(x) - sinh(x) * 0.5, (cosh(x) * 2.0).sum(axis=-1)  # noqa: F821 - Relax ops


CPU_CASES = [
    (hyperbolic, lambda: [torch.randn(300, 256)],  # no vector lowering in TVM: scalar loops instead
     lambda x: (torch.cosh(x) - torch.sinh(x) * 0.5, (torch.cosh(x) * 2.0).sum(-1))),
    (ew_chain, lambda: [torch.randn(500, 37), torch.randn(500, 37)],
     lambda a, b: torch.sigmoid((a + b) * a - b) + torch.exp(a)),
    (ew_static, lambda: [torch.randn(64, 1024)], lambda a: torch.exp(a) * 2.0 - a),
    (row_max, lambda: [torch.randn(129, 1001)], lambda x: x.max(-1).values),
    (row_mean, lambda: [torch.randn(300, 1000)], lambda x: x.mean(-1)),
    (full_mean_2d, lambda: [torch.randn(1000, 999)], lambda x: x.mean()),
    (few_rows, lambda: [torch.randn(3, 70000)], lambda x: x.sum(1)),
    (col_sum, lambda: [torch.randn(777, 1024)], lambda x: x.sum(0)),
    (col_sum_sym, lambda: [torch.randn(333, 65)], lambda x: x.sum(0)),
    (middle_sum, lambda: [torch.randn(16, 300, 64)], lambda x: x.sum(1)),
    (lib_softmax, lambda: [torch.randn(100, 1000) * 10], lambda x: torch.softmax(x, -1)),
    (lib_layer_norm, lambda: [torch.randn(64, 512), torch.randn(512), torch.randn(512)],
     lambda x, g, b: torch.nn.functional.layer_norm(x, (512,), g, b)),
    (user_softmax, lambda: [torch.randn(77, 256)], lambda x: torch.softmax(x, -1)),
    (cpu_matmul, lambda: [torch.randn(65, 48), torch.randn(48, 33)], lambda a, b: a @ b + 1.0),
]


@pytest.mark.parametrize("fn, make, ref", CPU_CASES, ids=[c[0].__name__ for c in CPU_CASES])
def test_cpu_rules_agree_with_torch_and_leave_nothing_serial(fn, make, ref):
    args = make()
    with warnings.catch_warnings():
        warnings.simplefilter("error", schedules.SerialKernelWarning)
        got = bt.jit(target="cpu")(fn)(*args)
    torch.testing.assert_close(got, ref(*args), rtol=1e-4, atol=1e-4)


def test_cpu_half_dtypes():
    a, b = torch.randn(256, 129).half(), torch.randn(256, 129).bfloat16()
    x, y = bt.jit(target="cpu")(ew_half)(a, b)
    torch.testing.assert_close(x, a * 2.0 + 1.0, **HALF_TOL[torch.float16])
    torch.testing.assert_close(y, torch.sigmoid(b), **HALF_TOL[torch.bfloat16])


@settings(max_examples=12, deadline=None)
@given(n=st.sampled_from([0, 1, 2, 7, 255, 256, 2049, 4096, 4097, 65536, 100003]))
def test_cpu_symbolic_full_sum_of_any_size(n):
    x = torch.randn(n)
    torch.testing.assert_close(bt.jit(target="cpu")(full_sum)(x), x.sum(), rtol=1e-4, atol=1e-3)


def test_cpu_schedule_is_parallel_and_vectorised():
    k = bt.jit(target="cpu")(ew_static).compile()
    assert "T.parallel" in k.stages["schedule"] and "T.vectorized" in k.stages["schedule"]
    assert "TVMBackendParallelLaunch" in k.source
    assert " x float>" in k.source  # vector registers: <8 x float> / <16 x float>
    assert "@expf" not in k.source  # exp is the vectorisable polynomial, not a libm call per lane
    reduction = bt.jit(target="cpu")(row_mean).compile()
    assert "TVMBackendParallelLaunch" in reduction.source and " x float>" in reduction.source
    softmax = bt.jit(target="cpu")(lib_softmax).compile()
    assert softmax.stages["schedule"].count("T.parallel") == 1  # every block of a row in one loop


def bool_intermediates(x: bt.Tensor((64, 64), "float32"), y: bt.Tensor((64, 64), "float32")):
    return (bt.tanh(bt.tanh(x)) > 0.5) & (bt.tanh(bt.tanh(y)) > 0.5)  # two tanh deep: kept as buffers


def argmin_compares(x):
    return x != bt.argmin(x, axis=0) < x  # static sizes: the compares are vectorised beside the argmin


@settings(max_examples=8, deadline=None)
@given(n=st.integers(1, 9), m=st.sampled_from([1, 2, 4, 5, 16]))
def test_cpu_vectorised_bool_intermediates_match_torch(n, m):
    """Bool buffers between blocks are stored as int8: TVM's StorageRewrite retyped a vectorised bool
    buffer to int8 lanes used as bools, which LLVM's verifier refused (fuzz 8000024249, 8000025434)."""
    x, y = torch.randn(64, 64), torch.randn(64, 64)
    k = bt.jit(target="cpu")(bool_intermediates).compile(x, y)
    assert "T.vectorized" in k.stages["schedule"] and 'T.sblock_alloc_buffer((T.int64(64), T.int64(64)), "int8")' \
        in k.stages["schedule"]
    torch.testing.assert_close(k(x, y), (torch.tanh(torch.tanh(x)) > 0.5) & (torch.tanh(torch.tanh(y)) > 0.5))
    x = torch.randint(-2, 4, (n, m)).float()
    got = bt.jit(target="cpu")(argmin_compares)(x)
    index = torch.argmin(x, dim=0).float()
    torch.testing.assert_close(got, (x != index) & (index < x))


def mm_epilogue(a: bt.Tensor(("m", 70), "float32"), b: bt.Tensor((70, 50), "float32"), c: bt.Tensor((50,), "float32")):
    return bt.relu(a @ b + c)


def test_cpu_matmul_is_tiled_and_keeps_its_epilogue():
    f = bt.jit(target="cpu")(mm_epilogue)
    a, b, c = torch.randn(100, 70), torch.randn(70, 50), torch.randn(50)
    torch.testing.assert_close(f(a, b, c), torch.relu(a @ b + c), rtol=1e-4, atol=1e-4)
    k = f.compile(a, b, c)
    assert len(k.fusion) == 1 and k.fusion[0].fused  # matmul, add and relu: one kernel
    assert "local" in k.stages["schedule"] and "T.parallel" in k.stages["schedule"]


def mm_two_readers(x: bt.Tensor(("n", 8), "float32"), w: bt.Tensor((8, 8), "float32")):
    h = x @ w
    return h * bt.sigmoid(h * 1.7) + h * 2.0


def test_cpu_matmul_whose_result_two_epilogues_read():
    x, w = torch.randn(5, 8), torch.randn(8, 8)
    h = x @ w
    torch.testing.assert_close(bt.jit(target="cpu")(mm_two_readers)(x, w), h * torch.sigmoid(h * 1.7) + h * 2.0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_cpu_half_matmul(dtype):
    def half_mm(a: bt.Tensor((64, 48), str(dtype).split(".")[1]), b: bt.Tensor((48, 40), str(dtype).split(".")[1])):
        return a @ b
    a, b = torch.randn(64, 48, dtype=dtype), torch.randn(48, 40, dtype=dtype)
    torch.testing.assert_close(bt.jit(target="cpu")(half_mm)(a, b), (a.float() @ b.float()).to(dtype), **HALF_TOL[dtype])


def exps(x: bt.Tensor((40,), "float32")):
    return bt.exp(x)


def test_fast_exp_edges_match_torch():
    x = torch.tensor([float("inf"), float("-inf"), float("nan"), 100.0, -100.0, -104.0, 88.7, -87.3,
                      0.0, 1.0, -1.0, 1e-8] + torch.linspace(-80, 80, 28).tolist())
    torch.testing.assert_close(bt.jit(target="cpu")(exps)(x), torch.exp(x), rtol=2e-7, atol=1e-38,
                               equal_nan=True)


def exps_of_bools(x: bt.Tensor((4, 4), "float32")):
    b = (x < 0.0).astype("float32")
    return bt.exp(b), bt.sigmoid(x * (x > 0.5)), bt.tanh(b), bt.exp(bt.exp(b))


@pytest.mark.parametrize("target", ["cpu", SM90])
def test_fast_exp_of_a_vectorised_bool_cast(target):
    # fuzz seeds 7000021131, 7002021081: the polynomial names its argument in a Let, and TVM's
    # analysis of a Let holding a bool vector's cast failed the CPU build
    x = torch.randn(4, 4)
    b = (x < 0).float()
    expected = (torch.exp(b), torch.sigmoid(x * (x > 0.5)), torch.tanh(b), torch.exp(torch.exp(b)))
    f = bt.jit(target=target)(exps_of_bools)
    if target != "cpu":
        assert "__global__" in f.compile(x).source
        return
    assert "T.vectorized" in f.compile(x).stages["schedule"]
    for got, want in zip(f(x), expected):
        torch.testing.assert_close(got, want, rtol=2e-7, atol=1e-38)


def causal_softmax(x):
    masked = bt.where(bt.tril(bt.ones_like(x)) == 0, -math.inf, x)
    e = bt.exp(masked - masked.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def torch_causal_softmax(x):
    masked = torch.where(torch.tril(torch.ones_like(x)) == 0, -math.inf, x)
    e = torch.exp(masked - masked.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


def user_softmax_any(x):
    e = bt.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def torch_softmax_any(x):
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


def masked_select(x, y):
    return bt.where((x > 0.0) & (y < 1.0), x * y, bt.where(x == y, 0.0, y - x))


def gelu_erf(x):
    return 0.5 * x * (1.0 + bt.erf(x * 0.7071067811865476))


def erf_only(x):
    return bt.erf(x)


def _vector_ops(source: str) -> bool:
    """Whether LLVM IR computes on float vectors (<16 x float>, <8 x float>, ...)."""
    return re.search(r"<\d+ x float>", source) is not None


def test_cpu_causal_softmax_is_one_parallel_vectorised_kernel():
    """The mask (`where` over a `tril` comparison) no longer keeps a 4-D row kernel serial: its
    partial results are vectorised whatever the number of row axes, and the rows run in parallel."""
    x = torch.randn(2, 4, 64, 64)
    k = bt.jit(target="cpu")(causal_softmax).compile(x)
    (kernel,) = k.fusion
    assert kernel.rule == "CPUReduction" and kernel.launch.startswith("parallel 512 x vector"), kernel
    assert "TVMBackendParallelLaunch" in k.source and _vector_ops(k.source)
    torch.testing.assert_close(k(x), torch_causal_softmax(x), rtol=1e-5, atol=1e-6)


@settings(max_examples=10, deadline=None)
@given(shape=st.sampled_from([(1, 1), (3, 7), (2, 33, 33), (1, 2, 65, 65), (129, 129), (4, 5, 3)]),
       dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]))
def test_cpu_causal_masks_of_odd_widths_match_torch(shape, dtype):
    x = torch.randn(*shape).to(dtype)
    got = bt.jit(target="cpu")(causal_softmax)(x)
    torch.testing.assert_close(got, torch_causal_softmax(x), **HALF_TOL[dtype])


def test_cpu_select_chains_are_vectorised_and_parallel():
    x, y = torch.randn(256, 256), torch.randn(256, 256)
    y[0, :8] = x[0, :8]
    k = bt.jit(target="cpu")(masked_select).compile(x, y)
    assert k.fusion[0].rule == "CPUElementwise" and "vector" in k.fusion[0].launch
    assert "TVMBackendParallelLaunch" in k.source and _vector_ops(k.source)
    want = torch.where((x > 0) & (y < 1), x * y, torch.where(x == y, 0.0, y - x))
    torch.testing.assert_close(k(x, y), want)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("rows, width", [(8, 4096), (8, 4097), (64, 4096), (3, 100)])
def test_cpu_half_softmax_rows_are_vectorised_and_match_torch(dtype, rows, width):
    """Half rows are read as half vectors, converted and reduced in float32 vectors (F16C / AVX-512 on
    x86; bfloat16 as 16-bit integer lanes shifted into float32), with -inf, NaN and inf entries; the
    float16 exp is the float32 polynomial rounded once (LLVM scalarised a float16 vector exp)."""
    x = (torch.randn(rows, width) * 4).to(dtype)
    x[0, 5], x[1 % rows, :], x[2 % rows, 7] = -math.inf, -math.inf, math.nan
    if rows > 3:
        x[3, width - 1] = math.inf
    k = bt.jit(target="cpu")(user_softmax_any).compile(x)
    (kernel,) = k.fusion
    assert kernel.rule == "CPUReduction", kernel
    assert "vector" in kernel.launch and _vector_ops(k.source), kernel  # odd rows too: vectors and a tail
    if rows * width >= schedules.MIN_PARALLEL:
        assert "TVMBackendParallelLaunch" in k.source
    torch.testing.assert_close(k(x), torch_softmax_any(x), equal_nan=True, **HALF_TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("rows, width", [(64, 4096), (3, 100), (256, 257)])
def test_cpu_softmax_computes_each_exp_once(dtype, rows, width):
    """A softmax's exp(x - max) is read by the row's sum and by the division: the kernel keeps it per
    row instead of inlining it into both, so each element's exp is computed once (as torch's own
    kernel does), with NaN, -inf and inf rows."""
    x = (torch.randn(rows, width) * 4).to(dtype)
    x[0, 5], x[1, :], x[2, 7] = -math.inf, -math.inf, math.nan
    k = bt.jit(target="cpu")(user_softmax_any).compile(x)
    (kernel,) = k.fusion
    assert kernel.rule == "CPUReduction", kernel
    # an odd row's last, partial vector is a block of its own (`_tail`) over the other elements
    exps = [line for line in k.stages["schedule"].splitlines() if "T.exp(" in line and "_tail" not in line]
    assert len(exps) == 1, k.stages["schedule"]
    torch.testing.assert_close(k(x), torch_softmax_any(x), equal_nan=True, **HALF_TOL[dtype])


def test_cpu_log_softmax_still_inlines_its_exp():
    """An exp read once (log-softmax's, inside its row sum) stays inlined: nothing to share."""
    x = torch.randn(64, 4096)
    k = bt.jit(target="cpu")(log_softmax_rows).compile(x)
    assert k.stages["schedule"].count("T.exp(") == 1 and "compute_intermediate = " not in k.stages["schedule"]
    shifted = x - x.amax(-1, keepdim=True)
    torch.testing.assert_close(k(x), shifted - shifted.exp().sum(-1, keepdim=True).log(), rtol=1e-5, atol=1e-5)


def log_softmax_rows(x):
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - bt.log(bt.exp(shifted).sum(axis=-1, keepdims=True))


def test_cpu_erf_is_vectorised_and_matches_torch():
    x = torch.cat([torch.tensor([math.inf, -math.inf, math.nan, 0.0, -0.0, 1e-30, -1e-38, 4.0, -3.99, 1e3]),
                   torch.linspace(-6, 6, 40950)])
    k = bt.jit(target="cpu")(gelu_erf).compile(x)
    assert "@erff" not in k.source and _vector_ops(k.source)  # no libm call per lane
    erf = bt.jit(target="cpu")(erf_only)(x)
    torch.testing.assert_close(erf, torch.erf(x), rtol=5e-7, atol=5e-7, equal_nan=True)
    assert torch.equal(torch.signbit(erf[:7]), torch.signbit(torch.erf(x[:7])))
    torch.testing.assert_close(k(x), 0.5 * x * (1.0 + torch.erf(x * 0.7071067811865476)), equal_nan=True)
    # never past +-1 (the rational function overshoots by 2 ulp from 3.8 on): GELU of a negative x
    # stays <= 0, as torch's
    numbers = erf[~torch.isnan(erf)]
    assert numbers.abs().max() <= 1.0
    negative = torch.linspace(-5.66, -5.38, 28001)
    assert (bt.jit(target="cpu")(gelu_erf)(negative) <= 0).all()


def test_cpu_float64_tanh_keeps_its_precision_near_zero():
    """float64 tanh is libm's (LLVM's intrinsic): TVM's exp formula cancelled near 0 (tanh(1e-12)
    was 9.99978e-13, tanh(1e-20) 0, tanh(-0.0) +0)."""
    x = torch.cat([torch.tensor([1e-20, 1e-12, 1e-9, -0.0, 0.0, -1e-300, 20.0, -20.0, math.inf, -math.inf, math.nan],
                                dtype=torch.float64), torch.randn(40000, dtype=torch.float64) * 4])
    got = bt.jit(target="cpu")(tanh_only)(x)
    torch.testing.assert_close(got, torch.tanh(x), rtol=1e-15, atol=0, equal_nan=True)
    assert torch.equal(torch.signbit(got[:10]), torch.signbit(x[:10]))


def test_tvm_threads_follow_torch():
    f = bt.jit(target="cpu")(ew_static)
    x = torch.randn(64, 1024)
    before = torch.get_num_threads()
    try:
        for n in (1, min(2, os.cpu_count() or 1)):
            torch.set_num_threads(n)
            f(x)
            assert tvm.runtime.num_threads() == n
    finally:
        torch.set_num_threads(before)


# element-wise chains of the benchmark corpus (sigmoid, tanh, erf, exp): one parallel loop of whole
# float32 vectors, several per step, with no libm call and no float16 conversion one lane at a time
def sigmoid_chain(a, b):
    return bt.sigmoid((a + b) * a - b)


def torch_sigmoid_chain(a, b):
    return torch.sigmoid((a + b) * a - b)


def tanh_exp_chain(a, b):
    return bt.tanh(a * 0.5 + b) * bt.exp(-a * a) + b / (1.0 + a * a) - 2.0 * b


def torch_tanh_exp_chain(a, b):
    return torch.tanh(a * 0.5 + b) * torch.exp(-a * a) + b / (1.0 + a * a) - 2.0 * b


def gelu_tanh_chain(a, b):
    return 0.5 * a * (1.0 + bt.tanh(0.7978845608028654 * (a + 0.044715 * a * a * a))) - b


def torch_gelu_tanh_chain(a, b):
    return 0.5 * a * (1.0 + torch.tanh(0.7978845608028654 * (a + 0.044715 * a * a * a))) - b


def swiglu_chain(a, b):
    return a * bt.sigmoid(a) * b


def torch_swiglu_chain(a, b):
    return a * torch.sigmoid(a) * b


def add_only(a, b):
    return a + b


def erf_chain(a, b):
    return 0.5 * a * (1.0 + bt.erf(a * 0.7071067811865476)) + b


def torch_erf_chain(a, b):
    return 0.5 * a * (1.0 + torch.erf(a * 0.7071067811865476)) + b


CHAINS = [(sigmoid_chain, torch_sigmoid_chain), (tanh_exp_chain, torch_tanh_exp_chain),
          (gelu_tanh_chain, torch_gelu_tanh_chain), (swiglu_chain, torch_swiglu_chain),
          (erf_chain, torch_erf_chain)]


def _parallel_body(source: str) -> str:
    """The LLVM IR of the parallel loop's body (the kernel's inner loop lives there)."""
    start = source.index("@__tvm_parallel_lambda(")
    return source[start:source.index("\n}\n", start)]


def _launch_lanes(kernel) -> int:
    return int(re.search(r"vector (\d+)", kernel.launch).group(1))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("fn, ref", CHAINS, ids=[fn.__name__ for fn, _ in CHAINS])
def test_cpu_math_chains_are_vector_code_without_libm_calls(fn, ref, dtype):
    """sigmoid, tanh, erf and exp are float32 vector polynomials (fast_exp), half operands are
    converted as vectors (F16C / bfloat16 shifts), and a chain steps LONG_CHAIN_VECTORS registers at
    a time (one vector per step left the core waiting on its polynomial)."""
    a, b = torch.randn(64, 1024).to(dtype), torch.randn(64, 1024).to(dtype)
    k = bt.jit(target="cpu")(fn).compile(a, b)
    (kernel,) = k.fusion
    assert kernel.rule == "CPUElementwise" and kernel.launch.startswith("parallel"), kernel
    body = _parallel_body(k.source)
    assert re.search(r"fdiv <\d+ x float>", body) and re.search(r"fmuladd\.v\d+f32", body)  # vector math
    scalar_calls = re.findall(r"call (?:\w+ )*(?:float|half|bfloat|double|i16) @([\w.]+)", body)
    assert scalar_calls == [], scalar_calls  # expf, tanhf, erff, __extendhfsf2 ... per lane
    assert not re.search(r"fpext half|fptrunc float [^\n]* to half|@__(extend|trunc)\w*hf", body)
    (plain,) = bt.jit(target="cpu")(add_only).compile(a.float(), b.float()).fusion  # one register
    register = _launch_lanes(plain) * 4 // dtype.itemsize
    assert _launch_lanes(kernel) == schedules.LONG_CHAIN_VECTORS * register


SPECIALS = [math.nan, math.inf, -math.inf, 100.0, -100.0, 90.0, -90.0, 1e4, -1e4, 0.0, -0.0, 1e-30, -3.5e-4, 8.0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("fn, ref", CHAINS, ids=[fn.__name__ for fn, _ in CHAINS])
def test_cpu_math_chains_match_torch_with_nan_inf_and_large_values(fn, ref, dtype):
    torch.manual_seed(0)
    a, b = torch.randn(64, 1024) * 3, torch.randn(64, 1024) * 3
    a[0, :len(SPECIALS)] = torch.tensor(SPECIALS)
    b[1, :len(SPECIALS)] = torch.tensor(SPECIALS)
    a[2, :len(SPECIALS)], b[2, :len(SPECIALS)] = torch.tensor(SPECIALS), torch.tensor(SPECIALS[::-1])
    a, b = a.to(dtype), b.to(dtype)
    tol = dict(rtol=2e-6, atol=1e-6) if dtype == torch.float32 else HALF_TOL[dtype]
    torch.testing.assert_close(bt.jit(target="cpu")(fn)(a, b), ref(a, b), equal_nan=True, **tol)


def tanh_only(x):
    return bt.tanh(x)


def sigmoid_only(x):
    return bt.sigmoid(x)


@settings(max_examples=8, deadline=None)
@given(scale=st.sampled_from([1e-5, 1e-3, 0.1, 1.0, 4.0, 9.0, 100.0]),
       dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]))
def test_cpu_tanh_and_sigmoid_match_torch(scale, dtype):
    """tanh is a rational function of x clamped where tanh rounds to +-1 (x itself near 0, so -0.0
    and tiny values keep their sign and size); sigmoid is 1 / (1 + exp(-x)) through the vector exp."""
    x = torch.cat([torch.tensor(SPECIALS + [-88.0, -87.0, 16.0, -16.0, 4e-4, 7.9053, -7.91]),
                   torch.randn(40960) * scale]).to(dtype)
    tanh, sigmoid = bt.jit(target="cpu")(tanh_only)(x), bt.jit(target="cpu")(sigmoid_only)(x)
    if dtype == torch.float32:  # within 2 float32 ulp (about 3e-7 relative) of torch's
        torch.testing.assert_close(tanh, torch.tanh(x), rtol=4e-7, atol=1e-38, equal_nan=True)
        torch.testing.assert_close(sigmoid, torch.sigmoid(x), rtol=5e-7, atol=1e-38, equal_nan=True)
    else:  # computed in float32 and rounded once, as torch does: the same half values
        torch.testing.assert_close(tanh, torch.tanh(x), rtol=0, atol=0, equal_nan=True)
        torch.testing.assert_close(sigmoid, torch.sigmoid(x), **HALF_TOL[dtype], equal_nan=True)
    numbers = ~torch.isnan(x)  # -0.0 and tiny negatives keep their sign (a NaN's sign means nothing)
    assert torch.equal(torch.signbit(tanh[numbers]), torch.signbit(torch.tanh(x)[numbers]))
    edges = torch.tensor([-100.0, 100.0, math.nan, -math.inf, math.inf]).to(dtype)
    exact = torch.tensor([0.0, 1.0, math.nan, 0.0, 1.0]).to(dtype)
    torch.testing.assert_close(bt.jit(target="cpu")(sigmoid_only)(edges), exact, rtol=0, atol=0, equal_nan=True)


# --------------------------------------------------------------------------------------------------
# the serial-kernel check, and reductions on a GPU
# --------------------------------------------------------------------------------------------------

def big_sum(x: bt.Tensor((1024, 1024), "float32")):
    return x.sum()


def big_mean(x: bt.Tensor((4096,), "float32")):
    return x.mean()


def half_sum(x: bt.Tensor(("n",), "float16")):
    return x.sum()


def test_serial_check_on_a_serial_primfunc():
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def serial(a: T.Buffer((1000, 1000), "float32"), b: T.Buffer((1000, 1000), "float32")):
        for i, j in T.grid(1000, 1000):
            with T.sblock("b"):
                vi, vj = T.axis.remap("SS", [i, j])
                b[vi, vj] = a[vi, vj] + 1.0

    assert schedules.serial_work(serial, gpu=False) == 10 ** 6
    cpu = tvm.target.Target("llvm")
    assert schedules.serial_kernels(tvm.IRModule({"serial": serial}), cpu) == [("serial", 10 ** 6)]
    scheduled = schedules.apply(tvm.IRModule({"serial": serial}), cpu, "dlight", 0)
    assert schedules.serial_kernels(scheduled, cpu) == []


def test_serial_kernel_warning_names_the_line():
    with pytest.warns(schedules.SerialKernelWarning, match=r"kernel 'sum' of 'big_sum' .*test_schedules.py:\d+: "
                      r"return x.sum\(\)"):
        bt.jit(target="cpu", schedule="fallback")(big_sum).compile()


@pytest.mark.parametrize("fn", [big_sum, big_mean, half_sum, full_sum, col_sum, middle_sum, row_max, lib_softmax,
                                user_softmax], ids=lambda f: f.__name__)
def test_gpu_reductions_leave_nothing_in_one_block(fn):
    with warnings.catch_warnings():
        warnings.simplefilter("error", schedules.SerialKernelWarning)
        bt.jit(target=SM90)(fn).compile()


def prime_sum(x: bt.Tensor((1000003,), "float32")):
    return x.sum()


def test_gpu_full_reduction_is_split_over_blocks():
    k = bt.jit(target=SM90)(big_sum).compile()
    from babytriton.runtime.fusion import cuda_kernel_names
    assert len(cuda_kernel_names(k.source)) == 2  # partial sums, then their fold
    assert "blockIdx.x" in k.stages["schedule"] and "x_red_rf" in k.stages["schedule"]
    # each kernel reduces across its threads (a predicate over the block index would leave races)
    kernels = k.source.split('extern "C" __global__')[1:]
    assert all("red_buf" in body for body in kernels if ") {" in body.split("\n")[0])
    mean = bt.jit(target=SM90)(big_mean).compile()  # small: one block of threads, not one thread
    assert 'thread="threadIdx.x"' in mean.stages["schedule"] and "red_buf" in mean.source


def normalised_whole(x):
    return x / torch.linalg.vector_norm(x).clamp_min(1e-6)


def normalised_rows(x):
    h = x.float()
    return h / torch.linalg.vector_norm(h, dim=(-2, -1), keepdim=True).clamp_min(1e-6) + x.abs()


def rms_of_whole(x):
    return torch.sqrt((x * x).mean() + 1e-5)


SPLIT_EPILOGUES = [(normalised_whole, (52740994,)), (normalised_whole, (1000003,)), (normalised_rows, (2, 3, 11008)),
                   (rms_of_whole, (3, 1 << 20))]


@pytest.mark.parametrize("fn,shape", SPLIT_EPILOGUES, ids=lambda v: getattr(v, "__name__", str(v)))
def test_split_reduction_epilogues_run_on_every_thread(fn, shape, nvcc_at_module_end):
    """The element-wise work after a split reduction's fold: a whole-tensor epilogue (`x / x.norm()`) gets
    a grid of its own, a few values a result run across the fold's threads; never one thread's loop."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", schedules.SerialKernelWarning)
        k = bt.jit(target=SM90)(fn).compile(torch.empty(shape, device="meta"))
    assert "SplitReduction" in [kk.rule for kk in k.fusion], str(k.fusion)
    # thread 0 only publishes a cross-thread reduction's result: no loop of the epilogue is left to it
    after_thread0 = re.findall(r"threadIdx\.x\) == 0\) \{\n\s*(.*)", k.source)
    assert after_thread0 and all("red_" in line for line in after_thread0), after_thread0
    nvcc_at_module_end(k.source)


@pytest.mark.gpu
@pytest.mark.parametrize("fn,shape", SPLIT_EPILOGUES + [(normalised_whole, (7,)), (normalised_rows, (2, 0, 5))],
                         ids=lambda v: getattr(v, "__name__", str(v)))
def test_gpu_split_reduction_epilogues_match_torch(fn, shape):
    x = torch.randn(shape, device="cuda")
    if x.numel() > 2:
        x.view(-1)[1] = float("nan") if fn is normalised_rows else x.view(-1)[1]
    f = bt.jit(target="gpu")(fn)
    torch.testing.assert_close(f(x), fn(x), rtol=1e-4, atol=1e-5, equal_nan=True)
    h = x.to(torch.bfloat16)
    torch.testing.assert_close(f(h).float(), fn(h).float(), rtol=2e-2, atol=2e-2, equal_nan=True)


def few_columns(x: bt.Tensor((1 << 20, 4), "float32")):
    return x.sum(axis=0)


def test_serial_kernel_warning_on_a_shape_no_rule_splits():
    # Fallback alone (no rule splits anything): a thread per column, 4 threads in one block
    with pytest.warns(schedules.SerialKernelWarning, match="one GPU block"):
        bt.jit(target=SM90, schedule="fallback")(few_columns).compile()
    with warnings.catch_warnings():  # OuterReduction cuts the 2^20 rows over blocks
        warnings.simplefilter("error", schedules.SerialKernelWarning)
        assert [k.rule for k in bt.jit(target=SM90)(few_columns).compile().fusion] == ["OuterReduction"]


def symbolic_max(x: bt.Tensor(("n", "m"), "float32")):
    return x.max()


def few_symbolic_rows(x: bt.Tensor((4, "n"), "float32")):
    return x.sum(axis=-1)


@pytest.mark.parametrize("fn", [prime_sum, full_sum, symbolic_max, few_symbolic_rows], ids=lambda f: f.__name__)
def test_gpu_full_reductions_of_symbolic_and_prime_sizes_use_a_grid(fn, nvcc_at_module_end):
    """No equal chunks divide a symbolic or prime size: a fixed grid of threads each sums a strided
    share into registers, each block reduces its threads' partials (no cross-thread reduction under
    the ragged end's predicate: it guards the last step's loads only), then a fold."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", schedules.SerialKernelWarning)
        k = bt.jit(target=SM90)(fn).compile()
    [kernel] = [kk for kk in k.fusion if kk.cuda_kernels]   # (an empty x.max() is an error: assert ops)
    blocks = int(re.match(r"grid (\d+) x block 256$", kernel.launch).group(1))
    assert kernel.rule == "SplitReduction" and blocks >= 128, str(k.fusion)  # enough blocks to fill a GPU
    partials, fold = k.source.split('extern "C" __global__')[-2:]
    loads, across = partials.split("__shfl_down_sync", 1)
    assert "for (" in loads and "red_buf" in fold
    assert across.count("{") == across.count("}") - 1   # the shuffles in no branch: every thread runs them
    nvcc_at_module_end(k.source)


@pytest.mark.gpu
@pytest.mark.parametrize("fn, dtype", [(full_sum, torch.float32), (half_sum, torch.float16)])
def test_gpu_split_reductions_agree_with_torch(fn, dtype):
    for n in (0, 1, 1000, 4096, 1 << 20, (1 << 20) + 3):
        x = torch.randn(n, device="cuda").to(dtype)
        tol = HALF_TOL[dtype] if dtype == torch.float32 else dict(rtol=1e-2, atol=0.05 * max(n, 1) ** 0.5)
        torch.testing.assert_close(bt.jit(target="gpu")(fn)(x).float(), x.float().sum(), **tol)
    x = torch.randn(4096, device="cuda")
    torch.testing.assert_close(bt.jit(target="gpu")(big_mean)(x), x.mean(), rtol=1e-4, atol=1e-5)
    x = torch.randn(1000003, device="cuda")
    torch.testing.assert_close(bt.jit(target="gpu")(prime_sum)(x), x.sum(), rtol=1e-4, atol=1e-2)
    for n in (1, 1000, (1 << 20) + 3):   # a few rows of a symbolic length: a partial per row and thread
        x = torch.randn(4, n, device="cuda")
        torch.testing.assert_close(bt.jit(target="gpu")(few_symbolic_rows)(x), x.sum(-1), rtol=1e-4, atol=1e-2)
    for shape in ((1, 1), (3, 1000), (1000, 1003)):
        x = torch.randn(shape, device="cuda")
        torch.testing.assert_close(bt.jit(target="gpu")(symbolic_max)(x), x.max())
        x[-1, -1] = float("nan")
        torch.testing.assert_close(bt.jit(target="gpu")(symbolic_max)(x), x.max(), equal_nan=True)
    x = torch.randn(1024, 1024, device="cuda")
    torch.testing.assert_close(bt.jit(target="gpu")(big_sum)(x), x.sum(), rtol=1e-4, atol=1e-2)


def exp_chain_fp32(a: bt.Tensor((512, 1024), "float32")):
    return bt.exp(a) * 2.0 + bt.erf(a)


def test_math_calls_keep_vector_loads_and_stores(nvcc_at_module_end):
    # TVM's vectoriser turns a loop with a call back into scalar loads; the rule loads into registers
    source = bt.jit(target=SM90)(exp_chain_fp32).compile().source
    kernel = source[source.index('extern "C"'):]
    assert "*(float4*)" in kernel and "erff(" in kernel
    nvcc_at_module_end(source)


def compare_big(x: bt.Tensor((256, 4096), "float32"), y: bt.Tensor((256, 4096), "float32")):
    return x < y, x != y


def select_by_mask(m: bt.Tensor((256, 4096), "bool"), x: bt.Tensor((256, 4096), "float16")):
    return bt.where(m, x, -x), ~m


@pytest.mark.parametrize("fn", [compare_big, select_by_mask])
def test_bool_buffers_are_never_vectors_in_memory(fn, nvcc_at_module_end):
    # CUDA moves four bools as a ushort4: eight bytes at a four-byte offset (misaligned, and wrong)
    source = bt.jit(target=SM90)(fn).compile().source
    bools = set(re.findall(r"bool\* __restrict__ (\w+)", source))
    assert bools and not any(re.search(rf"\*\(\w+\*\)\({name} \+", source) for name in bools)
    assert re.search(r"\*\(\w+[248]\*\)", source)  # the other buffers still move as vectors
    nvcc_at_module_end(source)


@pytest.mark.gpu
def test_gpu_comparisons_of_large_tensors_agree_with_torch():
    x, y = torch.randn(256, 4096, device="cuda"), torch.randn(256, 4096, device="cuda")
    x[0, :7] = float("nan")
    lt, ne = bt.jit(target="gpu")(compare_big)(x, y)
    assert torch.equal(lt, x < y) and torch.equal(ne, x != y)
    m, h = torch.rand(256, 4096, device="cuda") > 0.5, torch.randn(256, 4096, device="cuda", dtype=torch.float16)
    picked, flipped = bt.jit(target="gpu")(select_by_mask)(m, h)
    assert torch.equal(picked, torch.where(m, h, -h)) and torch.equal(flipped, ~m)


@given(st.sampled_from(["<", "<=", ">", ">="]), st.integers(-20, 20), st.booleans(), st.booleans())
def test_a_compare_on_the_index_flips_at_its_threshold(op, c, var_left, negate):
    """`lanes.threshold` of `±v + c OP 0` (either side) says where it flips, so that a lane count dividing that
    point sees one value for all lanes of a vector."""
    import operator
    compare = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge}[op]

    def cond(v, zero):
        e = (-v if negate else v) + c
        return compare(e, zero) if var_left else compare(zero, e)
    var = tvm.tirx.Var("v", "int64")
    t, above = schedules.lanes.threshold(cond(var, tvm.tirx.const(0, "int64")), var)
    assert all(cond(v, 0) == (v >= t if above else v < t) for v in range(-50, 50))


# --------------------------------------------------------------------------------------------------
# CPU matrix products of any batch rank and layout, and the rule for whatever the others decline
# --------------------------------------------------------------------------------------------------

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}
MM_TOL = {torch.float32: dict(rtol=1e-4, atol=1e-4), torch.float16: dict(rtol=1e-2, atol=1e-2),
          torch.bfloat16: dict(rtol=2e-2, atol=2e-2)}


def _llvm_kernel(source: str, name: str) -> str:
    """The LLVM IR of one kernel: its compute function and the parallel lambdas that follow it."""
    start = source.index(f"define internal fastcc i32 @{name}_compute_(")
    following = source.find("define internal fastcc i32 @", start + 1)
    return source[start:following if following > 0 else len(source)]


def _products_are_tiled(kernel, dtype):
    """Every matrix-product kernel is CPUMatmul's, launched in parallel, with float vectors in its IR;
    bfloat16 products go to torch.matmul instead (targets.offloaded_matmuls)."""
    if dtype == "bfloat16":
        offloaded = [k for k in kernel.fusion if k.rule == "torch.matmul"]
        assert offloaded and any(op.op == "matmul" for k in offloaded for op in k.ops), kernel.fusion
        assert not any("matmul" in k.name and k.rule == "CPUMatmul" for k in kernel.fusion)
        return
    summary = schedules.schedule_summary(kernel.module, kernel.target)
    products = [name for name in summary if "matmul" in name]
    assert products
    for name in products:
        assert summary[name][0] == "CPUMatmul", (name, summary[name])
        ir = _llvm_kernel(kernel.source, name)
        assert "TVMBackendParallelLaunch" in ir and re.search(r"<\d+ x float>", ir), name


def attention_of(dtype, shape):
    """Attention's two products around a sigmoid: a softmax there would make the block one SDPA call
    (offload.py), and these tests are about babytriton's own products of that shape."""
    H = bt.Tensor(shape, dtype)

    def attention(q: H, k: H, v: H):
        # divided by the row length: outputs as small as a softmax's, so the half tolerances mean the same
        return bt.sigmoid(q @ bt.permute_dims(k, (0, 1, 3, 2)) * 0.125) @ v * (1.0 / shape[-2])
    return attention


def products_of(dtype, a_shape, b_shape, transpose_a, transpose_b):
    A, B = bt.Tensor(a_shape, dtype), bt.Tensor(b_shape, dtype)
    swap = tuple(range(len(a_shape) - 2)) + (len(a_shape) - 1, len(a_shape) - 2)

    def product(a: A, b: B):
        x = bt.permute_dims(a, swap) if transpose_a else a
        y = bt.permute_dims(b, swap) if transpose_b else b
        return x @ y * 2.0
    return product


@pytest.mark.parametrize("dtype", DTYPES)
def test_cpu_attention_products_are_parallel_vectorised_and_not_serial(dtype):
    with warnings.catch_warnings():
        warnings.simplefilter("error", schedules.SerialKernelWarning)
        kernel = bt.jit(target="cpu")(attention_of(dtype, (4, 16, 1024, 64))).compile()
    _products_are_tiled(kernel, dtype)
    small = bt.jit(target="cpu")(attention_of(dtype, (2, 3, 65, 24)))
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 65, 24).to(DTYPES[dtype]) for _ in range(3))
    want = torch.sigmoid((q.float() @ k.float().mT).to(q.dtype) * 0.125) @ v * (1.0 / 65)
    torch.testing.assert_close(small(q, k, v), want, **MM_TOL[DTYPES[dtype]])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("ta, tb", [(False, False), (False, True), (True, False), (True, True)])
@pytest.mark.parametrize("batch", [(8,), (2, 4)], ids=["3d", "4d"])
def test_cpu_batched_products_of_any_layout(dtype, ta, tb, batch):
    n, k, m = 512, 512, 512
    a_shape = batch + ((k, n) if ta else (n, k))
    b_shape = batch + ((m, k) if tb else (k, m))
    f = bt.jit(target="cpu")(products_of(dtype, a_shape, b_shape, ta, tb))
    with warnings.catch_warnings():
        warnings.simplefilter("error", schedules.SerialKernelWarning)
        kernel = f.compile()
    _products_are_tiled(kernel, dtype)
    a, b = torch.randn(a_shape).to(DTYPES[dtype]), torch.randn(b_shape).to(DTYPES[dtype])
    x, y = (a.mT if ta else a), (b.mT if tb else b)
    want = (x.float() @ y.float()).to(a.dtype) * 2.0
    torch.testing.assert_close(f(a, b), want, **MM_TOL[DTYPES[dtype]])


@settings(max_examples=8, deadline=None)
@given(st.integers(1, 40), st.integers(1, 70), st.integers(1, 40), st.integers(1, 3),
       st.sampled_from(list(DTYPES)), st.booleans())
def test_cpu_products_of_odd_and_symbolic_sizes(n, k, m, b, dtype, tb):
    f = bt.jit(target="cpu")(products_of(dtype, ("b", "n", "k"), ("b", "m", "k") if tb else ("b", "k", "m"), False, tb))
    a = torch.randn(b, n, k).to(DTYPES[dtype])
    w = torch.randn(b, m, k).to(DTYPES[dtype]) if tb else torch.randn(b, k, m).to(DTYPES[dtype])
    want = (a.float() @ (w.mT if tb else w).float()).to(a.dtype) * 2.0
    torch.testing.assert_close(f(a, w), want, **MM_TOL[DTYPES[dtype]])
    odd = bt.jit(target="cpu")(products_of(dtype, (17, 33), (33, 5), False, False))
    a, w = torch.randn(17, 33).to(DTYPES[dtype]), torch.randn(33, 5).to(DTYPES[dtype])
    torch.testing.assert_close(odd(a, w), (a.float() @ w.float()).to(a.dtype) * 2.0, **MM_TOL[DTYPES[dtype]])


def _transposed_b_product(dtype, transposed_a):
    """C[b, i, j] = sum_k A[b, i, k] * B[b, j, k] (float32 accumulate) as one block, B read with k last
    (and A as A[b, k, i] with `transposed_a`): layouts the Relax pipeline leaves to a transpose kernel,
    here inside the product itself."""
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def product(a: T.handle, b: T.handle, c: T.handle):
        nb, n, m, kk = T.int64(), T.int64(), T.int64(), T.int64()
        A = T.match_buffer(a, (nb, kk, n) if transposed_a else (nb, n, kk), dtype)
        B = T.match_buffer(b, (nb, m, kk), dtype)
        C = T.match_buffer(c, (nb, n, m), "float32")
        for x, i, j, k in T.grid(nb, n, m, kk):
            with T.sblock("matmul"):
                vx, vi, vj, vk = T.axis.remap("SSSR", [x, i, j, k])
                with T.init():
                    C[vx, vi, vj] = T.float32(0)
                C[vx, vi, vj] = C[vx, vi, vj] + T.Cast("float32", A[vx, vk, vi] if transposed_a else A[vx, vi, vk]) \
                    * T.Cast("float32", B[vx, vj, vk])
    return product


@pytest.mark.parametrize("transposed_a", [False, True])
@pytest.mark.parametrize("dtype", DTYPES)
def test_cpu_matmul_packs_a_b_read_transposed(dtype, transposed_a):
    cpu = bt.jit(target="cpu")(exps).target()
    mod = schedules.apply(tvm.IRModule({"main": _transposed_b_product(dtype, transposed_a)}), cpu, "dlight", 0)
    assert str(mod["main"].attrs[schedules.RULE_ATTR]) == "CPUMatmul"
    text = mod["main"].script()
    assert "B_global[v0, v2, v1] = B[v0, v1, v2]" in text  # packed [k, j], then read along j
    # every loop nest (the packing, the zero padding a symbolic size gets, the tiles) in parallel
    assert schedules.serial_work(mod["main"], gpu=False) <= 1  # the root block itself
    assert "_local = T.sblock_alloc_buffer" in text and "T.vectorized" in text  # the register tile
    built = tvm.compile(mod, cpu)
    for b, n, m, k in ((2, 17, 5, 33), (1, 64, 100, 48), (3, 9, 130, 1)):
        a = torch.randn(b, k, n) if transposed_a else torch.randn(b, n, k)
        a, w = a.to(DTYPES[dtype]), torch.randn(b, m, k).to(DTYPES[dtype])
        out = torch.empty(b, n, m)
        built["main"](*(tvm.runtime.from_dlpack(t) for t in (a, w, out)))
        torch.testing.assert_close(out, (a.mT if transposed_a else a).float() @ w.float().mT, rtol=1e-4, atol=1e-4)


def half_argmax(x: bt.Tensor((64, 4096), "float16")):
    return bt.argmax(x, axis=-1)


def test_cpu_kernels_other_rules_decline_still_run_in_parallel():
    # (many rows; a whole-tensor argmax is cut into parallel chunks by CPUReduction, see
    # test_cpu_whole_tensor_argmax_is_cut_into_parallel_chunks)
    x = torch.randn(64, 4096).half()
    f = bt.jit(target="cpu")(half_argmax)
    with warnings.catch_warnings():
        warnings.simplefilter("error", schedules.SerialKernelWarning)
        kernel = f.compile(x)
    # the rows' max and its first index (argmax_as_max.py): one row kernel, a row a parallel step
    [(rule, launch, _)] = schedules.schedule_summary(kernel.module, kernel.target).values()
    assert rule == "CPUReduction" and launch.startswith("parallel 64 x vector"), (rule, launch)
    torch.testing.assert_close(f(x), torch.argmax(x, dim=-1))


def _lane_predicates(schedule_text: str) -> list[str]:
    """The predicates of each product's update block that depend on its vectorised loop (a ragged
    tile: TVM then scalarises the micro-kernel)."""
    lines = schedule_text.splitlines()
    found = []
    for at, line in enumerate(lines):
        if 'T.sblock("matmul' in line and "_update" in line:
            lane = re.search(r"for (\w+) in T.vectorized", lines[at - 1]).group(1)
            body = lines[at + 1:at + 12]
            found += [p for p in body if "T.where" in p and re.search(rf"\b{lane}\b", p)]
    return found


@pytest.mark.parametrize("shape", [("n", "k", "m"), (1000, 1000, 1000), (17, 33, 5)], ids=str)
def test_cpu_ragged_products_keep_whole_vector_tiles(shape):
    n, k, m = shape
    f = bt.jit(target="cpu")(products_of("float32", (n, k), (k, m), False, False))
    a, b = torch.randn(1000 if n == "n" else n, 1000 if k == "k" else k), torch.randn(1000 if k == "k" else k, 999 if m == "m" else m)
    kernel = f.compile(a, b)
    assert "_pad" in kernel.stages["schedule"] and not _lane_predicates(kernel.stages["schedule"])
    torch.testing.assert_close(f(a, b), a @ b * 2.0, rtol=1e-4, atol=1e-3)



def tanh_chain(x):
    a = bt.tanh(bt.tanh(x))
    b = bt.tanh(a) * a
    return bt.tanh(b) + a * b  # too many nested tanh to inline: `a` and `b` stay blocks of their own


@pytest.mark.parametrize("shape", [(256, 256), (3, 40000)])
def test_cpu_kept_intermediates_are_computed_per_vector_in_one_loop(shape):
    """Intermediates the inliner keeps (a backward's tanh derivatives) are computed inside the output's
    parallel loop, a vector at a time: one loop nest, no full-size workspace written and read back."""
    x = torch.randn(*shape)
    k = bt.jit(target="cpu")(tanh_chain).compile(x)
    assert k.stages["schedule"].count("T.parallel") == 1 and "T.vectorized" in k.stages["schedule"]
    assert "TVMBackendAllocWorkspace" not in k.source
    a = torch.tanh(torch.tanh(x))
    b = torch.tanh(a) * a
    torch.testing.assert_close(k(x), torch.tanh(b) + a * b)


def gelu_tanh(x):
    return 0.5 * x * (1.0 + bt.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))


def test_gpu_gelu_tanh_backward_is_one_vectorised_elementwise_kernel():
    """The backward of a tanh GELU repeats tanh (and `1 - tanh**2` behind subtract's guard) deeper than
    the CPU inliner's call-depth limit: kept buffers sent it to Fallback's scalar loads. On the GPU it
    is one Elementwise kernel (the repeated tanh computed once into registers) moving float4s, with
    nothing in local memory."""
    x = torch.empty(1 << 20, device="meta")
    k = bt.jit(target="gpu")(gelu_tanh).backward(x)
    (kernel,) = k.fusion
    assert kernel.rule == "Elementwise" and "T.vectorized(T.int64(4))" in k.stages["schedule"]
    assert "float4" in k.source
    if shutil.which("nvcc"):
        ptx = nvcc_ptx(k.source).decode()
        assert ".local" not in ptx   # the kept values are registers, not a stack array
        assert ptx.count("ld.global.nc.v4.f32") == 2 and ptx.count("st.global.v4.f32") == 1  # x, d_out; dx
        assert ptx.count("ex2.") <= 4  # tanhf's one exp per element of the float4, not nine


@pytest.mark.gpu
def test_gpu_gelu_tanh_backward_matches_torch():
    x = torch.cat([torch.randn(4092, device="cuda") * 4, torch.tensor([0.0, -0.0, 30.0, float("nan")], device="cuda")])
    upstream = torch.randn_like(x)
    got, want = x.clone().requires_grad_(), x.clone().requires_grad_()
    bt.jit(target="gpu")(gelu_tanh)(got).backward(upstream)
    (0.5 * want * (1.0 + torch.tanh(0.7978845608028654 * (want + 0.044715 * want * want * want)))).backward(upstream)
    # CUDA kernels are built with --use_fast_math: tanh is tanh.approx.f32 (relative error up to 2^-11)
    torch.testing.assert_close(got.grad, want.grad, rtol=2e-3, atol=1e-4, equal_nan=True)


def self_gated(x):
    a = x
    for _ in range(8):  # `a` read three times a step: inlined whole, a tree of 3**8 copies
        a = bt.tanh(a) * a + a
    return a


def test_gpu_intermediates_past_the_inlining_limit_stay_in_registers():
    """Intermediates the inliner keeps (the tree grew past MAX_TREE_SIZE) are computed per thread, a
    float4 in registers, before the output's float4: one tanh per step and element, where Fallback
    inlined the 3**8-copy tree (a 425 KB CUDA source)."""
    for shape, dtype in [((64, 1000), torch.float32), ((1 << 20,), torch.float16)]:  # rows; half math in float32
        assert bt.jit(target="gpu")(self_gated).compile(torch.empty(shape, dtype=dtype, device="meta")).fusion[0].rule \
            == "Elementwise"
    k = bt.jit(target="gpu")(self_gated).compile(torch.empty(1 << 20, device="meta"))
    (kernel,) = k.fusion
    assert kernel.rule == "Elementwise" and 'scope="local"' in k.stages["schedule"]
    assert k.stages["schedule"].count("T.vectorized(T.int64(4))") >= 2
    if shutil.which("nvcc"):
        ptx = nvcc_ptx(k.source).decode()
        assert ptx.count("ld.global.nc.v4.f32") == 1 and ptx.count("st.global.v4.f32") == 1
        assert ptx.count("ex2.") <= 8 * 4 and "ld.local" not in ptx


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,shape", [(torch.float32, (4096,)), (torch.float16, (4096,)),
                                         (torch.float32, (64, 1000))], ids=str)
def test_gpu_intermediates_in_registers_match_torch(dtype, shape):
    x = torch.randn(*shape, device="cuda").to(dtype)
    x.view(-1)[:3] = torch.tensor([float("inf"), -float("inf"), float("nan")])
    want = x
    for _ in range(8):
        want = torch.tanh(want) * want + want
    tol = 2e-3 if dtype == torch.float32 else 3e-2   # tanh.approx.f32 under --use_fast_math: 2^-11 relative
    torch.testing.assert_close(bt.jit(target="gpu")(self_gated)(x), want, rtol=tol, atol=tol, equal_nan=True)


def scatter_add_rows(x, index, src):
    return scatter_elements(x, index, src, axis=1, reduction="add")


def _scatter_inputs(device):
    torch.manual_seed(0)
    x, src = torch.randn(8, 40, device=device), torch.randn(8, 3, device=device)
    index = torch.randint(0, 40, (8, 3), device=device)
    return x, index, src


def test_a_kernel_no_gpu_rule_schedules_runs_on_gpu_threads_not_the_host(nvcc_at_module_end):
    """TVM's generic scatter is an opaque block of `parallel` loops that no GPU rule takes: left so, it
    was compiled as host code reading GPU memory (a segfault). Its loops become GPU kernels instead."""
    k = bt.jit(target="gpu")(scatter_add_rows).compile(*(t.to("meta") for t in _scatter_inputs("cpu")))
    assert "loops_to_kernels" in str(k.fusion) and "scatter_elements_kernel" in k.source
    for func in k.module.functions.values():
        if isinstance(func, tvm.tirx.PrimFunc):
            assert "blockIdx.x" in func.script(), func.script()[:400]
    nvcc_at_module_end(k.source)


@pytest.mark.gpu
def test_a_kernel_no_gpu_rule_schedules_matches_torch_on_gpu():
    x, index, src = _scatter_inputs("cuda")
    got = bt.jit(target="gpu")(scatter_add_rows)(x, index, src)
    torch.testing.assert_close(got, x.scatter_add(1, index, src))


# --------------------------------------------------------------------------------------------------
# LongRows: GeneralReduction's row loops stay loops past 32 steps
# --------------------------------------------------------------------------------------------------

def _logsumexp_rows(x):
    m = x.max(axis=-1, keepdims=True)
    e = bt.exp(x - m)
    return e / e.sum(axis=-1, keepdims=True)


def _kernel_source(source: str, name: str) -> str:
    start = re.search(rf"void __launch_bounds__\(\d+\) {name}\(", source).start()
    start = source.index("{", start)
    end = source.find("extern \"C\"", start)
    return source[start:end if end > 0 else len(source)]


@pytest.mark.parametrize("width", [4097, 32001])
def test_long_rows_keep_their_loops(width):
    """Rows no vectors tile (RowKernel declines them; InnerReduction takes them): a 32001-wide row is a
    loop in the CUDA, not thousands of lines (GeneralReduction's unrolled 126 steps of 256 threads ran
    8x slower on an H100; LongRows keeps its loops where GeneralReduction still schedules a kernel)."""
    k = bt.jit(target="gpu")(_logsumexp_rows).compile(torch.empty(64, width, device="meta"))
    [kernel] = k.fusion
    assert kernel.rule == "InnerReduction"
    body = _kernel_source(k.source, kernel.cuda_kernels[0])
    assert "for (" in body and body.count("\n") < 200

# -- fused row kernels (softmax, norms, cross-entropy): RowKernel's vector loads -------------------

def row_softmax(x):
    e = bt.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def row_log_softmax(x):
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - bt.log(bt.exp(shifted).sum(axis=-1, keepdims=True))


def row_rmsnorm(x, w):
    return x * bt.rsqrt((x * x).mean(-1, keepdims=True) + 1e-5) * w


def row_layernorm(x, w, b):
    mu = x.mean(axis=-1, keepdims=True)
    xc = x - mu
    var = (xc * xc).mean(axis=-1, keepdims=True)
    return xc * bt.rsqrt(var + 1e-5) * w + b


def row_cross_entropy(logits, target):
    m = logits.max(axis=-1, keepdims=True)
    lse = m + bt.log(bt.exp(logits - m).sum(axis=-1, keepdims=True))
    picked = gather_elements(logits, bt.expand_dims(target, 1), axis=1)
    return (lse - picked).mean()


def torch_row_softmax(x):
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


def torch_row_log_softmax(x):
    shifted = x - x.amax(dim=-1, keepdim=True)
    return shifted - torch.log(torch.exp(shifted).sum(dim=-1, keepdim=True))


def torch_row_rmsnorm(x, w):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-5) * w


def torch_row_layernorm(x, w, b):
    mu = x.mean(dim=-1, keepdim=True)
    xc = x - mu
    var = (xc * xc).mean(dim=-1, keepdim=True)
    return xc * torch.rsqrt(var + 1e-5) * w + b


def torch_row_cross_entropy(logits, target):
    m = logits.amax(dim=-1, keepdim=True)
    lse = m + torch.log(torch.exp(logits - m).sum(dim=-1, keepdim=True))
    return (lse - torch.take_along_dim(logits, target[:, None], dim=1)).mean()


ROW_FNS = {row_softmax: torch_row_softmax, row_log_softmax: torch_row_log_softmax, row_rmsnorm: torch_row_rmsnorm,
           row_layernorm: torch_row_layernorm, row_cross_entropy: torch_row_cross_entropy}


def row_inputs(fn, rows, cols, dtype, device="cpu"):
    x = torch.randn(rows, cols).to(device=device, dtype=dtype)
    if fn is row_cross_entropy:
        return x, torch.randint(0, cols, (rows,), device=device)
    extra = {row_rmsnorm: 1, row_layernorm: 2}.get(fn, 0)
    return (x,) + tuple(torch.randn(cols).to(device=device, dtype=dtype) for _ in range(extra))


@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_row_kernel_computes_a_softmax_exp_once_into_registers(dtype):
    """exp(x - max) is read by the row sum and by the division: each thread computes its 32 elements'
    exps once, into registers (no stack frame), instead of once per pass."""
    k = bt.jit(target=SM90)(row_softmax).compile(torch.empty(64, 4096, dtype=dtype, device="meta"))
    assert row_kernel(k).launch == "grid 64 x block 128", str(k.fusion)
    assert len(re.findall(r"\b(?:hexp|expf)\(", k.source)) == 4096 // 128
    ptxas = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-Xptxas", "-v", "-x", "cu", "-", "-o", os.devnull],
                           input=k.source, capture_output=True, text=True)
    assert ptxas.returncode == 0 and "0 bytes stack frame" in ptxas.stderr, ptxas.stderr[-2000:]


def scaled_softmax(x, y):
    """Perf fuzzer p20: rows upcast, a maximum with a broadcast row, divided by a constant, a softmax."""
    h = torch.maximum(x.float(), y[None, :].float()) / 0.7
    e = torch.exp(h - h.max(dim=-1, keepdim=True).values)
    return (e / e.sum(-1, keepdim=True)).to(x.dtype)


@pytest.mark.parametrize("cols, dtype", [(1024, torch.float16), (4096, torch.bfloat16), (2048, torch.float32)])
def test_row_kernel_computes_a_divided_input_once_into_registers(cols, dtype):
    """`maximum(x, y) / 0.7`, read by the row's max and by its exp: each thread divides its elements
    once, into registers (the exp then reads them there), not once per pass; x is read once."""
    k = bt.jit(target=SM90)(scaled_softmax).compile(torch.empty(96, cols, dtype=dtype, device="meta"),
                                                    torch.empty(cols, dtype=dtype, device="meta"))
    kernel = row_kernel(k)
    assert kernel.rule == "RowKernel", str(k.fusion)
    threads = int(re.fullmatch(r"grid 96 x block (\d+)", kernel.launch).group(1))
    body = kernel_body(k.source, kernel.cuda_kernels[0])
    assert body.count("0x1.666666p-1f") == cols // threads, body   # the constant 0.7: a division each
    lanes = 16 // dtype.itemsize
    assert len(re.findall(r"= \*\((?:float4|uint4)\*\)\(x_ptr \+", body)) == cols // (threads * lanes), body
    if shutil.which("nvcc"):
        ptxas = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "-Xptxas", "-v", "-x", "cu", "-", "-o", os.devnull],
                               input=k.source, capture_output=True, text=True)
        assert ptxas.returncode == 0 and "0 bytes stack frame" in ptxas.stderr, ptxas.stderr[-2000:]


def norm_of_two_means(x, w):
    """Perf fuzzer p132: the mean `sum / n`, one value a row, read by `x - mu` and by the variance."""
    d = x - x.mean(-1, keepdim=True)
    return d / torch.sqrt(x.var(-1, keepdim=True, unbiased=False) + 1e-6) * w


def test_row_kernel_keeps_no_per_row_division():
    """A division once per row (a mean) that two blocks read is no row of elements to keep: RowKernel
    takes the norm as before, without registers per element for it."""
    k = bt.jit(target=SM90)(norm_of_two_means).compile(torch.empty(558, 2048, device="meta"),
                                                       torch.empty(2048, device="meta"))
    assert row_kernel(k).rule == "RowKernel", str(k.fusion)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_cpu_scaled_softmax_agrees_with_torch(dtype):
    x, y = special_rows(8, 1024, dtype, "cpu").to(dtype), torch.randn(1024).to(dtype)
    got = bt.jit(target="cpu")(scaled_softmax)(x, y)
    torch.testing.assert_close(got.float(), scaled_softmax(x.float(), y.float()), rtol=2e-2, atol=2e-3,
                               equal_nan=True)


@pytest.mark.gpu
@pytest.mark.parametrize("rows, cols, dtype", [(34080, 1024, torch.float16), (40, 4096, torch.bfloat16),
                                               (33, 2048, torch.float32), (0, 1024, torch.float16)])
def test_gpu_scaled_softmax_agrees_with_torch(rows, cols, dtype):
    x = special_rows(max(rows, 5), cols, dtype, "cuda")[:rows].to(dtype)
    y = torch.randn(cols, device="cuda").to(dtype)
    got = bt.jit(target="gpu")(scaled_softmax)(x, y)
    torch.testing.assert_close(got.float(), scaled_softmax(x.float(), y.float()), rtol=2e-2, atol=2e-3,
                               equal_nan=True)


def test_row_kernel_exp_of_wide_rows_stays_inlined():
    """Rows whose per-thread share would not fit registers (8192 halves: 64 a thread) keep the exp
    inlined into both passes."""
    k = bt.jit(target=SM90)(row_softmax).compile(torch.empty(8, 8192, dtype=torch.float16, device="meta"))
    assert row_kernel(k).rule == "RowKernel" and schedules.THREAD_AXIS not in k.stages["schedule"]
    assert len(re.findall(r"\bhexp\(", k.source)) == 2 * 8  # in both passes' loops: 8 lanes a vector


def row_kernel(k):
    """The one fused row kernel of a compiled function (its fusion entry)."""
    (kernel,) = [kernel for kernel in k.fusion if kernel.name.startswith("fused_rows") or kernel.name == "softmax"]
    return kernel


def kernel_body(source: str, name: str) -> str:
    start = source.index(" {\n", source.rindex(f" {name}("))
    return source[start:source.index("\n}\n", start)]


def param_id(value) -> str:
    """A test id that is the same in every process (a function's str holds its address)."""
    return getattr(value, "__name__", str(value))


HALF_ROWS = [(fn, dtype) for fn in (row_softmax, row_rmsnorm) for dtype in (torch.float16, torch.bfloat16)]


@pytest.mark.parametrize("fn, dtype, cols, launch", [
    *[(fn, dtype, 4096, "grid 64 x block 128") for fn, dtype in HALF_ROWS],
    (row_softmax, torch.float32, 4096, "grid 64 x block 128"),
    (row_log_softmax, torch.float32, 1024, "grid 64 x block 128"),
    (row_layernorm, torch.float16, 4096, "grid 64 x block 128"),
    (row_rmsnorm, torch.float16, 512, "grid 64 x block 64"),      # 64 threads of 8 halves tile the row
    (row_cross_entropy, torch.float32, 8192, "grid 64 x block 128"),  # (online pairs: InnerReduction)
], ids=param_id)
def test_row_kernel_rule_loads_and_stores_whole_vectors(fn, dtype, cols, launch, nvcc_at_module_end):
    """One block per row; each thread moves 16 bytes per step: the row is read with vector loads into
    registers (uint4: 8 halves, float4: 4 floats) in every reduction and in the element-wise block, and
    the results stored as vectors, never one scalar element of the row at a time."""
    k = bt.jit(target=SM90)(fn).compile(*(a.to("meta") for a in row_inputs(fn, 64, cols, dtype)))
    kernel = row_kernel(k)
    assert kernel.rule == "RowKernel" and kernel.launch == launch, str(k.fusion)
    (name,) = kernel.cuda_kernels
    body = kernel_body(k.source, name)
    vector = "float4" if dtype == torch.float32 else "uint4"
    row = "logits_ptr" if fn is row_cross_entropy else "x_ptr"
    assert re.search(rf"= \*\({vector}\*\)\({row} \+", body), body
    # no scalar read of the row (cross-entropy's gather reads the target's logit: one per row)
    assert body.count(f"{row}[") == (1 if fn is row_cross_entropy else 0), body
    if fn is not row_cross_entropy:  # the element-wise block stores whole vectors of the result
        assert re.search(rf"\*\({vector}\*\)\(T_\w+_ptr \+ [^;]*\) = \*\({vector}\*\)\(\w+_local_ptr", body), body
    assert "__shfl_down_sync" in body  # the cross-thread reduction
    nvcc_at_module_end(k.source)


def row_softmax_any(x: bt.Tensor(("n", "m"), "float16")):
    e = bt.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


@pytest.mark.parametrize("fn, dtype, cols", [
    (row_softmax, torch.float16, 1025),   # odd: no whole vectors tile the row
    (row_rmsnorm, torch.bfloat16, 1028),  # 4 halves would, but 8-byte loads; 1028 / 8 is not whole
    (row_softmax, torch.float32, 1000),   # 250 float4 per row: no power-of-two block of >= 64 tiles it
    (row_layernorm, torch.float32, 48),   # 12 vectors: fewer than 64 threads (rows share a block there)
], ids=param_id)
def test_row_kernel_rule_leaves_rows_it_cannot_tile_to_inner_reduction(fn, dtype, cols, nvcc_at_module_end):
    k = bt.jit(target=SM90)(fn).compile(*(a.to("meta") for a in row_inputs(fn, 64, cols, dtype)))
    assert row_kernel(k).rule == "InnerReduction", str(k.fusion)
    nvcc_at_module_end(k.source)


def test_row_kernel_rule_leaves_a_symbolic_width_to_inner_reduction():
    k = bt.jit(target=SM90)(row_softmax_any).compile(torch.empty(64, 4096, dtype=torch.float16, device="meta"))
    assert row_kernel(k).rule == "InnerReduction", str(k.fusion)


def test_row_kernel_rule_takes_a_symbolic_row_count():
    def rows_any(x: bt.Tensor(("n", 2048), "float16")):
        e = bt.exp(x - x.max(axis=-1, keepdims=True))
        return e / e.sum(axis=-1, keepdims=True)
    k = bt.jit(target=SM90)(rows_any).compile(torch.empty(64, 2048, dtype=torch.float16, device="meta"))
    assert row_kernel(k).rule == "RowKernel" and row_kernel(k).launch == "grid n x block 128", str(k.fusion)


WIDTHS = st.one_of(st.integers(1, 64).map(lambda i: 64 * i), st.integers(2, 5000))  # 1: no reduction left


@settings(max_examples=10, deadline=None)
@given(cols=WIDTHS, dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]))
def test_row_kernel_rule_takes_every_row_that_a_warp_of_vectors_tiles(cols, dtype, nvcc_batch_of_module):
    """RowKernel takes a softmax exactly when 64 threads of 8-byte vectors tile its rows (16 bytes where
    that still leaves 64 threads; narrower rows share a block in InnerReduction), and every thread
    count it picks tiles the row with its vectors."""
    k = bt.jit(target=SM90)(row_softmax).compile(torch.empty(8, cols, dtype=dtype, device="meta"))
    kernel = row_kernel(k)
    tiles = cols % (64 * 8 // dtype.itemsize) == 0
    assert (kernel.rule == "RowKernel") == tiles, (cols, str(k.fusion))
    if tiles:
        threads = int(re.fullmatch(r"grid 8 x block (\d+)", kernel.launch).group(1))
        vector = re.search(r"= \*\((\w+)\*\)\(x_ptr \+", k.source).group(1)
        lanes = VECTOR_BYTES[vector] // dtype.itemsize
        assert cols % (threads * lanes) == 0 and 64 <= threads <= 256, (cols, vector, kernel.launch)
        nvcc_batch_of_module.add(f"row_softmax[{cols}-{dtype}]", k.source)


VECTOR_BYTES = {"float4": 16, "uint4": 16, "float2": 8, "uint2": 8, "half4": 8, "nv_bfloat164": 8}


def special_rows(rows: int, cols: int, dtype, device) -> torch.Tensor:
    """Random rows, then a row holding a NaN, one holding +inf, one holding -inf, an all -inf row and a
    row of large values (exp overflows without the max shift, squares stay finite in float16)."""
    x = torch.randn(rows, cols, device=device)
    x[0, cols // 3] = float("nan")
    x[1, cols - 1] = float("inf")
    x[2, 0] = -float("inf")
    x[3] = -float("inf")
    x[4] = x[4] * 30.0
    return x.to(dtype)


ROW_TOL = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 3e-2}  # as corpus.Workload.tolerance


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=param_id)
@pytest.mark.parametrize("cols", [4096, 1024, 512, 1025], ids=param_id)
@pytest.mark.parametrize("fn", [row_softmax, row_log_softmax, row_rmsnorm, row_layernorm], ids=param_id)
def test_gpu_row_kernels_agree_with_torch(fn, cols, dtype):
    x, *params = row_inputs(fn, 64, cols, dtype, "cuda")
    x = special_rows(64, cols, dtype, "cuda")
    got = bt.jit(target="gpu")(fn)(x, *params)
    want = ROW_FNS[fn](x, *params)
    tol = ROW_TOL[dtype]
    torch.testing.assert_close(got, want, rtol=tol, atol=tol, equal_nan=True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=param_id)
@pytest.mark.parametrize("cols", [32000, 4096, 1000], ids=param_id)
def test_gpu_row_cross_entropy_agrees_with_torch(cols, dtype):
    logits, target = row_inputs(row_cross_entropy, 256, cols, dtype, "cuda")
    logits[3] = logits[3] * 30.0
    got = bt.jit(target="gpu")(row_cross_entropy)(logits, target)
    tol = ROW_TOL[dtype]
    torch.testing.assert_close(got, torch_row_cross_entropy(logits, target), rtol=tol, atol=tol)
    logits[5, 7] = float("nan")  # one NaN logit: the mean is NaN, as torch's
    assert torch.isnan(bt.jit(target="gpu")(row_cross_entropy)(logits, target))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_gpu_half_division_is_float32_rounded_once(dtype):
    """CUDA's half division is a correctly rounded software routine: a half softmax divides in float32
    and rounds once, as torch's kernels do (and as the CPU computes all half arithmetic)."""
    k = bt.jit(target=SM90)(row_softmax).compile(torch.empty(64, 4096, dtype=dtype, device="meta"))
    body = kernel_body(k.source, row_kernel(k).cuda_kernels[0])
    # the divisor is a float cast, or a float read through the divisor's guard (legalize.kept)
    divisors = re.findall(r" / \(\*?\((\w+)[ )]", body)
    assert divisors and set(divisors) == {"float"}, body


def _chain(a, b):
    return bt.sigmoid((a + b) * a - b)


def _total(x):
    return x.sum()


@pytest.mark.parametrize("fn, small, large, reference", [
    (_chain, (1 << 14,), (1 << 15,), lambda a, b: torch.sigmoid((a + b) * a - b)),
    (_total, (256, 256), (1024, 1024), lambda x: x.sum())], ids=["elementwise", "full_sum"])
def test_cpu_small_kernels_stay_on_the_calling_thread(fn, small, large, reference):
    """A parallel launch costs more than one pass over 16,384 elements (a reduction's passes over
    65,536): smaller kernels run on the calling thread (no parallel launch in the LLVM)."""
    arity = len(inspect.signature(fn).parameters)
    f = bt.jit(target="cpu")(fn)
    assert "TVMBackendParallelLaunch" not in f.compile(*[torch.empty(small, device="meta")] * arity).source
    assert "TVMBackendParallelLaunch" in f.compile(*[torch.empty(large, device="meta")] * arity).source
    args = [torch.randn(small) for _ in range(arity)]
    torch.testing.assert_close(f(*args), reference(*args), rtol=1e-5, atol=1e-3)


# -- no loop nest of more than 10^5 iterations on one thread: few long rows, epilogues, pairs -------

def _rms(x):
    return x * bt.rsqrt((x * x).mean(-1, keepdims=True) + 1e-6)


def _rss(x):
    return x * bt.rsqrt((x * x).sum(-1, keepdims=True))


def _l1(x):
    return x / bt.abs(x).sum(-1, keepdims=True)


def _by_max(x):
    return x / x.max(-1, keepdims=True)


def _lib_rms(x, g):
    return bt.rms_norm(x, g)


def _logsumexp(x):
    m = x.max(-1, keepdims=True)
    return bt.log(bt.exp(x - m).sum(-1, keepdims=True)) + m


def _softmax_rows(x):
    e = bt.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _layer_norm_rows(x):
    c = x - x.mean(-1, keepdims=True)
    return c * bt.rsqrt((c * c).mean(-1, keepdims=True) + 1e-5)


def _centre(x):
    return x - x.mean(-1, keepdims=True)


def _mean0(x):
    return x.mean(axis=0)


def _variance(x):
    m = x.mean()
    return ((x - m) * (x - m)).mean()


def _std(x):
    m = x.mean()
    return bt.sqrt(((x - m) * (x - m)).mean())


def _bias_product(x, w, b):
    return x @ w + b


def _gelu_product(x, w):
    return bt.gelu(x @ w)


def _torch_rms(x):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6)


R = torch.randn
LONG_ROW_CASES = [
    ("rms-1x100000", _rms, lambda: [R(1, 100000)], _torch_rms),
    ("rms-5x100003", _rms, lambda: [R(5, 100003)], _torch_rms),
    ("rms-2x65536", _rms, lambda: [R(2, 65536)], _torch_rms),
    ("rms-8x16384", _rms, lambda: [R(8, 16384)], _torch_rms),
    ("rms-16x8192", _rms, lambda: [R(16, 8192)], _torch_rms),
    ("rsqrt-sum", _rss, lambda: [R(1, 200000)], lambda x: x * torch.rsqrt((x * x).sum(-1, keepdim=True))),
    ("l1", _l1, lambda: [R(1, 200000)], lambda x: x / x.abs().sum(-1, keepdim=True)),
    ("by-max", _by_max, lambda: [R(1, 200000)], lambda x: x / x.amax(-1, keepdim=True)),
    ("lib-rms-norm", _lib_rms, lambda: [R(1, 200000), R(200000)],
     lambda x, g: torch.nn.functional.rms_norm(x, (200000,), g, 1e-5)),
    ("logsumexp", _logsumexp, lambda: [R(1, 200000)], lambda x: torch.logsumexp(x, -1, keepdim=True)),
    ("softmax-1x100000", _softmax_rows, lambda: [R(1, 100000)], lambda x: torch.softmax(x, -1)),
    ("softmax-3x50001", _softmax_rows, lambda: [R(3, 50001)], lambda x: torch.softmax(x, -1)),
    ("layernorm-1x100000", _layer_norm_rows, lambda: [R(1, 100000)],
     lambda x: torch.nn.functional.layer_norm(x, (100000,), eps=1e-5)),
    ("centre", _centre, lambda: [R(4, 60000)], lambda x: x - x.mean(-1, keepdim=True)),
    ("mean0-3d", _mean0, lambda: [R(8, 4096, 33)], lambda x: x.mean(0)),
    ("mean0-4d", _mean0, lambda: [R(2, 3, 64, 600)], lambda x: x.mean(0)),
    ("variance", _variance, lambda: [R(200000)], lambda x: x.var(unbiased=False)),
    ("std", _std, lambda: [R(200000)], lambda x: x.std(unbiased=False)),
    ("f64-bias-product", _bias_product, lambda: [R(512, 512).double(), R(512, 512).double(), R(512).double()],
     lambda x, w, b: x @ w + b),
    ("f64-gelu-product", _gelu_product, lambda: [R(512, 512).double(), R(512, 512).double()],
     lambda x, w: torch.nn.functional.gelu(x @ w)),
]


@pytest.mark.parametrize("fn, make, ref", [c[1:] for c in LONG_ROW_CASES], ids=[c[0] for c in LONG_ROW_CASES])
def test_cpu_epilogues_and_few_long_rows_run_in_parallel(fn, make, ref):
    """A reduction cut into parallel chunks (few long rows, a full or column reduction, a float64
    product) had its element-wise epilogue (the RMS norm's scaling, the mean's division, the bias) in
    a serial loop nest of its own: now in parallel and vectorised. Several reductions over one long
    row (a logsumexp, a softmax) are a parallel pass each, not one row on one thread."""
    torch.manual_seed(0)
    args = make()
    f = bt.jit(target="cpu")(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error", schedules.SerialKernelWarning)
        k = f.compile(*args)
        got = f(*args)
    torch.testing.assert_close(got, ref(*args), rtol=1e-4, atol=1e-5)
    assert schedules.serial_kernels(k.module, k.target) == []
    for func in k.module.functions.values():
        if isinstance(func, tvm.tirx.PrimFunc):  # no loop nest of 10^5 iterations outside a parallel loop
            assert schedules.serial_work(func, gpu=False) <= 20000, func.script()
    schedule = k.stages["schedule"]
    assert schedule.count("T.parallel") >= 2, schedule  # the reduction's chunks and the epilogue
    assert "TVMBackendParallelLaunch" in k.source
    if fn is not _logsumexp:  # (its two reductions' 64 chunks of 3125 are odd: scalar loops, in parallel)
        assert re.search(r"<\d+ x (float|double)>", k.source)


def test_cpu_one_row_of_several_blocks_is_not_computed_once_per_element():
    """A one-row softmax: the element-wise blocks lost the unit row axis to normalisation, and their
    first loop (one per element) was taken for the row, so every block ran once per element (a
    (1, 100000) softmax took 1.4 s). A small one stays one serial pass of each block."""
    x = torch.randn(1, 1000)
    k = bt.jit(target="cpu")(_softmax_rows).compile(x)
    [func] = [f for f in k.module.functions.values() if isinstance(f, tvm.tirx.PrimFunc)]
    assert schedules.serial_work(func, gpu=False) < 10000, func.script()
    torch.testing.assert_close(k(x), torch.softmax(x, -1))


def _argmax_all(x):
    return x.argmax()


def _argmin_all(x):
    return x.argmin()


def _argmax_rows(x):
    return bt.argmax(x, axis=-1)


@pytest.mark.parametrize("fn, ref", [(_argmax_all, torch.argmax), (_argmin_all, torch.argmin),
                                     (_argmax_rows, lambda x: torch.argmax(x, dim=-1))],
                         ids=["argmax", "argmin", "argmax-rows"])
def test_cpu_whole_tensor_argmax_is_cut_into_parallel_chunks(fn, ref):
    """A whole-tensor argmax was one serial loop of 10^6 steps: now chunks reduced in parallel, then
    their (index, value) pairs folded, with torch's rule (the first index of the extreme value; the
    first NaN wins) whatever the order of the fold. Three long rows: one row per thread, no warning."""
    f = bt.jit(target="cpu")(fn)
    shape = (3, 333333) if fn is _argmax_rows else (1_000_000,)
    with warnings.catch_warnings():
        warnings.simplefilter("error", schedules.SerialKernelWarning)
        k = f.compile(torch.empty(shape, device="meta"))
    assert all(kk.launch.startswith("parallel") for kk in k.fusion if kk.rule == "CPUReduction"), k.fusion
    assert "TVMBackendParallelLaunch" in k.source
    torch.manual_seed(0)
    ties = torch.randint(-3, 4, shape).float()       # many equal extremes in every chunk
    assert torch.equal(f(ties), ref(ties))
    x = torch.randn(shape)
    assert torch.equal(f(x), ref(x))
    flat = x.view(-1)
    flat[[700_000 % flat.numel(), 900_000 % flat.numel()]] = float("nan")  # NaN wins, the first one
    assert torch.equal(f(x), ref(x))
    for n in (1, 5, 4097):  # small and odd sizes keep their results
        y = torch.randint(-2, 3, (n,)).float()
        if fn is not _argmax_rows:
            assert torch.equal(f(y), ref(y))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_cpu_argmax_of_a_few_long_rows_matches_torch(dtype):
    """A few long rows: a bfloat16 argmax (its values compared in float32) cut into chunks gave
    chunk-local indices (65 for 13): such rows keep one row per thread."""
    torch.manual_seed(0)
    x = torch.randint(-50, 50, (4, 100000)).to(dtype)
    x[1, 5] = float("nan")
    assert torch.equal(bt.jit(target="cpu")(_argmax_rows)(x), torch.argmax(x, dim=-1))


@bt.jit(target="cpu")
def _arg_extremes(x):
    return x.argmax(), x.argmin(), bt.argmax(x, axis=0), bt.argmin(x, axis=1, keepdims=True), bt.argmax(x, axis=-1)


@bt.jit(target="cpu")
def _arg_extremes_f32(x: bt.Tensor(("a", "b", "c"), "float32")):
    return _arg_extremes(x)


@bt.jit(target="cpu")
def _arg_extremes_f16(x: bt.Tensor(("a", "b", "c"), "float16")):
    return _arg_extremes(x)


@bt.jit(target="cpu")
def _arg_extremes_bf16(x: bt.Tensor(("a", "b", "c"), "bfloat16")):
    return _arg_extremes(x)


_ARG_EXTREMES = {"float32": _arg_extremes_f32, "float16": _arg_extremes_f16, "bfloat16": _arg_extremes_bf16}


@settings(max_examples=12, deadline=None)
@given(dtype=st.sampled_from(sorted(_ARG_EXTREMES)), a=st.integers(1, 4), b=st.integers(1, 5),
       c=st.sampled_from([1, 2, 7, 64, 700, 1500]), seed=st.integers(0, 2**16),
       pool=st.sampled_from([(0.0, 1.0, -1.0), (0.0, float("inf"), float("-inf")), (1.0, float("nan"), -1.0),
                             (float("nan"), float("inf"), float("-inf"), 2.0, -2.0)]))
def test_cpu_argmax_argmin_of_every_axis_match_torch(dtype, a, b, c, seed, pool):
    """argmax/argmin of the whole tensor (chunks reduced in parallel, symbolic sizes) and of each axis,
    over a few values (ties everywhere), NaN and infinities: torch's first index of the extreme, or of
    the first NaN. A whole-tensor bfloat16 argmin compared the bits of its values as integers."""
    g = torch.Generator().manual_seed(seed)
    pick = torch.randint(0, len(pool), (a, b, c), generator=g)
    x = torch.tensor(pool)[pick].to(getattr(torch, dtype))
    want = (x.argmax(), x.argmin(), x.argmax(0), x.argmin(1, keepdim=True), x.argmax(-1))
    for got, ref in zip(_ARG_EXTREMES[dtype](x), want, strict=True):
        assert torch.equal(got, ref), (x.shape, pool, got, ref)


def _sym_sum(x: bt.Tensor(("a", "b", "c"), "float32")):
    return x.sum()


def _sym_mean(x: bt.Tensor(("a", "b", "c"), "float16")):
    return x.mean()


def _sym_mean02(x: bt.Tensor(("a", "b", "c"), "float16")):
    return x.mean(axis=(0, 2))


@pytest.mark.parametrize("fn, ref", [(_sym_sum, lambda x: x.sum()), (_sym_mean, lambda x: x.float().mean().half()),
                                     (_sym_mean02, lambda x: x.float().mean((0, 2)).half())],
                         ids=["sum", "mean", "mean02"])
def test_symbolic_split_reductions_do_not_warn(fn, ref):
    """The fold of a symbolic full sum's chunks of 4096 counted each of three sizes as 4096: about
    16,777,216 serial steps, though the chunks themselves run in parallel. A tensor's symbolic sizes
    together now count at most SYMBOLIC_GUESS ** 2 elements."""
    x = torch.randn(8, 4096, 33)
    x = x.half() if fn is not _sym_sum else x
    f = bt.jit(target="cpu")(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error", schedules.SerialKernelWarning)
        got = f(x)
    torch.testing.assert_close(got, ref(x), rtol=2e-2, atol=2e-2)


def test_serial_work_still_counts_a_serial_symbolic_nest():
    from tvm.script import tirx as T

    @T.prim_func(s_tir=True)
    def serial(a: T.handle, b: T.handle):
        n, m, k = T.int64(), T.int64(), T.int64()
        A = T.match_buffer(a, (n, m, k), "float32")
        B = T.match_buffer(b, (n, m, k), "float32")
        for i, j, l in T.grid(n, m, k):
            with T.sblock("b"):
                vi, vj, vl = T.axis.remap("SSS", [i, j, l])
                B[vi, vj, vl] = A[vi, vj, vl] + 1.0

    assert schedules.serial_work(serial, gpu=False) == schedules.SYMBOLIC_GUESS ** 2  # 256 ** 3
    cpu = tvm.target.Target("llvm")
    assert schedules.serial_kernels(schedules.apply(tvm.IRModule({"serial": serial}), cpu, "dlight", 0), cpu) == []


def _column_sum(x: bt.Tensor(("n", "d"), "float32")):
    return x.sum(axis=0)


def test_cpu_symbolic_column_sum_reads_rows_of_contiguous_columns(cpu_target):
    """A column sum over a symbolic row: each task reduces rows of contiguous columns, a row at a
    time, instead of one parallel step per column reading it with a stride of a row."""
    f = bt.jit(target=cpu_target)(_column_sum)
    torch.manual_seed(0)
    for shape in [(4096, 1024), (333, 65), (5, 3), (1, 1), (0, 7)]:
        x = torch.randn(*shape)
        # 4,096 rows added one after another are up to 6e-4 off the exact sum (torch's pairwise
        # sum 4e-5): atol 1e-4 failed one seed in ten
        torch.testing.assert_close(f(x), x.sum(0), rtol=1e-4, atol=1e-3)
    k = f.compile(torch.randn(4096, 1024))
    # CPUOuterReduction: 64 chunks of rows in parallel, each summing whole rows (tiles of 4096
    # columns) a vector of columns at a time, then a fold of the chunks' partial sums
    [kernel] = k.fusion
    assert kernel.rule == "CPUOuterReduction" and kernel.launch == \
        f"parallel (d + T.int64(4095)) // T.int64(4096) * T.int64(64) x vector {float32_lanes(k.target)}", kernel


def float32_lanes(target) -> int:
    """float32 lanes of a vector as the CPU schedules count them (64 bytes with AVX-512, else 32) for
    the target the code was built for, which need not be this host's."""
    return 16 if tvm.target.codegen.target_has_features("avx512f", target) else 8


def _attention(q, k, v):
    return bt.softmax(q @ bt.permute_dims(k, [0, 1, 3, 2]) / 8.0, axis=-1) @ v


def test_cpu_attention_backward_leaves_nothing_serial():
    """The backward's matmul-divide kernel (524,288 iterations) had its epilogue in a serial nest."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 512, 64, requires_grad=True) for _ in range(3))
    with warnings.catch_warnings():
        warnings.simplefilter("error", schedules.SerialKernelWarning)
        bt.jit(target="cpu")(_attention)(q, k, v).sum().backward()
    q2, k2, v2 = (t.detach().clone().requires_grad_() for t in (q, k, v))
    (torch.softmax(q2 @ k2.transpose(-1, -2) / 8.0, -1) @ v2).sum().backward()
    for a, b in ((q, q2), (k, k2), (v, v2)):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-4)


# -- through registers on the GPU: one element of a broadcast per thread; a buffer read at several
# -- indices per element (split halves, relative positions) read in place ---------------------------

def _erf_scaled(x, s):
    return torch.erf(x) * s


def _round_div(x, s):
    return torch.round(x / s)


def _rsqrt_scaled(x, s):
    return x * torch.rsqrt(s)


def _gpu_builds(k, nvcc_at_module_end) -> None:
    """A kernel built for sm_90 vectorises nothing wider than CUDA's vectors, and nvcc takes its source
    (checked with the module's other sources when it ends)."""
    lanes = [int(n) for n in re.findall(r"T\.vectorized\(T\.int64\((\d+)\)\)", k.stages["schedule"])]
    assert all(n <= 8 for n in lanes), lanes   # the thread's own loop once became a 256-lane vector
    nvcc_at_module_end(k.source)


def _with_specials(x, s):
    """x with inf, -inf and NaN, s with a zero and a negative (round(x / 0), rsqrt(-1))."""
    x, s = x.clone(), s.clone()
    x.view(-1)[:3] = torch.tensor([math.inf, -math.inf, math.nan])
    s.view(-1)[:2] = torch.tensor([0.0, -1.0])[:s.numel()]
    return x, s


@settings(max_examples=10, deadline=None)
@given(fn=st.sampled_from([_erf_scaled, _round_div, _rsqrt_scaled]),
       shape=st.sampled_from([(16, 64), (8, 4, 64), (32, 96), (2, 8, 128)]),
       broadcast=st.lists(st.booleans(), min_size=3, max_size=3),
       dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]))
def test_gpu_a_scale_broadcast_along_rows_is_one_register_per_thread(fn, shape, broadcast, dtype, nvcc_batch_of_module):
    """`erf(x) * s`, `round(x / s)`, `x * rsqrt(s)` with s broadcast along some axes (issue 28; the
    corpus' absmax quantisation): the math call stages the kernel through registers, and a copy of
    one element of s per thread (s broadcast along the last axis) got the thread's own loop
    vectorised, a 256-lane vector ("VectorizeLoop before LiftStorageAlloc")."""
    s_shape = tuple(1 if b else n for b, n in zip(broadcast[-len(shape):], shape))
    torch.manual_seed(0)
    x = (torch.randn(shape) * 4).to(dtype)
    s = (torch.rand(s_shape) + 0.5).to(dtype)
    built = bt.jit(target="gpu")(fn).compile(x.to("meta"), s.to("meta"))
    _gpu_builds(built, lambda source: nvcc_batch_of_module.add(f"scale broadcast {fn.__name__} {shape}", source))
    x, s = _with_specials(x, s)
    f = bt.jit(target="cpu")(fn)
    want = fn(x, s)
    # round of a half quotient: babytriton divides in float32 (README), so a tie may round the other way
    tol = dict(rtol=0, atol=1) if fn is _round_div and dtype != torch.float32 else HALF_TOL[dtype]
    for got in (f(x, s), f.eager(x, s)):
        assert got.dtype == want.dtype
        torch.testing.assert_close(got, want, equal_nan=True, **tol)


def _absmax_quant(x):
    scale = x.abs().amax(dim=-1, keepdim=True) / 127
    return (x / scale).round().clamp(-128, 127).to(torch.int8), scale


def _masked_mean(x, mask):
    return (x * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)


def test_gpu_per_row_scales_build_forward_and_backward(nvcc_at_module_end):
    """The corpus' shapes of the class: absmax int8 quantisation (a row's scale, then every element
    divided by it) and a masked mean's backward (the upstream gradient divided by a per-row count)."""
    torch.manual_seed(0)
    x = torch.randn(16, 64) * 2
    _gpu_builds(bt.jit(target="gpu")(_absmax_quant).compile(x.to("meta")), nvcc_at_module_end)
    for got, want in zip(bt.jit(target="cpu")(_absmax_quant)(x), _absmax_quant(x)):
        torch.testing.assert_close(got, want)
    x = torch.randn(2, 8, 64, requires_grad=True)
    mask = torch.arange(8)[None, :] < torch.tensor([5, 8])[:, None]
    _gpu_builds(bt.jit(target="gpu")(_masked_mean).backward(x, mask), nvcc_at_module_end)
    weights = torch.randn(2, 64)
    (bt.jit(target="cpu")(_masked_mean)(x, mask) * weights).sum().backward()
    got, x.grad = x.grad, None
    (_masked_mean(x, mask) * weights).sum().backward()
    torch.testing.assert_close(got, x.grad)


def _split_gate(sizes, gate):
    def fn(x):
        pieces = torch.split(x, sizes, dim=-1)
        h, g = pieces[0], pieces[1]
        return h[..., :g.shape[-1]] * gate(g)
    return fn


@settings(max_examples=8, deadline=None)
@given(sizes=st.sampled_from([[96, 96], [64, 64, 64], [128, 64], [100, 100, 4]]),
       gate=st.sampled_from([torch.erf, torch.sigmoid, torch.nn.functional.gelu]),
       rows=st.sampled_from([(16,), (2, 8)]),
       dtype=st.sampled_from([torch.float32, torch.float16]))
def test_gpu_split_pieces_of_one_buffer_are_read_in_place(sizes, gate, rows, dtype, nvcc_batch_of_module):
    """`h * erf(g)` of pieces of one buffer (issue 28; the corpus' GEGLU): the kernel reads the buffer
    at two offsets per element, whose register copy covered the span between them, a vector of 4,104
    lanes ("Cannot convert type T.int32x4104 to CUDA type"). Such a buffer is read in place."""
    fn = _split_gate(sizes, gate)
    torch.manual_seed(0)
    x = torch.randn(*rows, sum(sizes)).to(dtype)
    built = bt.jit(target="gpu")(fn).compile(x.to("meta"))
    _gpu_builds(built, lambda source: nvcc_batch_of_module.add(f"split pieces {sizes}", source))
    x.view(-1)[:3] = torch.tensor([math.inf, -math.inf, math.nan])
    f = bt.jit(target="cpu")(fn)
    for got in (f(x), f.eager(x)):
        torch.testing.assert_close(got, fn(x), equal_nan=True, **HALF_TOL[dtype])


def _alibi_softmax(scores, slopes):
    T = scores.shape[-1]
    pos = torch.arange(T)
    bias = slopes[:, None, None] * (pos[None, :] - pos[:, None])
    causal = torch.ones(T, T, dtype=torch.bool).tril()
    return (scores + bias).masked_fill(~causal, float("-inf")).softmax(dim=-1)


def test_gpu_a_buffer_read_at_two_indices_per_element_builds(nvcc_at_module_end):
    """ALiBi's `pos[k] - pos[q]` reads one buffer at two indices per element: its register copy covered
    a span whose length depends on the thread ("Failed to vectorize loop with extent T.max(..)")."""
    torch.manual_seed(0)
    scores, slopes = torch.randn(2, 4, 8, 8, requires_grad=True), torch.rand(4, requires_grad=True)
    f = bt.jit(target="gpu")(_alibi_softmax)
    _gpu_builds(f.compile(scores.detach().to("meta"), slopes.detach().to("meta")), nvcc_at_module_end)
    _gpu_builds(f.backward(scores, slopes), nvcc_at_module_end)
    weights = torch.randn(2, 4, 8, 8)
    (bt.jit(target="cpu")(_alibi_softmax)(scores, slopes) * weights).sum().backward()
    got = scores.grad, slopes.grad
    scores.grad = slopes.grad = None
    (_alibi_softmax(scores, slopes) * weights).sum().backward()
    torch.testing.assert_close(got, (scores.grad, slopes.grad), rtol=1e-4, atol=1e-5)


def _half_math_without_cuda_half_forms(x):
    return torch.round(x * 4.0), torch.cosh(x), torch.sinh(x), torch.asin(x / 4.0), torch.atanh(x / 4.0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_gpu_half_math_without_a_cuda_half_form_is_computed_in_float32(dtype, nvcc_at_module_end):
    """TVM names a half math call `h` + its name: `hnearbyint` (round), bfloat16's `hcosh`, `hsinh`
    don't exist (nvcc refused them), asin and atanh of bfloat16 had no lowering at all."""
    x = torch.linspace(-3.5, 3.5, 4096).to(dtype)
    k = bt.jit(target="gpu")(_half_math_without_cuda_half_forms).compile(x.to("meta"))
    _gpu_builds(k, nvcc_at_module_end)
    assert "nearbyintf(" in k.source and "hnearbyint" not in k.source
    x[:2] = torch.tensor([math.nan, math.inf])
    for got, want in zip(bt.jit(target="cpu")(_half_math_without_cuda_half_forms)(x), _half_math_without_cuda_half_forms(x)):
        torch.testing.assert_close(got, want, equal_nan=True, **HALF_TOL[dtype])
