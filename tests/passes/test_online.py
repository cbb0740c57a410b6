"""OnlineSoftmax: a row's max and exp-sum are one two-value reduction on the GPU (one read of the row
for both), agreeing with torch's two passes on NaN, ±inf and -inf rows, in float32 and the halves."""
import inspect
import shutil

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tvm.relax.op import gather_elements

import babytriton as bt
from babytriton.runtime import fusion
from babytriton.passes import online, rowwise

SM90 = {"kind": "cuda", "arch": "sm_90"}


def softmax(x):
    e = bt.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def log_softmax(x):
    s = x - x.max(-1, keepdims=True)
    return s - bt.log(bt.exp(s).sum(-1, keepdims=True))


def logsumexp(x):
    m = x.max(axis=-1)  # the Relax spelling: the values (x.max(-1) is torch's (values, indices))
    return m + bt.log(bt.exp(x - bt.expand_dims(m, -1)).sum(-1))


def cross_entropy(logits, target):
    m = logits.max(axis=-1, keepdims=True)
    lse = m + bt.log(bt.exp(logits - m).sum(axis=-1, keepdims=True))
    picked = gather_elements(logits, bt.expand_dims(target, 1), axis=1)
    return (lse - picked).mean()


def _two_pass_lse(x):  # torch's result as the user wrote it (torch.logsumexp makes -inf rows -inf)
    m = x.amax(-1, keepdim=True)
    return m + torch.log(torch.exp(x - m).sum(-1, keepdim=True))


REFERENCES = {
    softmax: lambda x: torch.softmax(x, -1),
    log_softmax: lambda x: torch.log_softmax(x, -1),
    logsumexp: lambda x: _two_pass_lse(x)[..., 0],
}


