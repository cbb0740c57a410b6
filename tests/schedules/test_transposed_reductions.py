"""Row computations whose tiles are read through a transpose (issue 28, perf-fuzz p22/p124/p140/p179/p185):
a row kernel that reads one tile across its source's contiguous axis and another tile (or its output)
row-major strides through one of them whatever its schedule, so the transpose is a Tiled kernel of its
own, computed once, and the row kernel reads row-major (rowwise._transposes_apart); a tile read only
through one transpose stays fused (the reduction rules see one layout), and so do rows short enough to
be a thread's each (rowwise._thread_rows: both layouts coalesced in place). CUDA built for sm_90 and
compiled by nvcc (no GPU needed); results compared with torch on the CPU, and on the GPU (marked gpu)."""
import shutil

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import babytriton as bt
from nvcc_batch import assert_nvcc_compiles

SM90 = {"kind": "cuda", "arch": "sm_90"}


def norm_of_transposed(x, y, w):  # p179: layernorm over rows of x.T * y
    h = x.float().transpose(0, 1) * y
    d = h - h.mean(1, keepdim=True)
    return (d * torch.rsqrt((d * d).mean(1, keepdim=True) + 1e-5) * w).to(x.dtype)


def masked_softmax_of_transposed(x, y, mask):  # p140: softmax over rows of max(x.T, y), masked
    h = torch.maximum(x.float().transpose(0, 1), y.float()).masked_fill(mask, float("-inf"))
    return torch.softmax(h, dim=1)


def normalize_permuted(x, y):  # p185: rows of 4 read through permute(0, 2, 1)
    return F.normalize(x.float().permute(0, 2, 1) * y, dim=-1).to(x.dtype)


def scaled_by_column_max(x, y):  # p22: a reduction over the outer axis of max(x.T, y)
    h = torch.maximum(x.transpose(0, 1), y)
    return h / (h.abs().amax(0, keepdim=True) + 1e-6)


def transposed_sum(x):  # one layout: stays one kernel
    return x.t().float().sum(-1)


def fusion_for(fn, *args):
    return bt.jit(fn, target=SM90).compile(*[torch.empty(a.shape, dtype=a.dtype, device="meta") for a in args]).fusion


CASES = [(norm_of_transposed, lambda dt: (torch.randn(300, 96).to(dt), torch.randn(96, 300), torch.randn(96, 1))),
         (masked_softmax_of_transposed, lambda dt: (torch.randn(64, 200).to(dt), torch.randn(200, 64).to(dt),
                                                    torch.rand(200, 64) < 0.2)),
         (normalize_permuted, lambda dt: (torch.randn(6, 4, 256).to(dt), torch.randn(6, 256, 4))),
         (scaled_by_column_max, lambda dt: (torch.randn(500, 64).to(dt), torch.randn(64, 500).to(dt)))]


@pytest.mark.parametrize("fn, make", [c for c in CASES if c[0] is not normalize_permuted],
                         ids=[c[0].__name__ for c in CASES if c[0] is not normalize_permuted])
def test_the_transpose_is_a_kernel_of_its_own_and_the_row_kernel_reads_row_major(fn, make):
    fusion = fusion_for(fn, *make(torch.bfloat16))
    rows = [k for k in fusion if k.name.startswith("fused_rows_")]
    assert len(rows) == 1 and "transpose" not in rows[0].name, str(fusion)
    assert not any("Fallback" in k.rule or "GeneralReduction" in k.rule for k in fusion), str(fusion)
    # computed once (by the kernels' names: an upcast moved past the transpose, views.py, leaves the
    # op list's labels of the swapped pair crossed)
    assert sum("transpose" in k.name for k in fusion) == 1, str(fusion)
    assert any(k.rule == "Tiled" for k in fusion), str(fusion)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rows_a_thread_reads_whole_read_through_the_permute_in_one_kernel(dtype):
    """Rows of 4 (p185): a thread reads a row, threads follow the permuted input's contiguous axis,
    so the permuted read and the row-major one are both coalesced in place: no transpose kernel, and
    the upcast (x.float()) in it too."""
    fusion = fusion_for(normalize_permuted, torch.randn(6, 4, 256).to(dtype), torch.randn(6, 256, 4))
    assert len(fusion) == 1 and "Fallback" not in fusion[0].rule, str(fusion)
    assert {op.op for op in fusion[0].ops} >= {"permute_dims", "sum"}, str(fusion)


