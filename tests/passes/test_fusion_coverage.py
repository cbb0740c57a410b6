"""Fusion covers what Inductor's scheduler fuses, and views cost nothing (issue 28, items 2 and 3):
programs written the way PyTorch users write them, each compiled for the CPU and for sm_90 (CUDA
generated, no GPU needed), its kernels counted and its results compared with torch."""
import shutil

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import babytriton as bt
from babytriton.passes import rowwise

SM90 = {"kind": "cuda", "arch": "sm_90"}
N, M = bt.Tensor(("n", "m"), "float32"), bt.Tensor(("n", "m"), "float32")


def kernels(fn, *args, target="cpu", cache=True):
    return bt.jit(fn, target=target, cache=cache).compile(*args).fusion


def rules(fusion) -> list[str]:
    return [k.rule for k in fusion]


def assert_like_torch(fn, *args, cache=True, **tolerance):
    got, want = bt.jit(fn, cache=cache)(*args), fn(*args)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, equal_nan=True, **tolerance)


# --------------------------------------------------------------------------------------------------
# a producer into any reduction: `mean` takes in what it reads, over any axes
# --------------------------------------------------------------------------------------------------

def mse(x: N, y: M):
    return ((x - y) ** 2).mean()


def mse_loss(x: N, y: M):
    return F.mse_loss(x, y)


def column_mse(x: N, y: M):
    return ((x - y) ** 2).mean(0)


def kl_batchmean(log_p: bt.Tensor((6, "m"), "float32"), q: bt.Tensor((6, "m"), "float32")):
    # (a symbolic batch size is refused: the library rule divides by it as a value)
    return F.kl_div(log_p, q, reduction="batchmean")


@pytest.mark.parametrize("fn", [mse, mse_loss, column_mse, kl_batchmean])
def test_a_reduction_takes_in_its_producers(fn):
    # `.mean()` was a kernel of its own reading a kernel's (x - y) ** 2: TVM's mean is an
    # out-element-wise-fusable op, and FuseOps fuses producers only into a plain reduction
    for target in ("cpu", SM90):
        shape = (6, 4096) if fn is kl_batchmean else (512, 256)
        fusion = kernels(fn, torch.randn(*shape), torch.randn(*shape), target=target)
        assert len(fusion) == 1, str(fusion)
        assert "Fallback" not in fusion[0].rule and "serial" not in fusion[0].launch, str(fusion)


def test_the_fusion_map_lists_every_op_of_a_group_given_a_constant():
    # the kl_div rule's where(q == 0, 1, q): the constant is a parameter of the row group's function
    fusion = kernels(kl_batchmean, torch.randn(6, 50), torch.rand(6, 50))
    assert [op.op for op in fusion[0].ops] == ["equal", "where", "log", "multiply", "multiply", "subtract", "sum",
                                              "divide"], str(fusion)


