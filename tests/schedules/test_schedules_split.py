"""SplitReduction over row kernels of several reductions: a softmax, a norm or a variance of few long
rows is cut over blocks reduction after reduction (each in two launches), not one block a row."""
import re
import shutil
import warnings

import pytest
import torch
import torch.nn.functional as F
import tvm
from tvm import relax, tirx
from hypothesis import example, given, settings, strategies as st

import babytriton as bt
from babytriton import schedules

from test_schedules import SM90, nvcc_ptx
from test_schedules_small import _serial


def softmax_of_all(x):
    return torch.softmax(30.0 * torch.tanh(x / 30.0), dim=-1)


def layer_norm_rows(x):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) * torch.rsqrt(var + 1e-5)


def group_norm(x):
    h = x.to(torch.float32)
    g = h.reshape(h.shape[0], 2, -1)
    mu = g.mean(-1, keepdim=True)
    var = g.var(-1, keepdim=True, unbiased=False)
    return ((g - mu) / torch.sqrt(var + 1e-5)).reshape(x.shape)


def log_softmax_rows(x):
    return F.log_softmax(x.float(), dim=-1)


def symbolic_softmax(x: bt.Tensor((3, "n"), "float32")):
    return torch.softmax(x, dim=-1)


CASES = [(softmax_of_all, (1545689,)), (layer_norm_rows, (4, 65536)), (group_norm, (4, 16, 49, 1536)),
         (log_softmax_rows, (60, 300007)), (layer_norm_rows, (128, 1 << 18))]


def _kernels(k):
    """(rule, launches) of each kernel that reduces."""
    return [(kk.rule, len(kk.cuda_kernels)) for kk in k.fusion if any(op in str(kk) for op in ("max", "sum", "mean"))]


@pytest.mark.parametrize("fn,shape", CASES, ids=lambda v: getattr(v, "__name__", str(v)))
def test_few_long_rows_are_split_over_blocks(fn, shape):
    with warnings.catch_warnings():
        warnings.simplefilter("error", schedules.SerialKernelWarning)
        k = bt.jit(target=SM90)(fn).compile(torch.empty(shape, device="meta"))
    [(rule, launches)] = _kernels(k)
    assert rule == "SplitReduction" and launches >= 3, str(k.fusion)   # each reduction in two, then the rest
    if shutil.which("nvcc"):
        assert b".entry" in nvcc_ptx(k.source)


@pytest.mark.parametrize("shape", [(8, 4096), (64, 32000), (32, 1 << 17), (129, 1 << 18)])
def test_short_or_many_rows_keep_one_launch(shape):
    """Rows short enough for a block each, or enough rows to fill the GPU: one launch reads each row
    once (the row rules)."""
    k = bt.jit(target=SM90)(layer_norm_rows).compile(torch.empty(shape, device="meta"))
    [(rule, launches)] = _kernels(k)
    assert rule != "SplitReduction" and launches == 1, str(k.fusion)


def test_symbolic_long_rows_are_split():
    k = bt.jit(target=SM90)(symbolic_softmax).compile()
    [(rule, launches)] = _kernels(k)
    assert rule == "SplitReduction" and launches >= 4, str(k.fusion)


@settings(max_examples=4, deadline=None)
@given(rows=st.integers(1, 128), length=st.integers(1 << 18, 1 << 19), which=st.sampled_from([0, 1, 3]))
def test_generated_few_long_rows_build(rows, length, which):
    fn = [softmax_of_all, layer_norm_rows, None, log_softmax_rows][which]
    k = bt.jit(target=SM90)(fn).compile(torch.empty(rows, length, device="meta"))
    assert [rule for rule, _ in _kernels(k)] == ["SplitReduction"], str(k.fusion)
    grid = max(int(g) for g in re.findall(r"grid (\d+)", str(k.fusion)))
    assert grid >= min(128, rows * 2), str(k.fusion)