def test_a_widening_cast_is_moved_past_a_transpose_kept_apart():
    """p179: the transpose kernel moves the bfloat16 elements, the row kernel casts them (half the
    bytes written and read back than a transposed float32 copy)."""
    fusion = fusion_for(norm_of_transposed, *CASES[0][1](torch.bfloat16))
    names = [k.name for k in fusion]  # a kernel's name lists the ops it runs
    assert names[0] == "transpose" and names[1].startswith("fused_rows_cast_"), str(fusion)
    source = bt.jit(norm_of_transposed, target=SM90).compile(
        *[torch.empty(a.shape, dtype=a.dtype, device="meta") for a in CASES[0][1](torch.bfloat16)]).source
    assert "transpose_kernel(nv_bfloat16* __restrict__" in source  # writes the bfloat16 elements


def test_a_tile_read_only_through_a_transpose_stays_one_kernel():
    fusion = fusion_for(transposed_sum, torch.randn(384, 520))
    assert len(fusion) == 1 and "Fallback" not in fusion[0].rule, str(fusion)


def test_a_transpose_used_three_times_is_computed_once():
    def centred_scaled(x):
        y = x.t()
        return (y - y.mean(-1, keepdim=True)) / y.std(-1, keepdim=True)
    fusion = fusion_for(centred_scaled, torch.randn(384, 520))
    assert len(fusion) == 2 and [k.rule for k in fusion][0] == "Tiled", str(fusion)


def test_the_cuda_compiles_with_nvcc():
    if not shutil.which("nvcc"):
        pytest.skip("nvcc not installed")
    sources = [bt.jit(fn, target=SM90).compile(*[torch.empty(a.shape, dtype=a.dtype, device="meta")
                                                 for a in make(torch.float16)]).source for fn, make in CASES[:3]]
    assert_nvcc_compiles(sources, [fn.__name__ for fn, _ in CASES[:3]])   # one nvcc run


def sigmoid_gated(x, y):  # p124: y.permute(1, 2, 0) of [n, m, 2]: the source's 2-wide last axis and the one before
    return x * torch.sigmoid(y.permute(1, 2, 0))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.bfloat16])
def test_a_transpose_whose_last_axis_is_short_is_tiled_with_the_axis_before(dtype):
    fusion = fusion_for(sigmoid_gated, torch.empty(2048, 2, 1000), torch.empty(1000, 2048, 2, dtype=dtype))
    assert [k.rule for k in fusion] == ["Tiled"], str(fusion)
    odd = fusion_for(sigmoid_gated, torch.empty(30, 3, 1000), torch.empty(1000, 30, 3, dtype=dtype))
    assert "Fallback" not in odd[0].rule, str(odd)  # 3 does not divide a tile: read in place


def test_the_short_side_tiles_compile_with_nvcc():
    if not shutil.which("nvcc"):
        pytest.skip("nvcc not installed")
    dtypes = (torch.float16, torch.float32)
    sources = [bt.jit(sigmoid_gated, target=SM90).compile(
        torch.empty(2048, 2, 1000, device="meta"), torch.empty(1000, 2048, 2, dtype=dtype, device="meta")).source
        for dtype in dtypes]
    assert_nvcc_compiles(sources, dtypes)   # one nvcc run


def assert_like_torch(fn, args, device="cpu", **tolerance):
    args = [a.to(device) for a in args]
    got, want = bt.jit(fn, target="gpu" if device == "cuda" else "cpu")(*args), fn(*args)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, equal_nan=True, **tolerance)


def with_specials(x: torch.Tensor) -> torch.Tensor:
    """x with a NaN, an inf and a -inf in its first row (as torch orders them)."""
    x = x.clone()
    x.view(-1)[:3] = torch.tensor([float("nan"), float("inf"), float("-inf")], dtype=x.dtype)
    return x


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cpu_results_match_torch(dtype):
    tolerance = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    for fn, make in CASES:
        args = make(dtype)
        assert_like_torch(fn, args, **tolerance)
        assert_like_torch(fn, [with_specials(args[0]), *args[1:]], **tolerance)


