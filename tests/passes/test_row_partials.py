"""RowPartials (babytriton/passes/row_partials.py): a reduction over a row group's rows and more axes
(`softmax(x).sum()`, KL divergence's batchmean) becomes per-row partials computed in the row kernel
and a small reduction of them, so the row kernel writes one value per row instead of the tile.

Generated row computations and final reductions compared with torch on the CPU (NaN and inf, float16
and bfloat16, empty and symbolic sizes, a tile also read elsewhere); the kernels counted, their rules
and whether any writes the tile checked on CPU and sm_90 builds, the CUDA compiled by nvcc where
installed."""
import re
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F  # noqa: F401 - the generated programs use it
import tvm
from hypothesis import given, settings, strategies as st

import babytriton as bt
from babytriton.passes import row_partials
from babytriton.testing.fuzz.checking import load

SM90 = {"kind": "cuda", "arch": "sm_90"}
ROOT = Path(__file__).resolve().parents[2]
TOL = {torch.float32: (1e-5, 1e-5), torch.float16: (2e-3, 2e-3), torch.bfloat16: (2e-2, 2e-2)}


def _close(got, want, dtype, terms: int = 1):
    """Equal up to rounding: a sum of `terms` values that cancel (of `x - x.mean()`) is off by
    about the square root of their count times the rounding of one."""
    rtol, atol = TOL[dtype]
    assert got.dtype == want.dtype and got.shape == want.shape, (got, want)
    torch.testing.assert_close(got.float(), want.float(), rtol=rtol, atol=atol * max(1.0, terms ** 0.5),
                               equal_nan=True)


def _written(kernel) -> list[str]:
    """The shapes of what each kernel call of the fused module writes, as its script spells them."""
    fused = kernel.stages["FuseTIR"]
    calls = [line.split("out_ty=", 1)[1] for line in fused[fused.find("@R.function"):].splitlines()
             if "R.call_tir(" in line and "out_ty=" in line]
    return [shape for out in calls for shape in re.findall(r"R\.Tensor\(\(([^)]*)\)", out)]


def _tile(shape) -> str:
    return ", ".join(str(n) for n in shape)


def _split(kernel) -> bool:
    return row_partials._PARTIAL in kernel.stages["AnnotateTIROpPattern"]


# --------------------------------------------------------------------------------------------------
# generated programs, compared with torch
# --------------------------------------------------------------------------------------------------

# a row computation over the last axis, an element-wise step on its tile, then the reduction of it
ROWS = ["torch.softmax(y, dim=-1)", "F.log_softmax(y, dim=-1)", "y - y.mean(-1, keepdim=True)",
        "y / (y * y).sum(-1, keepdim=True).sqrt()", "(y - y.amax(-1, keepdim=True)).exp()"]
STEPS = ["z", "z * z", "torch.where(z > 0.1, z, 0.0)", "z * 1.5 - 0.25"]
# the reductions split (over all axes, or over the rows' axis and another), and one left alone
SPLIT = ["z.sum()", "z.mean()", "z.amax()", "z.amin()", "z.sum(dim=(0, 2), keepdim=True)", "z.mean(dim=(1, 2))",
         "z.amax(dim=(-1, 0))", "z.flatten().sum()", "z.reshape(-1).mean()", "z.view(-1).amin()"]
_MODULES = Path(tempfile.mkdtemp(prefix="bt_row_partials_"))


def _program(row: int, step: int, final: str):
    """A function `f(x)`: x scaled, one row computation, an element-wise step, then `final`."""
    body = ["    y = x * 2.0", f"    z = {ROWS[row]}", f"    z = {STEPS[step]}", f"    return {final}"]
    name = f"gen_{row}_{step}_{abs(hash(final)) % 10 ** 8}"
    path = _MODULES / f"{name}.py"
    path.write_text("import torch\nimport torch.nn.functional as F\n\n\ndef f(x):\n" + "\n".join(body) + "\n")
    return load(path).f


def _inputs(shape, dtype, seed, special: bool):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(shape, generator=g)
    if special:  # a NaN in one row, an inf in another, a row of -inf
        x[0, 1, 2] = float("nan")
        x[1, 0, 3] = float("inf")
        x[-1, -1] = float("-inf")
    return x.to(dtype)


