"""Element-wise kernels move whole 16-byte vectors in every dtype (issue 28): eight halves, sixteen int8,
four floats per thread and buffer of the kernel's widest dtype, however the math is computed (half
math in float32, compares and selects, calls without a vector form, casts): such math is computed lane
by lane in registers between one vector load per input and one vector store per output. The CUDA
for sm_90 is compiled by nvcc and its PTX read; the programs run against torch on the CPU (NaN, inf)
and, marked `gpu`, on a GPU."""
import re
import shutil

import pytest
import torch
import torch.nn.functional as F

import babytriton as bt

SM90 = {"kind": "cuda", "arch": "sm_90"}
ROWS, COLS = 64, 1024
DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16, "int8": torch.int8,
          "bool": torch.bool}


def clamp_polynomial(x, y):
    t = torch.clamp(x, -2.0, 2.0)
    return 0.5 * t * t * t - 1.5 * t + y


def gated(x, y):
    return torch.sigmoid(x) * y + torch.tanh(x * 0.5) - 0.25 * y


def select(x, y):
    return torch.where(x > y, x * 2.0, y)


def nan_to_zero(x, y):
    return torch.where(torch.isnan(x), y, x)


def gelu_erf(x, y):
    return F.gelu(torch.clamp(x, -10.0, 10.0)) + torch.erf(y)  # torch's CPU gelu(inf) is NaN


def hardswish(x, y):
    return x * F.relu6(x + 3.0) / 6.0 + y


def widened(x, y):
    return x.float() * y  # y float32: 16 bytes of it, 8 of x


def narrowed(x, y):
    return (x * y).to(torch.float16)  # float32 in, float16 out


def quantise(x, y):
    return torch.clamp(torch.round(x * 10.0), -128, 127).to(torch.int8)


def int8_select(x, y):
    return torch.where(x > y, x, y - x)


def int8_to_half(x, y):
    return x.to(torch.float16) * y


def two_results(x, y):
    return torch.where(x > y, x, y * 0.5), torch.sigmoid(x) + y


# (function, x dtype, y dtype, lanes: elements of the widest buffer in 16 bytes)
PROGRAMS = [
    *[(f, dtype, dtype, 8) for f in (clamp_polynomial, gated, select, nan_to_zero, gelu_erf, hardswish, two_results)
      for dtype in ("float16", "bfloat16")],
    (widened, "float16", "float32", 4), (narrowed, "float32", "float32", 4), (quantise, "float16", "float16", 8),
    (int8_select, "int8", "int8", 16), (int8_to_half, "int8", "float16", 8), (select, "float32", "float32", 4),
]
IDS = [f"{f.__name__}-{x}-{y}" for f, x, y, _ in PROGRAMS]


def annotated(f, xdtype: str, ydtype: str):
    """`f` with (ROWS, COLS) arguments of the given dtypes, for bt.jit."""
    def typed(x: bt.Tensor((ROWS, COLS), xdtype), y: bt.Tensor((ROWS, COLS), ydtype)):
        return f(x, y)
    return typed


def inputs(xdtype: str, ydtype: str, device: str = "cpu"):
    """Random x and y, each with NaN, inf, -inf and -0.0 among its first elements (floats); int8 over its range."""
    gen = torch.Generator().manual_seed(0)
    made = []
    for dtype in (xdtype, ydtype):
        if dtype == "int8":
            made.append(torch.randint(-128, 128, (ROWS, COLS), generator=gen, dtype=torch.int8))
            continue
        v = torch.randn(ROWS, COLS, generator=gen) * 3
        v.view(-1)[:4] = torch.tensor([float("nan"), float("inf"), -float("inf"), -0.0])
        made.append(v.to(DTYPES[dtype]))
    return [t.to(device) for t in made]


def ptx_accesses(source: str) -> tuple[list[str], list[str]]:
    """The global loads and stores of the kernel's PTX (nvcc for sm_90), as their instructions."""
    from tvm.support import nvcc
    import tvm
    with tvm.target.Target(SM90):
        ptx = nvcc.compile_cuda(source, target_format="ptx", compiler="nvcc").decode()
    return re.findall(r"\bld\.global[.\w]*", ptx), re.findall(r"\bst\.global[.\w]*", ptx)