def test_cpu_non_contiguous_inputs_match_torch():
    x, y, w = torch.randn(96, 300).t(), torch.randn(300, 96).t(), torch.randn(96, 1)
    assert_like_torch(norm_of_transposed, (x, y, w), rtol=1e-4, atol=1e-4)


@settings(max_examples=5, deadline=None)
@given(st.integers(1, 70), st.integers(1, 40))
def test_cpu_ragged_sizes_match_torch(n, m):
    x, y = torch.randn(n, m), torch.randn(m, n)
    assert_like_torch(masked_softmax_of_transposed, (x, y, torch.rand(m, n) < 0.3), rtol=1e-4, atol=1e-5)


@settings(max_examples=4, deadline=None)
@given(st.permutations([0, 1, 2]), st.sampled_from([0, 1, 2]), st.lists(st.integers(1, 24), min_size=3, max_size=3))
def test_cpu_any_permutation_and_reduced_axis_match_torch(perm, axis, sizes):
    """A tile read through any 3-d permutation, plus a row-major one, softmaxed over any axis."""
    def f(x, y):
        h = x.permute(*perm) + y
        return torch.softmax(h, dim=axis) * h
    y = torch.randn(sizes)
    x = torch.randn([sizes[perm.index(i)] for i in range(3)])  # x.permute(perm) has y's shape
    assert_like_torch(f, (x, y), rtol=1e-4, atol=1e-5)


def symbolic_norm(x: bt.Tensor(("n", "m"), "float32"), y: bt.Tensor(("m", "n"), "float32")):
    h = x.transpose(0, 1) * y
    return h / h.abs().amax(1, keepdim=True)


def test_symbolic_sizes_match_torch():
    f = bt.jit(symbolic_norm)
    for n, m in [(50, 7), (33, 64)]:
        x, y = torch.randn(n, m), torch.randn(m, n)
        torch.testing.assert_close(f(x, y), symbolic_norm(x, y), rtol=1e-5, atol=1e-6)
    fusion = bt.jit(symbolic_norm, target=SM90).compile().fusion
    assert not any("Fallback" in k.rule for k in fusion), str(fusion)


GPU_SHAPES = [(norm_of_transposed, lambda dt: (torch.randn(4099, 257).to(dt), torch.randn(257, 4099),
                                               torch.randn(257, 1))),
              (masked_softmax_of_transposed, lambda dt: (torch.randn(96, 14353).to(dt), torch.randn(14353, 96).to(dt),
                                                         torch.rand(14353, 96) < 0.2)),
              (normalize_permuted, lambda dt: (torch.randn(821, 4, 1024).to(dt), torch.randn(821, 1024, 4))),
              (scaled_by_column_max, lambda dt: (torch.randn(78487, 64).to(dt), torch.randn(64, 78487).to(dt)))]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("fn, make", GPU_SHAPES, ids=[c[0].__name__ for c in GPU_SHAPES])
def test_gpu_results_match_torch(fn, make, dtype):
    tolerance = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    args = make(dtype)
    assert_like_torch(fn, args, device="cuda", **tolerance)
    assert_like_torch(fn, [with_specials(args[0]), *args[1:]], device="cuda", **tolerance)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(2048, 2, 1000), (1001, 4, 333), (37, 2, 50), (64, 3, 999)])
def test_gpu_short_last_axis_transposes_match_torch(dtype, shape):
    x = torch.randn(shape, device="cuda").to(dtype)
    y = with_specials(torch.randn(shape[2], shape[0], shape[1], device="cuda").to(dtype))
    torch.testing.assert_close(bt.jit(sigmoid_gated, target="gpu")(x, y), sigmoid_gated(x, y), equal_nan=True,
                               rtol=2e-2 if dtype != torch.float32 else 1e-5, atol=2e-2 if dtype != torch.float32 else 1e-6)