@settings(max_examples=12, deadline=None)
@given(row=st.integers(0, len(ROWS) - 1), step=st.integers(0, len(STEPS) - 1), final=st.sampled_from(SPLIT),
       dtype=st.sampled_from([torch.float32, torch.float16, torch.bfloat16]), special=st.booleans(),
       seed=st.integers(0, 99), width=st.sampled_from([40, 67, 1000]))
def test_generated_reductions_of_rows_match_torch(row, step, final, dtype, special, seed, width):
    f = _program(row, step, final)
    x = _inputs((3, 4, width), dtype, seed, special)
    k = bt.jit(f, target="cpu")
    _close(k(x), f(x), dtype, x.numel())
    compiled = k.compile(x)
    # the row kernel reduces its rows too, and writes no tile; every kernel has a CPU rule
    assert _split(compiled) and _tile(x.shape) not in _written(compiled), compiled.stages["FuseTIR"]
    assert len(compiled.fusion) == 2 and all(kern.rule not in ("", "none") for kern in compiled.fusion), compiled.fusion


# --------------------------------------------------------------------------------------------------
# halves over long rows, special rows, empty and symbolic sizes, a tile read elsewhere
# --------------------------------------------------------------------------------------------------

def softmax_sum(x):
    return torch.softmax(x, dim=-1).sum()


def log_softmax_mean(x):
    return F.log_softmax(x, dim=-1).mean()


def softmax_amax(x):
    return torch.softmax(x, dim=-1).amax()


def log_softmax_amin(x):
    return F.log_softmax(x, dim=-1).amin()


@pytest.mark.parametrize("f", [softmax_sum, log_softmax_mean, softmax_amax, log_softmax_amin])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_halves_over_long_rows_and_special_rows(f, dtype):
    # 8 rows of 4096 halves: their sum passes float16's 2048 and bfloat16's 256, added in float32
    x = torch.randn(8, 4096) * 4
    x[1, 3] = float("nan")
    x[2] = float("-inf")
    x[3, 0] = float("inf")
    x = x.to(dtype)
    k = bt.jit(f, target="cpu")
    _close(k(x), f(x), dtype)
    finite = x.clone()
    finite[1:4] = 0
    _close(k(finite), f(finite), dtype, finite.numel())
    assert _tile(x.shape) not in _written(k.compile(x))


def symbolic(x: bt.Tensor(("n", "m"), "float32")):
    return torch.softmax(x * 3.0, dim=-1).sum(), F.log_softmax(x, dim=1).mean()


def symbolic_extremes(x: bt.Tensor(("n", "m"), "float32")):
    return torch.softmax(x, -1).amax(dim=(0, 1), keepdim=True), (x - x.mean(-1, keepdim=True)).amin()


@pytest.mark.parametrize("shape", [(4, 7), (1, 1), (2, 1), (0, 5), (3, 0)])
def test_symbolic_and_empty_sizes(shape):
    x = torch.randn(shape)
    programs = [symbolic, symbolic_extremes] if x.numel() else [symbolic]  # torch refuses amax of nothing
    for f in programs:
        k = bt.jit(f, target="cpu")
        for got, want in zip(k(x), f(x)):
            _close(got, want, torch.float32, x.numel())
    # (a symbolic max or min checks its axes are not empty between two dataflow blocks, and the pass
    # splits within a block: those stay as they were)
    assert _split(bt.jit(symbolic, target="cpu").compile(x))


def static_empty(x):
    return torch.softmax(x, dim=-1).sum(), torch.softmax(x, dim=-1).mean()


@pytest.mark.parametrize("shape", [(0, 5), (3, 0)])
def test_static_empty(shape):
    x = torch.randn(shape)
    for got, want in zip(bt.jit(static_empty, target="cpu")(x), static_empty(x)):
        _close(got, want, torch.float32)


def returned_too(x):
    y = torch.softmax(x, dim=-1)
    return y, y.sum()


def read_after(x):
    y = F.log_softmax(x, dim=-1)
    return y * y.mean()


@pytest.mark.parametrize("f", [returned_too, read_after])
def test_a_tile_read_elsewhere_is_still_written(f):
    x = torch.randn(64, 300)
    x[3, 5] = float("nan")
    k = bt.jit(f, target="cpu")
    got, want = k(x), f(x)
    for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
        _close(g, w, torch.float32)
    assert _tile(x.shape) in _written(k.compile(x))


