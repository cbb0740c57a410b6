"""FuseRowwise: a row-wise computation written from primitives (layernorm, RMSNorm, softmax, ...) is one
kernel on CPU and GPU, scheduled one block per row on a GPU, agrees with torch, and k.fusion names its ops."""
import inspect
import re
import shutil

import pytest
import torch
import torch.nn.functional as F
import tvm
from hypothesis import given, settings
from hypothesis import strategies as st

import babytriton as bt
from babytriton.runtime import fusion
from babytriton.passes import rowwise

SM90 = {"kind": "cuda", "arch": "sm_90"}
N, C = 64, 512


# -- the workloads, as people write them (unannotated: compiled for the tensors given) -------------

def layernorm(x, w, b):
    m = x.mean(-1, keepdims=True)
    d = x - m
    v = (d * d).mean(-1, keepdims=True)
    return d * bt.rsqrt(v + 1e-5) * w + b


def rmsnorm(x, w):
    return x * bt.rsqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w


def softmax(x):
    e = bt.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def log_softmax(x):
    s = x - x.max(-1, keepdims=True)
    return s - bt.log(bt.exp(s).sum(-1, keepdims=True))


def cross_entropy_rows(x, picked):
    m = x.max(-1, keepdims=True)
    lse = m + bt.log(bt.exp(x - m).sum(-1, keepdims=True))
    return lse - picked


def variance(x):
    d = x - x.mean(-1, keepdims=True)
    return (d * d).mean(-1)


def std(x):
    d = x - x.mean(-1, keepdims=True)
    return bt.sqrt((d * d).sum(-1, keepdims=True) / (x.shape[-1] - 1))


def logsumexp(x):
    m = x.max(axis=-1)  # the Relax spelling: the values (x.max(-1) is torch's (values, indices))
    return m + bt.log(bt.exp(x - bt.expand_dims(m, -1)).sum(-1))


def layernorm_keepdims_false(x, w, b):
    m = x.mean(-1)
    d = x - m.reshape((x.shape[0], 1))
    v = (d * d).mean(-1)
    return d * bt.expand_dims(bt.rsqrt(v + 1e-5), -1) * w + b


def rmsnorm_fp32_accumulation(x, w):
    xf = x.astype("float32")
    r = bt.rsqrt((xf * xf).mean(-1, keepdims=True) + 1e-6)
    return (xf * r).astype(x.dtype) * w


def _torch_ce_rows(x, picked):
    return torch.logsumexp(x.float(), -1, keepdim=True) - picked.float()


# name: (function, argument shapes (None: a per-row column), torch reference)
WORKLOADS = {
    "layernorm": (layernorm, [(N, C), (C,), (C,)], lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b, 1e-5)),
    "rmsnorm": (rmsnorm, [(N, C), (C,)], lambda x, w: F.rms_norm(x, x.shape[-1:], w, 1e-6)),
    "softmax": (softmax, [(N, C)], lambda x: torch.softmax(x, -1)),
    "log_softmax": (log_softmax, [(N, C)], lambda x: torch.log_softmax(x, -1)),
    "cross_entropy_rows": (cross_entropy_rows, [(N, C), (N, 1)], _torch_ce_rows),
    "variance": (variance, [(N, C)], lambda x: x.var(-1, unbiased=False)),
    "std": (std, [(N, C)], lambda x: x.std(-1, keepdim=True)),
    "logsumexp": (logsumexp, [(N, C)], lambda x: torch.logsumexp(x, -1)),
    "layernorm_keepdims_false": (layernorm_keepdims_false, [(N, C), (C,), (C,)],
                                 lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b, 1e-5)),
    "rmsnorm_fp32_accumulation": (rmsnorm_fp32_accumulation, [(N, C), (C,)],
                                  lambda x, w: F.rms_norm(x.float(), x.shape[-1:], eps=1e-6).to(x.dtype) * w),
}
# what FuseOps alone makes of them (PrimFuncs after FuseTIR, one kernel each); FuseMultiOutput puts
# rmsnorm_fp32_accumulation's cast (read by two kernels) with the square that reads it: 2, not 3
WITHOUT_ROW_FUSION = {"layernorm": 3, "rmsnorm": 2, "softmax": 4, "log_softmax": 4, "cross_entropy_rows": 3,
                      "variance": 2, "std": 3, "logsumexp": 3, "layernorm_keepdims_false": 5,
                      "rmsnorm_fp32_accumulation": 2}