def special_rows(cols: int, dtype) -> torch.Tensor:
    """Ordinary rows, then rows with a NaN, a +inf, all -inf, and -inf before and after finite values."""
    gen = torch.Generator().manual_seed(cols)
    x = torch.randn(7, cols, generator=gen) * 4
    x[1, cols // 3] = float("nan")
    x[2, cols // 2] = float("inf")
    x[3] = float("-inf")
    x[4, : cols // 2] = float("-inf")  # a causal mask: the row starts masked
    x[5, cols // 2:] = float("-inf")
    return x.to(dtype)


TOLERANCE = {torch.float32: 1e-4, torch.float16: 2e-2, torch.bfloat16: 0.1}


@pytest.fixture(autouse=True)
def any_row_length(monkeypatch, request):
    """The rewrite on rows of every length here (it waits for MIN_ROW elements), but where a test
    checks that threshold itself."""
    if "min_row" not in request.keywords:
        monkeypatch.setattr(online, "MIN_ROW", 1)
        monkeypatch.setenv("BABYTRITON_CACHE", "0")  # the cache key does not know the threshold moved


@pytest.mark.min_row
@pytest.mark.parametrize("cols, online_form", [(4096, False), (online.MIN_ROW, True), (32000, True)])
def test_only_long_rows_take_the_online_form(cols, online_form):
    x = torch.empty(64, cols, device="meta")
    k = bt.jit(target={"kind": "cuda", "arch": "sm_90"})(logsumexp).compile(x)
    assert (online.NAME in k.stages["OnlineSoftmax"]) == online_form


@pytest.fixture
def on_cpu_too(monkeypatch):
    """The rewrite on the CPU as well (it is GPU-only): its numbers are checked here, without a GPU."""
    monkeypatch.setattr(online, "applies", lambda target: True)
    monkeypatch.setenv("BABYTRITON_CACHE", "0")  # the cache key does not know the stage is forced


def _check(got, expected, dtype):
    assert got.dtype == expected.dtype
    torch.testing.assert_close(got.float(), expected.float(), rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype],
                               equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("fn", [softmax, log_softmax, logsumexp], ids=lambda f: f.__name__)
@pytest.mark.parametrize("cols", [4097, 32000])
def test_rows_agree_with_torch(on_cpu_too, fn, dtype, cols):
    x = special_rows(cols, dtype)
    k = bt.jit(target="cpu")(fn).compile(x)
    assert online.NAME in k.stages["OnlineSoftmax"] and len(k.fusion) == 1
    # torch in float32, rounded once: what torch's half softmax kernels compute
    _check(k(x), REFERENCES[fn](x.float()).to(dtype), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_cross_entropy_agrees_with_torch(on_cpu_too, dtype):
    gen = torch.Generator().manual_seed(1)
    logits = (torch.randn(16, 32000, generator=gen) * 3).to(dtype)
    target = torch.randint(0, 32000, (16,), generator=gen)
    k = bt.jit(target="cpu")(cross_entropy).compile(logits, target)
    expected = torch.nn.functional.cross_entropy(logits.float(), target)
    torch.testing.assert_close(k(logits, target).float(), expected, rtol=TOLERANCE[dtype], atol=TOLERANCE[dtype])
    masked = special_rows(32000, dtype)[:, :32000]
    target = torch.zeros(7, dtype=torch.int64)
    _check(bt.jit(target="cpu")(cross_entropy)(masked, target),
           (_two_pass_lse(masked.float())[:, 0] - masked.float()[:, 0]).mean().to(dtype), dtype)


def torch_logsumexp(x):  # torch's spelling: its max is taken as 0 where it is ±inf
    return torch.logsumexp(x, dim=-1)


def torch_logsumexp_kept(x):
    return torch.logsumexp(x.float(), dim=1, keepdim=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("fn", [torch_logsumexp, torch_logsumexp_kept], ids=lambda f: f.__name__)
@given(cols=st.integers(1, 700), seed=st.integers(0, 2**16))
@settings(max_examples=3, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_torch_logsumexp_takes_the_online_form_and_agrees(on_cpu_too, fn, dtype, cols, seed):
    """The guarded max (0 where ±inf) pairs with the sum too: a row of -inf gives -inf, a +inf gives inf,
    a NaN NaN, as torch.logsumexp."""
    x = special_rows(max(cols, 6), dtype)[:, :cols]
    x[6, seed % cols] = float("inf")
    x[6, (seed // 7) % cols] = float("-inf")  # (+inf with -inf: inf, where the unguarded sum is NaN)
    k = bt.jit(target="cpu")(fn).compile(x)
    assert online.NAME in k.stages["OnlineSoftmax"]
    _check(k(x), fn(x), dtype)


def test_a_guard_that_is_not_zero_is_left_alone():
    def shifted(x):
        m = x.amax(-1, keepdim=True)
        m = torch.where(torch.isinf(m), 1.0, m)
        return torch.log(torch.exp(x - m).sum(-1)) + m[..., 0]
    k = bt.jit(target=SM90)(shifted).compile(torch.randn(8, 64))
    assert online.NAME not in k.stages["OnlineSoftmax"]


def test_identity_and_masked_starts_make_no_nan(on_cpu_too):
    """(-inf, 0) with (-inf, 0), and sums of -inf elements before a finite one, stay numbers."""
    x = torch.full((3, 300), float("-inf"))
    x[0, -1], x[1, 150], x[2, 0] = 1.0, 2.0, 3.0
    got = bt.jit(target="cpu")(logsumexp)(x)
    torch.testing.assert_close(got, torch.tensor([1.0, 2.0, 3.0]))


def test_only_on_gpu_targets():
    x = torch.randn(8, 64)
    assert "OnlineSoftmax" not in bt.jit(target="cpu")(softmax).compile(x).stages
    assert "OnlineSoftmax" in bt.jit(target=SM90)(softmax).compile(x).stages


def test_what_is_not_a_softmax_is_left_alone():
    def other_rows(x, y):  # the sum's exp is of another tensor minus the max
        m = x.max(-1, keepdims=True)
        return bt.exp(y - m).sum(-1, keepdims=True) + m

    def other_axes(x):
        return bt.exp(x - x.max(0, keepdims=True)).sum(-1, keepdims=True)
    def max_also_returned(x):  # FuseRowwise keeps m out of the row kernel: the pair would be alone
        m = x.max(-1, keepdims=True)
        e = bt.exp(x - m)
        return e / e.sum(-1, keepdims=True), m
    x = torch.randn(8, 64)
    assert online.NAME not in bt.jit(target=SM90)(other_rows).compile(x, x).stages["OnlineSoftmax"]
    assert online.NAME not in bt.jit(target=SM90)(max_also_returned).compile(x).stages["OnlineSoftmax"]
    assert online.NAME not in bt.jit(target=SM90)(other_axes).compile(x).stages["OnlineSoftmax"]


# -- on the GPU target: one kernel, one read of the row for both statistics ------------------------

def _body(source: str, kernel: str) -> str:
    """The definition of one CUDA kernel (after its declaration)."""
    start = source.index(" {\n", source.rindex(f" {kernel}("))
    return source[start:source.index("\n}\n", start)]


def _allreduces(source: str) -> int:
    """Cross-thread reductions in the CUDA: each ends in a second warp stage (two __activemask)."""
    return source.count("__activemask()") // 2


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("fn", [softmax, log_softmax, logsumexp, cross_entropy], ids=lambda f: f.__name__)
def test_one_kernel_with_one_reduction_for_both(fn, dtype):
    x = torch.randn(64, 4096).to(dtype)
    args = (x, torch.randint(0, 4096, (64,))) if fn is cross_entropy else (x,)
    k = bt.jit(target=SM90)(fn).compile(*args)
    # (cross-entropy's mean over the rows is a row group of its own: a whole-tensor reduction)
    rows = [kernel for kernel in k.fusion if kernel.name.startswith(rowwise.PREFIX) and online.NAME in kernel.name]
    assert len(rows) == 1 and rows[0].rule == "RowKernel"  # 4096 wide: whole vectors tile the row
    assert rows[0].launch.startswith("grid 64 x block")  # one block per row
    (name,) = rows[0].cuda_kernels
    source = _body(k.source, name)
    assert _allreduces(source) == 1  # two passes made two
    # both halves of the pair in shared memory, read by the consumers after the reduction
    for half in ("v0", "v1"):
        assert f"__shared__ alignas(64) float T_online_temp_{half}_shared_ptr[1];" in source


def test_the_row_is_read_once_for_the_statistics():
    """logsumexp's kernel reads x in the reduction loop only: nothing re-reads it after the allreduce."""
    k = bt.jit(target=SM90)(logsumexp).compile(torch.randn(64, 4096))
    (name,) = fusion.cuda_kernel_names(k.source)
    before, after = _body(k.source, name).split("__activemask()", 1)
    assert "x_ptr" in before and "x_ptr" not in after  # read as vectors: *(float4*)(x_ptr + ...)


def test_two_passes_without_the_stage(monkeypatch):
    monkeypatch.setattr(online, "applies", lambda target: False)
    monkeypatch.setenv("BABYTRITON_CACHE", "0")
    k = bt.jit(target=SM90)(logsumexp).compile(torch.randn(64, 4096))
    assert _allreduces(k.source) == 2


def test_the_fusion_map_shows_the_users_max_and_sum():
    lines, first = inspect.getsourcelines(cross_entropy)
    where = {line.strip(): first + i for i, line in enumerate(lines)}
    k = bt.jit(target=SM90)(cross_entropy).compile(torch.randn(64, 512), torch.randint(0, 512, (64,)))
    (kernel,) = [kernel for kernel in k.fusion if kernel.name.startswith(rowwise.PREFIX)]
    ops = {op.op: op.line for op in kernel.ops}
    assert ops["max"] == where["m = logits.max(axis=-1, keepdims=True)"]
    assert ops["sum"] == where["lse = m + bt.log(bt.exp(logits - m).sum(axis=-1, keepdims=True))"]
    assert "gather_elements" in ops and kernel.cuda_kernels == (kernel.name + "_kernel",)
    assert fusion.cuda_kernel_names(k.source).count(kernel.name + "_kernel") == 1


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_cuda_compiles_with_nvcc(dtype):
    from tvm.support import nvcc
    import tvm
    x = torch.randn(64, 4097).to(dtype)
    for fn, args in ((cross_entropy, (x, torch.randint(0, 4097, (64,)))), (softmax, (x,))):
        k = bt.jit(target=SM90)(fn).compile(*args)
        with tvm.target.Target(SM90):
            ptx = nvcc.compile_cuda(k.source, target_format="ptx", compiler="nvcc")
        assert ptx.count(b".entry ") == len(k.fusion)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("fn", [softmax, log_softmax, logsumexp], ids=lambda f: f.__name__)
def test_gpu_agrees_with_torch(fn, dtype):
    for cols in (4097, 32000):
        x = special_rows(cols, dtype).cuda()
        _check(bt.jit(target="gpu")(fn)(x), REFERENCES[fn](x.float()).to(dtype), dtype)


@pytest.mark.gpu
def test_gpu_cross_entropy_agrees_with_torch():
    logits = torch.randn(8192, 32000, device="cuda") * 3
    target = torch.randint(0, 32000, (8192,), device="cuda")
    torch.testing.assert_close(bt.jit(target="gpu")(cross_entropy)(logits, target),
                               torch.nn.functional.cross_entropy(logits, target), rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_gpu_torch_logsumexp_agrees_with_torch(dtype):
    for cols in (4097, 32000):
        x = special_rows(cols, dtype).cuda()
        x[6, 5], x[6, 9] = float("inf"), float("-inf")
        _check(bt.jit(target="gpu")(torch_logsumexp)(x), torch_logsumexp(x), dtype)