@settings(max_examples=6, deadline=None)
@given(n=st.integers(0, 9), m=st.integers(1, 40), special=st.sampled_from([None, "nan", "inf"]))
def test_reductions_with_producers_match_torch(n, m, special):
    x, y = torch.randn(n, m), torch.randn(n, m)
    if special and n:
        x[n // 2, m // 2] = float(special)
    for fn in (mse, column_mse):
        assert_like_torch(fn, x, y, rtol=1e-5, atol=1e-5)
    log_p, q = torch.randn(6, m).log_softmax(-1), torch.rand(6, m).softmax(-1)
    if special:
        q[1, m // 2] = 0.0  # 0 * log 0 is 0 in torch's kl_div
    assert_like_torch(kl_batchmean, log_p, q, rtol=1e-5, atol=1e-6)


def hand_kl(log_p, q):
    return (q * (q.log() - log_p)).sum(-1).mean()


def test_hand_written_kl_is_two_kernels_row_sums_then_their_mean():
    log_p, q = torch.randn(64, 100).log_softmax(-1), torch.rand(64, 100).softmax(-1)
    for target in ("cpu", SM90):
        fusion = kernels(hand_kl, log_p, q, target=target)
        assert len(fusion) == 2 and "Fallback" not in str(rules(fusion)), str(fusion)
    assert_like_torch(hand_kl, log_p, q, rtol=1e-5, atol=1e-6)


def scaled_by_total(x):
    y = x * 2
    return y, y * y.sum()


def centred(x):
    return x - x.mean()


@pytest.mark.parametrize("fn, count", [(scaled_by_total, 3), (centred, 2)])
def test_a_tile_read_after_a_whole_tensor_reduction_is_another_kernel(fn, count):
    # every element waits for the whole reduction, whose blocks are folded first: fused, the GPU's
    # split reduction ran the tile in its one folding block (FuseOps fused a mean's consumers so)
    x = torch.randn(256, 512)
    for target in ("cpu", SM90):
        fusion = kernels(fn, x, target=target)
        assert len(fusion) == count and "Fallback" not in str(rules(fusion)), str(fusion)
    assert_like_torch(fn, x, rtol=1e-4, atol=1e-3)


# --------------------------------------------------------------------------------------------------
# views cost nothing
# --------------------------------------------------------------------------------------------------

def group_norm(x, w, b):
    n, c, h, ww = x.shape
    y = x.reshape(n, 4, -1)
    mean = y.mean(-1, keepdim=True)
    var = y.var(-1, keepdim=True, unbiased=False)
    y = (y - mean) / torch.sqrt(var + 1e-5)
    return y.reshape(n, c, h, ww) * w.reshape(1, c, 1, 1) + b.reshape(1, c, 1, 1)


def library_group_norm(x, w, b):
    return F.group_norm(x, 4, w, b)


def instance_norm(x):
    n, c = x.shape[0], x.shape[1]
    y = x.view(n, c, -1)
    mean, var = y.mean(-1, keepdim=True), y.var(-1, keepdim=True, unbiased=False)
    return ((y - mean) / (var + 1e-5).sqrt()).view(x.shape)


def viewed_sum(x):
    return x.sum(-1).reshape(2, -1)


VIEW_KINDS = ("reshape", "expand_dims", "squeeze", "flatten")


def no_view_kernels(fusion) -> bool:
    return not any(k.name.startswith(VIEW_KINDS) for k in fusion)


@pytest.mark.parametrize("fn, count", [(group_norm, 1), (library_group_norm, 1)])
def test_group_norm_is_one_kernel_without_copies(fn, count):
    """Statistics, normalisation and the affine step (the weight read through its broadcast and the
    reshape to the rows, views.py and rowwise._broadcast_producer) in one kernel."""
    x, w, b = torch.randn(2, 8, 6, 5), torch.randn(8), torch.randn(8)
    for target in ("cpu", SM90):
        fusion = kernels(fn, x, w, b, target=target)
        assert len(fusion) == count and no_view_kernels(fusion), str(fusion)
    assert_like_torch(fn, x, w, b, rtol=1e-4, atol=1e-5)


def grouped_then_quantised(x):
    h = torch.tanh(x)
    hg = h.reshape(h.shape[0], 4, -1)
    mu, var = hg.mean(-1, keepdim=True), hg.var(-1, keepdim=True, unbiased=False)
    h = ((hg - mu) / torch.sqrt(var + 1e-5)).reshape(x.shape)
    qs = h.abs().amax(-1, keepdim=True).clamp_min(1e-5) / 127.0
    return h, torch.clamp(torch.round(h / qs), -127, 127).to(torch.int8)


def test_group_statistics_of_a_computed_value_are_not_broadcast_into_a_copy():
    """`hg - mu` of a computed `hg = h.reshape(n, g, -1)` stays in hg's shape: moved past the reshape,
    the per-group mean was broadcast to the whole tensor and written by the statistics kernel (p54:
    10 kernels, 4 of them copies). Here: tanh (no producer joins a reduction through a reshape), the
    statistics, the copy of the returned reshape (a result viewing a value that another kernel reads
    too) and the row kernel of the scale: 9 before."""
    x = torch.randn(6, 64)
    for target in ("cpu", SM90):
        fusion = kernels(grouped_then_quantised, x, target=target)
        assert len(fusion) <= 4 and not any("broadcast_to" in k.name for k in fusion), str(fusion)
    assert_like_torch(grouped_then_quantised, x, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("fn, shape", [(instance_norm, (2, 3, 4, 5)), (viewed_sum, (6, 7))])
def test_a_view_of_a_kernel_result_returned_is_no_kernel(fn, shape):
    x = torch.randn(*shape)
    k = bt.jit(fn).compile(x)
    assert len(k.fusion) == 1 and no_view_kernels(k.fusion), str(k.fusion)
    assert "vm.builtin.reshape" in k.executable.as_text()  # a view of the kernel's result
    outs = [bt.jit(fn)(x) for x in (x, torch.randn(*shape))]  # the first result stays its own
    torch.testing.assert_close(outs[0], fn(x), rtol=1e-5, atol=1e-5)


def returns_a_view_of_its_input(x):
    return x.reshape(-1)


def test_a_view_of_an_input_returned_is_a_copy():
    x = torch.randn(3, 4)
    out = bt.jit(returns_a_view_of_its_input)(x)
    out += 1  # the caller's tensor does not come back aliased
    torch.testing.assert_close(x.reshape(-1) + 1, out)


def transposed_rows(x):
    return x.t().sum(-1)


def transposed_norm(x):
    y = x.t()
    return (y - y.mean(-1, keepdim=True)) / y.std(-1, keepdim=True)


def middle_mean(x):
    return x.permute(1, 0).mean(0)


def sliced_then_centred(x):
    y = x[:, 1:]
    return y - y.mean(-1, keepdim=True)


def offset_slice_sum(x):
    return x[:, 2:].sum(-1)


@pytest.mark.parametrize("fn, count", [(transposed_rows, 1), (transposed_norm, 2), (middle_mean, 1),
                                       (sliced_then_centred, 1), (offset_slice_sum, 2)])
def test_a_reduction_reads_through_views(fn, count):
    # a transpose or a slice read by a reduction was a copy kernel (FuseOps fuses an injective op
    # only into an injective consumer); a slice at an offset feeding a lone reduction stays apart:
    # Dlight's Reduction declines the offset read and the kernel would end on Fallback. A transpose
    # read by a row kernel that also writes its tile row-major (transposed_norm) is one Tiled kernel
    # apart, computed once (rowwise._transposes_apart): fused, one side would be read with a stride
    x = torch.randn(384, 520)  # enough work for the CPU's threads
    for target in ("cpu", SM90):
        fusion = kernels(fn, x, target=target)
        assert len(fusion) == count and "Fallback" not in str(rules(fusion)), str(fusion)
        assert not any(k.launch.startswith("serial") for k in fusion), str(fusion)
    assert_like_torch(fn, x, rtol=1e-4, atol=1e-4)
    assert_like_torch(fn, torch.randn(520, 384).t(), rtol=1e-4, atol=1e-4)  # a non-contiguous input


# --------------------------------------------------------------------------------------------------
# a gather into its consumer; consumers sharing an input
# --------------------------------------------------------------------------------------------------

def gathered_scaled(w, idx):
    return w[idx] * 2


def embedded_norm(w, idx):
    e = w[idx]
    return (e - e.mean(-1, keepdim=True)) / (e.var(-1, keepdim=True) + 1e-5).sqrt()


def exp_and_sin(x):
    return x.exp(), x.sin()


@pytest.mark.parametrize("fn", [gathered_scaled, embedded_norm])
def test_a_gather_is_read_by_its_consumer(fn):
    # a gather was opaque to FuseOps: its index, the gather and its consumer were three kernels
    w, idx = torch.randn(50, 64), torch.randint(-50, 50, (24,))
    for target in ("cpu", SM90):
        fusion = kernels(fn, w, idx, target=target)
        assert len(fusion) == 1 and "Fallback" not in fusion[0].rule, str(fusion)
    assert_like_torch(fn, w, idx, rtol=1e-5, atol=1e-5)


def test_consumers_sharing_an_input_are_one_kernel():
    x = torch.randn(64, 96)
    for target in ("cpu", SM90):
        fusion = kernels(exp_and_sin, x, target=target)
        assert len(fusion) == 1 and "Fallback" not in fusion[0].rule, str(fusion)
    x[0, 0], x[1, 1] = float("nan"), float("inf")
    assert_like_torch(exp_and_sin, x)


# --------------------------------------------------------------------------------------------------
# reductions over the same rows
# --------------------------------------------------------------------------------------------------

def max_and_argmax(x):
    return x.max(-1).values, x.argmax(-1)


def sum_and_squares(x):
    return x.sum(-1), (x * x).sum(-1)


@pytest.mark.parametrize("fn", [max_and_argmax, sum_and_squares])
def test_reductions_over_the_same_rows_are_one_kernel_of_several_results(fn, monkeypatch):
    # CPUReduction and InnerReduction write any number of results (rowwise.several_outputs): one
    # kernel reads the rows once; with SEVERAL_OUTPUTS off each reduction is a kernel of its own
    x = torch.randn(12, 40)
    x[3, 5] = float("nan")
    fusion = kernels(fn, x)
    assert [k.rule for k in fusion] == ["CPUReduction"], str(fusion)
    assert_like_torch(fn, x)
    monkeypatch.setattr(rowwise, "SEVERAL_OUTPUTS", False)
    assert len(kernels(fn, x, cache=False)) == 2
    assert_like_torch(fn, x, cache=False)


# --------------------------------------------------------------------------------------------------
# whole programs: norms and losses, with half dtypes and symbolic sizes
# --------------------------------------------------------------------------------------------------

def label_smoothed(logits, target):
    return F.cross_entropy(logits, target, label_smoothing=0.1)


def test_label_smoothed_cross_entropy_counts_its_mask_once():
    # 11 kernels, then 7: the library rule summed the ignore mask twice (a reduction repeated on equal
    # values is computed once), its gather's index was kernels of its own; now 4: the log-softmax and
    # the per-row loss are one row kernel (decompose.py, one sum over the classes). One kernel of
    # several whole-tensor sums would make it two (several_reductions)
    logits, target = torch.randn(16, 10), torch.randint(0, 10, (16,))
    target[3] = -100
    for where in ("cpu", SM90):
        assert len(kernels(label_smoothed, logits, target, target=where)) == 4
    assert_like_torch(label_smoothed, logits, target, rtol=1e-5, atol=1e-6)


def half_mse(x, y):
    return ((x - y) ** 2).mean()


def mean_twice(x):
    return (x - x.mean()) / x.mean().abs()


def test_a_reduction_written_twice_is_computed_once():
    x = torch.randn(64, 48)
    for target in ("cpu", SM90):
        fusion = kernels(mean_twice, x, target=target)
        assert len(fusion) == 2 and sum("mean" in k.name for k in fusion) == 1, str(fusion)
    # inputs whose mean is far from 0: the mean of randn(64, 48) is about 0.02, and dividing by it
    # magnifies the few-ulp difference of two summation orders to 2e-5 of the result (CI, 2026-11-29)
    assert_like_torch(mean_twice, x.abs() + 0.5, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_rows_match_torch(dtype):
    x, y = torch.randn(4, 3000).to(dtype), torch.randn(4, 3000).to(dtype)
    assert_like_torch(half_mse, x, y, rtol=2e-2, atol=2e-2)
    assert_like_torch(transposed_rows, torch.randn(3000, 4).to(dtype), rtol=2e-2, atol=2e-1)
    assert_like_torch(instance_norm, torch.randn(2, 3, 40, 50).to(dtype), rtol=2e-2, atol=2e-2)


def test_the_fused_cuda_compiles_with_nvcc():
    if not shutil.which("nvcc"):
        pytest.skip("nvcc not installed")
    from tvm.support import nvcc
    import tvm
    x = torch.randn(96, 130)
    for fn, args in [(transposed_norm, (x,)), (mse, (x, x)), (gathered_scaled, (x, torch.randint(0, 96, (8,))))]:
        source = bt.jit(fn, target=SM90).compile(*args).source
        with tvm.target.Target(SM90):
            assert b".entry" in nvcc.compile_cuda(source, target_format="ptx", compiler="nvcc")


GPU_PROGRAMS = [(group_norm, lambda: (torch.randn(4, 64, 16, 16), torch.randn(64), torch.randn(64))),
                (instance_norm, lambda: (torch.randn(4, 8, 30, 30),)),
                (mse, lambda: (torch.randn(1000, 300), torch.randn(1000, 300))),
                (kl_batchmean, lambda: (torch.randn(6, 999).log_softmax(-1), torch.rand(6, 999).softmax(-1))),
                (transposed_norm, lambda: (torch.randn(300, 1000),)),
                (middle_mean, lambda: (torch.randn(300, 1000),)),
                (sliced_then_centred, lambda: (torch.randn(500, 301),)),
                (embedded_norm, lambda: (torch.randn(500, 256), torch.randint(-500, 500, (300,)))),
                (exp_and_sin, lambda: (torch.randn(500, 300),)),
                (label_smoothed, lambda: (torch.randn(300, 1000), torch.randint(0, 1000, (300,))))]


@pytest.mark.gpu
@pytest.mark.parametrize("fn, make", GPU_PROGRAMS)
def test_fused_programs_agree_with_torch_on_the_gpu(fn, make):
    args = [a.cuda() for a in make()]
    got, want = bt.jit(fn, target="gpu")(*args), fn(*args)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