def inputs(name, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=gen).to(dtype) for shape in WORKLOADS[name][1]]


def cuda_kernels(k) -> list[str]:
    return fusion.cuda_kernel_names(k.source)


def launch(k) -> dict[str, set[str]]:
    """thread tag -> the extents it is bound to in the scheduled TIR."""
    found = {}
    for extent, tag in re.findall(r'T\.thread_binding\(([^,]+), thread="(\w+\.x)"', k.stages["schedule"]):
        found.setdefault(tag, set()).add(extent)
    return found


# -- one kernel, CPU and GPU ---------------------------------------------------------------------

@pytest.mark.parametrize("name", WORKLOADS)
def test_one_cpu_kernel_that_agrees_with_torch(name):
    fn, _, reference = WORKLOADS[name]
    args = inputs(name)
    k = bt.jit(target="cpu")(fn).compile(*args)
    (kernel,) = k.fusion
    assert kernel.name.startswith(rowwise.PREFIX) and kernel.fused
    torch.testing.assert_close(k(*args), reference(*args), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", WORKLOADS)
def test_one_cuda_kernel_with_a_block_per_row(name):
    fn = WORKLOADS[name][0]
    k = bt.jit(target=SM90)(fn).compile(*inputs(name))
    (kernel,) = k.fusion
    assert cuda_kernels(k) == [kernel.name + "_kernel"]
    bound = launch(k)
    assert bound["blockIdx.x"] == {f"T.int64({N})"}  # one block per row
    # a loop of a per-row result is int32 (TVM's add_unit_loop): its extent prints without T.int64
    threads = {int(re.fullmatch(r"(?:T\.int64\()?(\d+)\)?", t).group(1)) for t in bound["threadIdx.x"]}
    assert len(threads) == 1 and 128 <= threads.pop() <= 1024  # threads across the row


def test_without_the_stage_the_same_workloads_take_several_kernels(monkeypatch):
    monkeypatch.setattr(rowwise, "fuse_rowwise", lambda mod: mod)
    monkeypatch.setenv("BABYTRITON_CACHE", "0")  # the cache key does not know the stage is off
    for name, (fn, _, _) in WORKLOADS.items():
        k = bt.jit(target="cpu")(fn).compile(*inputs(name))
        assert len(k.fusion) == WITHOUT_ROW_FUSION[name], name


# enough in float16 arithmetic; the others (a variance of float16 squares) need float32 accumulation
HALF_ENOUGH = ["rmsnorm", "softmax", "log_softmax", "rmsnorm_fp32_accumulation"]


@pytest.mark.parametrize("name", HALF_ENOUGH)
def test_half_precision_rows(name):
    fn, _, reference = WORKLOADS[name]
    for dtype in (torch.float16, torch.bfloat16):
        args = inputs(name, dtype)
        k = bt.jit(target="cpu")(fn).compile(*args)
        assert len(k.fusion) == 1
        expected = reference(*[a.float() for a in args]).to(dtype)
        tol = 2e-2 if dtype == torch.bfloat16 else 5e-3
        torch.testing.assert_close(k(*args), expected, rtol=tol, atol=tol)
        gpu = bt.jit(target=SM90)(fn).compile(*args)
        assert len(cuda_kernels(gpu)) == 1


def test_fusing_changes_no_result(monkeypatch):
    """Every workload, float32 and float16: the one kernel computes what the several kernels did."""
    monkeypatch.setenv("BABYTRITON_CACHE", "0")
    cases = [(name, dtype) for name in WORKLOADS for dtype in (torch.float32, torch.float16)]
    fused = {case: bt.jit(target="cpu")(WORKLOADS[case[0]][0])(*inputs(*case)) for case in cases}
    monkeypatch.setattr(rowwise, "fuse_rowwise", lambda mod: mod)
    for case in cases:
        split = bt.jit(target="cpu")(WORKLOADS[case[0]][0])(*inputs(*case))
        tol = 1e-6 if case[1] == torch.float32 else 2e-3  # float16 results round differently when reassociated
        torch.testing.assert_close(fused[case], split, rtol=tol, atol=tol, msg=str(case))


def cross_entropy_picking(x, target):
    m = x.max(-1, keepdims=True)
    lse = m + bt.log(bt.exp(x - m).sum(-1, keepdims=True))
    return lse - gather_elements(x, target, axis=1)  # noqa: F821 - a Relax op


def test_cross_entropy_rows_with_the_pick_are_one_kernel():
    x, target = torch.randn(N, C), torch.randint(0, C, (N, 1))
    k = bt.jit(target="cpu")(cross_entropy_picking).compile(x, target)
    (kernel,) = k.fusion
    assert "gather_elements" in [op.op for op in kernel.ops]
    torch.testing.assert_close(k(x, target), torch.logsumexp(x, -1, keepdim=True) - x.gather(1, target))
    per_row = F.cross_entropy(x, target[:, 0], reduction="none")
    torch.testing.assert_close(k(x, target)[:, 0], per_row)
    gpu = bt.jit(target=SM90)(cross_entropy_picking).compile(x, target)
    assert len(cuda_kernels(gpu)) == 1 and launch(gpu)["blockIdx.x"] == {f"T.int64({N})"}


def pick_from_computed(x, target):
    e = bt.exp(x - x.max(-1, keepdims=True))
    return gather_elements(e, target, axis=1) / e.sum(-1, keepdims=True)  # noqa: F821


def test_a_gather_from_a_computed_tile_stays_outside():
    """A block holds its own row of what the group computes; a gather may index any element."""
    x, target = torch.randn(N, C), torch.randint(0, C, (N, 1))
    k = bt.jit(target="cpu")(pick_from_computed).compile(x, target)
    assert all("gather" not in kernel.name or not kernel.name.startswith(rowwise.PREFIX) for kernel in k.fusion)
    torch.testing.assert_close(k(x, target), torch.softmax(x, -1).gather(1, target))


@bt.jit(target="cpu")
def rmsnorm_symbolic_rows(x: bt.Tensor(("n", 1024), "float32"), w: bt.Tensor((1024,), "float32")):
    return x * bt.rsqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w


def test_a_symbolic_row_count_fuses_too():
    k = rmsnorm_symbolic_rows.compile()
    assert len(k.fusion) == 1
    for rows in (1, 7, 300):
        x, w = torch.randn(rows, 1024), torch.randn(1024)
        torch.testing.assert_close(rmsnorm_symbolic_rows(x, w), F.rms_norm(x, (1024,), w, 1e-6))
    gpu = bt.jit(target=SM90)(rmsnorm_symbolic_rows.__wrapped__).compile()
    assert len(cuda_kernels(gpu)) == 1 and launch(gpu)["blockIdx.x"] == {"n"}


@bt.jit(target="cpu", cache=False)
def count_of_symbolic_sizes(x: bt.Tensor(("n", "m"), "float32")):
    return torch.ones_like(x).sum() > 3, torch.ones_like(x).sum(1) * 2


@pytest.mark.parametrize("shape", [(0, 2), (2, 0), (1, 1), (3, 5)])
def test_sizes_no_buffer_carries_reach_the_row_kernel(shape):
    """`ones_like(x).sum()` reads no buffer of x's sizes (only its call names them): the row kernel
    takes them as parameters (it failed to build: "undefined variable d1", fuzz seed 8)."""
    k = count_of_symbolic_sizes.compile(torch.randn(3, 5))
    assert sum(kernel.name.startswith(rowwise.PREFIX) for kernel in k.fusion) == 2
    x = torch.randn(shape)
    for got, want in zip(count_of_symbolic_sizes(x), (torch.ones_like(x).sum() > 3, torch.ones_like(x).sum(1) * 2)):
        torch.testing.assert_close(got, want)


@settings(max_examples=6, deadline=None)
@given(lead=st.lists(st.integers(1, 5), min_size=1, max_size=3), cols=st.sampled_from([1, 3, 32, 200]))
def test_softmax_over_any_leading_axes(lead, cols):
    x = torch.randn(*lead, cols) * 4
    k = bt.jit(target="cpu")(softmax).compile(x)
    if cols > 1:  # a row of one has nothing to reduce
        assert len(k.fusion) == 1
    torch.testing.assert_close(k(x), torch.softmax(x, -1))


@settings(max_examples=8, deadline=None)
@given(name=st.sampled_from(["layernorm", "rmsnorm", "log_softmax", "logsumexp", "variance", "std"]),
       lead=st.lists(st.integers(1, 4), min_size=1, max_size=2), cols=st.sampled_from([2, 5, 64, 300]))
def test_row_workloads_over_any_shape(name, lead, cols):
    fn, shapes, reference = WORKLOADS[name]
    args = [torch.randn(*lead, cols)] + [torch.randn(cols) for _ in shapes[1:]]
    k = bt.jit(target="cpu")(fn).compile(*args)
    assert len(k.fusion) == 1
    torch.testing.assert_close(k(*args), reference(*args), rtol=1e-5, atol=1e-5)


def test_nan_and_inf_rows_agree_with_torch():
    x = torch.randn(4, 64)
    # (not a row of -inf only: TVM's max starts from the lowest finite float, torch's from -inf)
    x[0, 3], x[1, :7] = float("nan"), float("-inf")
    x[2, 5] = float("inf")
    e = torch.exp(x - x.max(-1, keepdim=True).values)
    torch.testing.assert_close(bt.jit(target="cpu")(softmax)(x), e / e.sum(-1, keepdim=True), equal_nan=True)
    m = x.max(-1).values
    torch.testing.assert_close(bt.jit(target="cpu")(logsumexp)(x), m + torch.log(torch.exp(x - m[:, None]).sum(-1)),
                               equal_nan=True)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
def test_row_kernels_compile_with_nvcc():
    from tvm.support import nvcc
    for name in ("layernorm", "softmax", "rmsnorm_fp32_accumulation"):
        k = bt.jit(target=SM90)(WORKLOADS[name][0]).compile(*inputs(name, torch.float16))
        with tvm.target.Target(SM90):
            ptx = nvcc.compile_cuda(k.source, target_format="ptx", compiler="nvcc")
        assert ptx.count(b".entry ") == 1


def norm_by_flag(x, flag: bool):
    if flag:
        e = bt.exp(x - x.max(-1, keepdims=True))
        y = e / e.sum(-1, keepdims=True)
    else:
        y = x * bt.rsqrt((x * x).mean(-1, keepdims=True) + 1e-6)
    return y


def test_rows_inside_if_branches_fuse():
    x = torch.randn(N, C)
    f = bt.jit(target="cpu")(norm_by_flag)
    k = f.compile(x, True)
    assert len(k.fusion) == 2 and all(kernel.name.startswith(rowwise.PREFIX) for kernel in k.fusion)
    torch.testing.assert_close(f(x, True), torch.softmax(x, -1))
    torch.testing.assert_close(f(x, False), F.rms_norm(x, (C,), eps=1e-6))


# -- what is not fused --------------------------------------------------------------------------

def softmax_and_max(x):
    m = x.max(-1, keepdims=True)
    e = bt.exp(x - m)
    return e / e.sum(-1, keepdims=True), m


def normalised_then_columns(x):
    d = x - x.mean(-1, keepdims=True)
    return (d * d).sum(0)


def rms_then_matmul(x, w):
    return (x * bt.rsqrt((x * x).mean(-1, keepdims=True) + 1e-6)) @ w


def residual_and_norm(x, w):
    h = x + x @ w
    return h * bt.rsqrt((h * h).mean(-1, keepdims=True) + 1e-6), h


def two_norms_of_one_input(x, w):
    a = x * 2.0
    e = bt.exp(a - a.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True), a * bt.rsqrt((a * a).mean(-1, keepdims=True) + 1e-6) * w


def every_op_once(k):
    ops = [(op.var, op.line) for kernel in k.fusion for op in kernel.ops]
    assert len(ops) == len(set(ops))


def test_a_reduction_needed_outside_is_computed_once_not_duplicated():
    # the row kernel writes the max it computes (passes/rowwise.py _writes_several), not a kernel of
    # its own writing it for the row kernel to read back
    x = torch.randn(N, C)
    k = bt.jit(target="cpu")(softmax_and_max).compile(x)
    assert len(k.fusion) == 1 and sum(op.op == "max" for kernel in k.fusion for op in kernel.ops) == 1
    assert k.fusion[0].rule == "CPUReduction", str(k.fusion)
    every_op_once(k)
    y, m = k(x)
    torch.testing.assert_close(y, torch.softmax(x, -1))
    torch.testing.assert_close(m, x.max(-1, keepdim=True).values)


def test_two_row_computations_sharing_an_input_are_one_kernel_computing_it_once():
    # (three kernels before row kernels wrote several results: `a`, then each norm reading it back)
    x, w = torch.randn(N, C), torch.randn(C)
    k = bt.jit(target="cpu")(two_norms_of_one_input).compile(x, w)
    assert [(kernel.name.startswith(rowwise.PREFIX), kernel.rule) for kernel in k.fusion] == [(True, "CPUReduction")]
    every_op_once(k)
    y, z = k(x, w)
    torch.testing.assert_close(y, torch.softmax(2 * x, -1))
    torch.testing.assert_close(z, F.rms_norm(2 * x, (C,), w, 1e-6))


def swish_row_sum(x, w):
    h = x * w + 1.0
    return (h * bt.sigmoid(h)).sum(-1)


def mean_then_scale(x):
    return x.mean(-1, keepdims=True) * 2.0 + 1.0


def test_what_fuse_ops_makes_one_kernel_is_left_to_it():
    for fn, args in ((swish_row_sum, (torch.randn(N, C), torch.randn(N, C))), (mean_then_scale, (torch.randn(N, C),))):
        k = bt.jit(target="cpu")(fn).compile(*args)
        (kernel,) = k.fusion
        assert kernel.name.startswith("fused_") and not kernel.name.startswith(rowwise.PREFIX)
        assert rowwise.PREFIX not in k.stages["FuseRowwise"]


def test_only_reductions_over_the_same_rows_are_grouped():
    x = torch.randn(N, C)
    k = bt.jit(target="cpu")(normalised_then_columns).compile(x)
    assert len(k.fusion) == 2  # the column sum reads other rows: its own kernel
    d = x - x.mean(-1, keepdim=True)
    torch.testing.assert_close(k(x), (d * d).sum(0), rtol=1e-4, atol=1e-4)


def test_a_matmul_stays_outside_the_row_kernel():
    x, w = torch.randn(N, C), torch.randn(C, 32)
    k = bt.jit(target="cpu")(rms_then_matmul).compile(x, w)
    assert len(k.fusion) == 2 and all("matmul" not in kernel.name or not kernel.name.startswith(rowwise.PREFIX)
                                      for kernel in k.fusion)
    torch.testing.assert_close(k(x, w), F.rms_norm(x, (C,), eps=1e-6) @ w, rtol=1e-4, atol=1e-4)


def test_a_value_also_returned_is_left_out_of_the_row_kernel():
    x, w = torch.randn(N, C), torch.randn(C, C) / C
    k = bt.jit(target="cpu")(residual_and_norm).compile(x, w)
    row = [kernel for kernel in k.fusion if kernel.name.startswith(rowwise.PREFIX)]
    assert len(row) == 1 and "matmul" not in [op.op for op in row[0].ops]
    every_op_once(k)
    y, h = k(x, w)
    torch.testing.assert_close(h, x + x @ w, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(y, F.rms_norm(x + x @ w, (C,), eps=1e-6), rtol=1e-4, atol=1e-4)


# -- the fusion map ------------------------------------------------------------------------------

def test_the_fusion_map_names_the_grouped_ops_and_their_lines():
    lines, first = inspect.getsourcelines(layernorm)
    where = {text: first + i for i, line in enumerate(lines) for text in [line.strip()]}
    for target in ("cpu", SM90):
        k = bt.jit(target=target)(layernorm).compile(*inputs("layernorm"))
        (kernel,) = k.fusion
        assert [op.op for op in kernel.ops] == [
            "mean", "subtract", "multiply", "mean", "add", "rsqrt", "multiply", "multiply", "add"]
        assert kernel.lines == sorted(where[t] for t in (
            "m = x.mean(-1, keepdims=True)", "d = x - m", "v = (d * d).mean(-1, keepdims=True)",
            "return d * bt.rsqrt(v + 1e-5) * w + b"))
        assert [op.var for op in kernel.ops[:2]] == ["m", "d"]
    assert kernel.cuda_kernels == (kernel.name + "_kernel",)
    assert "(9 ops fused)" in str(k.fusion)


def test_the_stage_is_recorded():
    k = bt.jit(target="cpu")(softmax).compile(torch.randn(N, C))
    stages = list(k.stages)
    assert stages.index("AnnotateTIROpPattern") < stages.index("FuseRowwise") < stages.index("FuseOps")
    assert '"Primitive": 1' in k.stages["FuseRowwise"] and rowwise.PREFIX in k.stages["FuseRowwise"]


# -- on the GPU ---------------------------------------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("name", WORKLOADS)
def test_gpu_rows_agree_with_torch(name):
    fn, _, reference = WORKLOADS[name]
    args = [a.cuda() for a in inputs(name)]
    torch.testing.assert_close(bt.jit(target="gpu")(fn)(*args), reference(*args), rtol=1e-4, atol=1e-4)
    if name not in HALF_ENOUGH:
        return
    half = [a.half() for a in args]
    torch.testing.assert_close(bt.jit(target="gpu")(fn)(*half), reference(*[a.float() for a in half]).half(),
                               rtol=5e-3, atol=5e-3)


def norm_over_outer_axes(x):
    mu = x.mean((0, 2), keepdim=True)
    d = x - mu
    var = (d * d).mean((0, 2), keepdim=True)
    return d * torch.rsqrt(var + 1e-5)


@pytest.mark.parametrize("target", ["cpu", {"kind": "cuda", "arch": "sm_90"}])
@pytest.mark.parametrize("shape", [(5, 3, 7), (64, 3, 1000)])
def test_a_square_feeding_a_second_outer_reduction_is_in_its_kernel(target, shape):
    """`(d * d).mean((0, 2))` after `d = x - x.mean((0, 2))`: over outer axes each reduction is a kernel
    of its own; the square is the second one's producer, not a kernel writing d * d out."""
    x = torch.randn(shape)
    f = bt.jit(norm_over_outer_axes, target=target)
    fusion = f.compile(x if target == "cpu" else x.to("meta")).fusion
    assert not any(k.name == "multiply" for k in fusion) and len(fusion) == 2, str(fusion)
    if target == "cpu":
        torch.testing.assert_close(f(x), norm_over_outer_axes(x), rtol=1e-4, atol=1e-5)


def norm_of_split_halves(x):
    h = F.softplus(x) * 0.5
    a, g = h.split(h.shape[-1] // 2, dim=-1)
    h = F.gelu(a) * g
    return h / torch.linalg.vector_norm(h, dim=(0, 1), keepdim=True).clamp_min(1e-6)


def test_a_wider_producer_is_not_recomputed_in_the_rows():
    """The softplus before a split feeds the row kernel of a norm over its halves: a wider tensor than
    the rows, it stays a kernel of its own (recomputed for each half it would be computed twice; on
    an H200 such a program's row kernel fell to GeneralReduction and ran 17x slower)."""
    x = torch.randn(6, 5, 64)
    for target in ("cpu", {"kind": "cuda", "arch": "sm_90"}):
        fusion = bt.jit(norm_of_split_halves, target=target).compile(x if target == "cpu" else x.to("meta")).fusion
        rows = [k for k in fusion if "sum" in k.name]
        assert rows and not any("exp" in k.name for k in rows), str(fusion)
        assert not any(k.rule.startswith("dlight") for k in fusion), str(fusion)
    torch.testing.assert_close(bt.jit(norm_of_split_halves)(x), norm_of_split_halves(x), rtol=1e-4, atol=1e-5)