@pytest.mark.gpu
@pytest.mark.parametrize("fn,shape", CASES + [(softmax_of_all, (1, 9001)), (layer_norm_rows, (3, 100003)),
                                              (symbolic_softmax, (3, 50000)), (symbolic_softmax, (3, 7))],
                         ids=lambda v: getattr(v, "__name__", str(v)))
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_gpu_split_row_kernels_match_torch(fn, shape, dtype):
    if fn is symbolic_softmax and dtype != torch.float32:
        pytest.skip("annotated float32")
    x = (torch.randn(shape, device="cuda") * 3).to(dtype)
    x.view(-1)[-1] = float("nan")            # a NaN in the last row: that row only
    if x.dim() > 1 and x.shape[0] > 1:
        x[0, 0] = float("inf")
    got, want = bt.jit(target="gpu")(fn)(x), fn(x)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(got.float(), want.float(), equal_nan=True, **tol)


# -- the element-wise grids after (and between) the folds: a thread a vector ------------------------
def channel_norm(x, y2):
    """p171's form: statistics over all but a middle axis of 3, then `erf` over every element (no
    vector form in TVM: its grid moves vectors through registers)."""
    h = x.float()
    mu = h.mean((0, 2), keepdim=True)
    d = h - mu
    var = (d * d).mean((0, 2), keepdim=True)
    return torch.erf(d * torch.rsqrt(var + 1e-5) + y2)


def _entries(ptx: str) -> dict:
    return dict(re.findall(r"\.entry (\w+)\((.*?)\n}\n", ptx, re.S))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_epilogue_grids_move_16_byte_vectors():
    """p171's (4921, 3, 1000) float16: each epilogue grid (`d = h - mu`, then the erf) stores float4
    and loads its row-wise inputs as vectors (a thread an element stored 4-byte scalars: 44 and
    68 us on an H200, torch.compile 25 and 37)."""
    k = bt.jit(target=SM90)(channel_norm).compile(torch.empty(4921, 3, 1000, dtype=torch.float16, device="meta"),
                                                  torch.empty(1, 3, 1000, device="meta"))
    assert [kk.rule for kk in k.fusion] == ["SplitReduction"] * 2, k.fusion
    entries = _entries(nvcc_ptx(k.source).decode())
    for kernel in k.fusion:
        body = entries[kernel.cuda_kernels[-1]]
        stores = re.findall(r"st\.global[.\w]*", body)
        assert stores and all(".v4" in s for s in stores), (kernel.cuda_kernels[-1], stores)
        assert re.search(r"ld\.global[.\w]*\.v4", body), kernel.cuda_kernels[-1]


def _run_module_on_cpu(k, name, args):
    """Every kernel of `k`'s sm_90 module run on the CPU with its thread loops serial (they never talk
    to each other between launches), through its Relax function."""
    mod = tvm.script.from_source(k.stages["schedule"])
    mod = tvm.IRModule({gv: _serial(f) if isinstance(f, tirx.PrimFunc) else f for gv, f in mod.functions_items()})
    vm = relax.VirtualMachine(tvm.compile(mod, target="llvm"), tvm.cpu())
    return torch.from_numpy(vm[name](*[tvm.runtime.tensor(a.numpy()) for a in args]).numpy())


@settings(max_examples=6, deadline=None)
@example(a=41, r=3, c=100, dtype=torch.float32)  # 4 lanes
@example(a=23, r=3, c=98, dtype=torch.float16)   # 2 lanes, a ragged grid
@given(a=st.integers(1, 60), r=st.integers(1, 5), c=st.integers(1, 300),
       dtype=st.sampled_from([torch.float32, torch.float16]))
def test_epilogue_grids_match_torch(a, r, c, dtype):
    """Widths that 4, 2 or no vector divides, ragged grids, a NaN: torch's results."""
    gen = torch.Generator().manual_seed(a * r * c)
    x = (torch.randn(a, r, c, generator=gen) * 3).to(dtype)
    x.view(-1)[0] = float("nan")
    y2 = torch.randn(1, r, c, generator=gen)
    k = bt.jit(target=SM90)(channel_norm).compile(x.to("meta"), y2.to("meta"))
    torch.testing.assert_close(_run_module_on_cpu(k, "channel_norm", (x, y2)), channel_norm(x, y2), equal_nan=True,
                               rtol=1e-4, atol=1e-4)