@pytest.mark.gpu
def test_gpu_symbolic_and_ragged_sizes_match_torch():
    f = bt.jit(symbolic_norm, target="gpu")
    for n, m in [(1000, 37), (5, 3), (4097, 129)]:
        x, y = torch.randn(n, m, device="cuda"), torch.randn(m, n, device="cuda")
        torch.testing.assert_close(f(x, y), symbolic_norm(x, y), rtol=1e-5, atol=1e-6)


def rms_of_column_max(x, y, w, bias):  # p155 (p121 alike): a tile's transpose next to a parameter tile
    h = x.to(torch.float32).T + y
    h = h.max(dim=0)[0]
    h = h * torch.rsqrt(h.pow(2).mean(0, keepdim=True) + 1e-5)
    return (h * w + bias).to(x.dtype)


def test_a_transpose_beside_a_parameter_tile_builds_and_matches_torch():
    """The parameter `y` is a row-major tile: the transpose goes apart (its lookup among the bindings
    stopped the compile, found by the performance fuzzer)."""
    g = torch.Generator().manual_seed(155)
    args = (torch.randn(37, 10, generator=g).half(), torch.randn(10, 37, generator=g), torch.randn(37, generator=g),
            torch.randn(37, generator=g))
    assert_like_torch(rms_of_column_max, args, atol=2e-3, rtol=2e-3)
    meta = [torch.empty(a.shape, dtype=a.dtype, device="meta") for a in args]
    assert "Tiled" in [k.rule for k in bt.jit(target=SM90)(rms_of_column_max).compile(*meta).fusion]


def l2_of_permuted(x, y):  # rows of y's last axis, x read through a permute whose contiguous axis is kept
    h = x.float().permute(0, 2, 1) * y
    return (h / h.norm(dim=-1, keepdim=True).clamp_min(1e-6)).to(x.dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("short", [2, 4, 8])
def test_thread_rows_read_through_a_permute_are_one_kernel_on_sm90(dtype, short):
    args = (torch.empty(33, short, 1000, dtype=dtype), torch.empty(33, 1000, short))
    k = bt.jit(l2_of_permuted, target=SM90).compile(*[a.to("meta") for a in args])
    assert len(k.fusion) == 1 and "Fallback" not in k.fusion[0].rule, str(k.fusion)
    if shutil.which("nvcc"):
        from tvm.support import nvcc
        import tvm
        with tvm.target.Target(SM90):
            assert b".entry" in nvcc.compile_cuda(k.source, target_format="ptx", compiler="nvcc")


def test_wider_rows_keep_the_transpose_apart():
    """Rows of 16 are a thread's no more (InnerReduction's vectors): the transpose is a Tiled kernel."""
    k = bt.jit(l2_of_permuted, target=SM90).compile(torch.empty(33, 16, 1000, dtype=torch.float16, device="meta"),
                                                     torch.empty(33, 1000, 16, device="meta"))
    assert [kernel.rule for kernel in k.fusion][0] == "Tiled", str(k.fusion)


@settings(max_examples=6, deadline=None)
@given(st.sampled_from([1, 2, 3, 4, 8]), st.integers(1, 40), st.integers(1, 9),
       st.sampled_from([torch.float16, torch.bfloat16, torch.float32]))
def test_cpu_thread_rows_through_a_permute_match_torch(short, n, m, dtype):
    x, y = torch.randn(m, short, n).to(dtype), torch.randn(m, n, short)
    x = with_specials(x) if x.numel() >= 3 else x
    tolerance = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    assert_like_torch(l2_of_permuted, (x, y), **tolerance)
    assert_like_torch(l2_of_permuted, (x.transpose(1, 2).contiguous().transpose(1, 2), y), **tolerance)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
@pytest.mark.parametrize("shape", [(821, 4, 1024), (37, 2, 999), (5, 8, 77)])
def test_gpu_thread_rows_through_a_permute_match_torch(dtype, shape):
    x = with_specials(torch.randn(shape, device="cuda").to(dtype))
    y = torch.randn(shape[0], shape[2], shape[1], device="cuda")
    tolerance = dict(rtol=1e-5, atol=1e-6) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    torch.testing.assert_close(bt.jit(l2_of_permuted, target="gpu")(x, y), l2_of_permuted(x, y), equal_nan=True,
                               **tolerance)