# --------------------------------------------------------------------------------------------------
# what is left alone
# --------------------------------------------------------------------------------------------------

def softmax_prod(x):
    return torch.softmax(x, dim=-1).prod()


def softmax_argmax(x):
    return torch.softmax(x, dim=-1).argmax()


def over_the_rows_only(x):
    return torch.softmax(x, dim=-1).sum(-1)


def over_other_axes(x):
    return torch.softmax(x, dim=-1).sum(0)


def squared_error(x):
    return ((x - 0.5) ** 2).mean()


@pytest.mark.parametrize("f", [softmax_prod, softmax_argmax, over_the_rows_only, over_other_axes, squared_error])
def test_left_alone(f):
    x = torch.rand(16, 24) + 0.5
    k = bt.jit(f, target="cpu")
    got, want = k(x), f(x)
    if want.dtype == torch.int64:
        assert torch.equal(got, want)
    else:
        _close(got, want, torch.float32)
    assert not _split(k.compile(x))


def test_switch_off_writes_the_tile(monkeypatch):
    x = torch.randn(64, 300)
    monkeypatch.setattr(row_partials, "SPLIT", False)
    k = bt.jit(softmax_sum, target="cpu", cache=False)
    _close(k(x), softmax_sum(x), torch.float32, x.numel())
    assert _tile(x.shape) in _written(k.compile(x))


# --------------------------------------------------------------------------------------------------
# the outside programs, on CPU and sm_90 builds
# --------------------------------------------------------------------------------------------------

def _outside():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import outside
    from perf_programs import make_args
    return outside, make_args


@pytest.mark.parametrize("target", ["cpu", "sm90"])
def test_kl_divergence_writes_no_tile(target):
    outside, make_args = _outside()
    program = outside.by_name("kl_divergence")
    args = make_args(list(program.small), "cpu", 0)
    k = bt.jit(program.fn, target=SM90 if target == "sm90" else "cpu").compile(*args)
    # the row kernel (both softmaxes, the terms, their sum per row) and the sum of the rows' sums
    assert len(k.fusion) == 2 and _tile(args[0].shape) not in _written(k), k.fusion
    assert all(kern.rule not in ("", "none") and "Fallback" not in kern.rule for kern in k.fusion), k.fusion
    if target == "cpu":
        _close(bt.jit(program.fn, target="cpu")(*args), program.fn(*args), torch.float32)


def kl_half(student, teacher):
    log_p = F.log_softmax(student.float() / 2.0, dim=-1)
    q = F.softmax(teacher.float() / 2.0, dim=-1)
    return F.kl_div(log_p, q, reduction="batchmean").to(student.dtype)


@pytest.mark.parametrize("f,dtype", [(softmax_sum, torch.float32), (log_softmax_mean, torch.bfloat16),
                                     (softmax_amax, torch.float16), (kl_half, torch.bfloat16)])
@pytest.mark.parametrize("shape", [(512, 4096), (16, 32000), (1000, 33)])
def test_cuda_compiles_with_nvcc(f, dtype, shape):
    args = [torch.randn(shape).to(dtype) for _ in range(2 if f is kl_half else 1)]
    k = bt.jit(f, target=SM90).compile(*args)
    assert _split(k) and _tile(shape) not in _written(k), k.fusion
    assert all("Fallback" not in kern.rule and kern.rule not in ("", "none") for kern in k.fusion), k.fusion
    if shutil.which("nvcc"):
        from tvm.support import nvcc
        with tvm.target.Target(SM90):
            assert ".entry" in nvcc.compile_cuda(k.source, target_format="ptx", compiler="nvcc").decode()


@pytest.mark.parametrize("f", [returned_too, read_after])
def test_a_tile_read_elsewhere_builds_for_sm90(f):
    k = bt.jit(f, target=SM90).compile(torch.randn(512, 4096))
    assert "512, 4096" in _written(k) and all("Fallback" not in kern.rule for kern in k.fusion), k.fusion
    if shutil.which("nvcc"):
        from tvm.support import nvcc
        with tvm.target.Target(SM90):
            assert ".entry" in nvcc.compile_cuda(k.source, target_format="ptx", compiler="nvcc").decode()