@pytest.mark.parametrize("f, xdtype, ydtype, lanes", PROGRAMS, ids=IDS)
def test_every_dtype_moves_whole_16_byte_vectors_on_sm90(f, xdtype, ydtype, lanes):
    """One thread per `lanes` output elements; each buffer of the widest dtype is one 16-byte load or
    store per thread (`v4` of 32-bit words), each narrower one a vector of as many elements."""
    k = bt.jit(target=SM90)(annotated(f, xdtype, ydtype)).compile()
    (kernel,) = k.fusion
    assert kernel.rule == "Elementwise" and kernel.launch == f"grid {ROWS * COLS // lanes // 256} x block 256", \
        str(k.fusion)
    if not shutil.which("nvcc"):
        return
    loads, stores = ptx_accesses(k.source)
    out = kernel_out_dtype(f, xdtype, ydtype)
    read = [xdtype] if f is quantise else [xdtype, ydtype]  # quantise reads x alone
    bits = lambda dtypes: sorted(lanes * DTYPES[d].itemsize * 8 for d in dtypes)  # noqa: E731
    assert sorted(map(vector_bits, loads)) == bits(read), loads
    assert sorted(map(vector_bits, stores)) == bits([out] * (2 if f is two_results else 1)), stores
    assert 128 in map(vector_bits, loads + stores)


def kernel_out_dtype(f, xdtype: str, ydtype: str) -> str:
    """The dtype torch gives f's (first) result."""
    out = f(*(torch.zeros(1, 1, dtype=DTYPES[d]) for d in (xdtype, ydtype)))
    return str((out[0] if isinstance(out, tuple) else out).dtype).removeprefix("torch.")


def vector_bits(access: str) -> int:
    """The bits one PTX load or store moves: `ld.global.nc.v4.u32` moves 128."""
    count = re.search(r"\.v(\d)\.", access)
    width = int(re.search(r"\.[usfb](\d+)$", access).group(1))
    return (int(count.group(1)) if count else 1) * width


@pytest.mark.parametrize("f, xdtype, ydtype, lanes", PROGRAMS, ids=IDS)
def test_every_dtype_matches_torch_on_the_cpu(f, xdtype, ydtype, lanes):
    x, y = inputs(xdtype, ydtype)
    assert_results(bt.jit(target="cpu")(annotated(f, xdtype, ydtype))(x, y), f, x, y, on_gpu=False)


@pytest.mark.gpu
@pytest.mark.parametrize("f, xdtype, ydtype, lanes", PROGRAMS, ids=IDS)
def test_every_dtype_matches_torch_on_a_gpu(f, xdtype, ydtype, lanes):
    x, y = inputs(xdtype, ydtype, "cuda")
    assert_results(bt.jit(target="gpu")(annotated(f, xdtype, ydtype))(x, y), f, x, y, on_gpu=True)


def assert_results(got, f, x, y, on_gpu: bool) -> None:
    """Each result against torch's, NaN where torch has NaN. Half dtypes within a rounding or two of
    eager torch (which rounds every step) or of f computed in float32 and rounded once (as
    torch.compile does): a contracted multiply-add, fast-math calls on the GPU."""
    expected = f(x, y)
    half = (torch.float16, torch.bfloat16)
    wide = f(x.float(), y.float()) if x.dtype in half and y.dtype in half else expected
    got, expected, wide = ((got,), (expected,), (wide,)) if not isinstance(expected, tuple) else (got, expected, wide)
    for g, e, w in zip(got, expected, wide):
        assert g.dtype == e.dtype and g.shape == e.shape
        if e.dtype in half or (on_gpu and e.dtype == torch.float32):
            try:
                torch.testing.assert_close(g.float(), e.float(), atol=2e-2, rtol=2e-2, equal_nan=True)
            except AssertionError:
                torch.testing.assert_close(g, w.to(e.dtype), atol=2e-2, rtol=2e-2, equal_nan=True)
        else:
            torch.testing.assert_close(g, e, equal_nan=True)
