"""Permutes whose output rows are short (issue 28, perf-fuzz p185: `x.permute(0, 2, 1)` of a [n, 4, m]
tensor): Tiled stages the input's rows (long, contiguous) in shared memory and writes the output's tile
as one contiguous run, instead of Elementwise reading the input a column at a time. CUDA built for
sm_90 and compiled by nvcc (no GPU needed); results compared with torch on the CPU, and on the GPU
(marked gpu)."""
import itertools
import shutil

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import babytriton as bt
from nvcc_batch import assert_nvcc_compiles

SM90 = {"kind": "cuda", "arch": "sm_90"}
DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.bool, torch.float64]


def permuted(perm):
    def f(x):
        return x.permute(*perm).contiguous()
    return f


def scaled_permute(x, y):  # a permute feeding an element-wise op: one kernel, the read staged
    return x.permute(0, 2, 1) * y + 1


def compiled(fn, *tensors):
    return bt.jit(fn, target=SM90).compile(*[torch.empty(t.shape, dtype=t.dtype, device="meta") for t in tensors])


def nvcc_compiles(source: str) -> bool:
    from tvm.support import nvcc
    import tvm
    with tvm.target.Target(SM90):
        return b".entry" in nvcc.compile_cuda(source, target_format="ptx", compiler="nvcc")


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(8205, 4, 1024), (7, 2, 1000), (9, 4, 77), (3, 4, 4100)])
def test_short_output_rows_are_tiled_in_one_run(dtype, shape):
    k = compiled(permuted((0, 2, 1)), torch.empty(shape, dtype=dtype))
    assert [kernel.rule for kernel in k.fusion] == ["Tiled"], str(k.fusion)
    assert "__shared__" in k.source and "__syncthreads" in k.source


def test_a_row_length_that_does_not_divide_the_block_is_read_in_place():
    k = compiled(permuted((0, 2, 1)), torch.empty(7, 3, 1001))
    assert [kernel.rule for kernel in k.fusion] == ["Elementwise"], str(k.fusion)


def test_an_unpadded_short_rows_tile_loads_whole_vectors():
    """The tile's rows are read by a warp along them (no bank conflict to pad against): 16-byte loads."""
    source = compiled(permuted((0, 2, 1)), torch.empty(64, 4, 1024, dtype=torch.bfloat16)).source
    assert "*(uint4*)(x_shared_ptr" in source, source[-2500:]


@pytest.mark.skipif(not shutil.which("nvcc"), reason="nvcc not installed")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.int8, torch.bool])
def test_every_3d_permute_and_dtype_compiles_with_nvcc(dtype):
    shapes = [(33, 4, 1000), (40, 130, 2), (5, 2, 999)]
    cases = [(shape, perm) for shape, perm in itertools.product(shapes, itertools.permutations(range(3)))
             if perm != (0, 1, 2)]
    sources = [compiled(permuted(perm), torch.empty(shape, dtype=dtype)).source for shape, perm in cases]
    assert_nvcc_compiles(sources, cases)   # one nvcc run for the 15 (nvcc's start-up is most of a run)


@pytest.mark.skipif(not shutil.which("nvcc"), reason="nvcc not installed")
def test_a_staged_short_rows_read_beside_a_row_major_one_compiles_with_nvcc():
    k = compiled(scaled_permute, torch.empty(17, 4, 1000, dtype=torch.float16), torch.empty(17, 1000, 4))
    assert [kernel.rule for kernel in k.fusion] == ["Tiled"], str(k.fusion)
    assert nvcc_compiles(k.source)


def with_specials(x: torch.Tensor) -> torch.Tensor:
    x = x.clone()
    if x.is_floating_point() and x.numel() >= 3:
        x.view(-1)[:3] = torch.tensor([float("nan"), float("inf"), float("-inf")], dtype=x.dtype)
    return x


def sample(shape, dtype, device="cpu"):
    if dtype == torch.bool:
        return torch.rand(shape, device=device) < 0.3
    if dtype == torch.int8:
        return torch.randint(-100, 100, shape, device=device, dtype=torch.int8)
    return with_specials(torch.randn(shape, device=device).to(dtype))


@settings(max_examples=8, deadline=None)
@given(st.sampled_from([p for n in (2, 3) for p in itertools.permutations(range(n)) if p != tuple(range(n))]),
       st.lists(st.integers(1, 40), min_size=3, max_size=3), st.sampled_from([torch.float16, torch.bfloat16,
                                                                              torch.float32, torch.int8]))
def test_cpu_every_permute_matches_torch(perm, sizes, dtype):
    x = sample(tuple(sizes[:len(perm)]), dtype)
    torch.testing.assert_close(bt.jit(permuted(perm), target="cpu")(x), permuted(perm)(x), equal_nan=True,
                               rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(8205, 4, 1024), (7, 2, 1000), (9, 4, 77), (5, 2, 999), (3, 4, 4100)])
def test_gpu_short_output_rows_match_torch(dtype, shape):
    x = sample(shape, dtype, "cuda")
    torch.testing.assert_close(bt.jit(permuted((0, 2, 1)), target="gpu")(x), permuted((0, 2, 1))(x),
                               equal_nan=True, rtol=0, atol=0)
    if dtype.is_floating_point:
        y = torch.randn(shape[0], shape[2], shape[1], device="cuda")
        torch.testing.assert_close(bt.jit(scaled_permute, target="gpu")(x, y), scaled_permute(x, y), equal_nan=True)


def sliced_permute(x, y):  # the staged rows start 3 elements into the source's rows
    return x[:, :, 3:1027].permute(0, 2, 1) * y


def sliced_transpose(x, y):
    return x[:, 1:129].T + y


@pytest.mark.skipif(not shutil.which("nvcc"), reason="nvcc not installed")
@pytest.mark.parametrize("fn, shapes", [(sliced_permute, [(17, 4, 1040), (17, 1024, 4)]),
                                        (sliced_transpose, [(300, 140), (128, 300)])])
def test_a_staged_read_at_an_odd_offset_is_loaded_in_aligned_pieces(fn, shapes):
    """A slice's start that whole vectors do not tile: smaller loads (a vector there was a misaligned
    access, or a make_uint4 of eight halves)."""
    k = compiled(fn, *[torch.empty(s, dtype=torch.float16) for s in shapes])
    assert [kernel.rule for kernel in k.fusion] == ["Tiled"], str(k.fusion)
    assert "make_uint4" not in k.source and nvcc_compiles(k.source)


@settings(max_examples=4, deadline=None)
@given(st.integers(0, 7), st.sampled_from([torch.float16, torch.float32]))
def test_cpu_sliced_permutes_match_torch(start, dtype):
    def f(x, y):
        return x[:, :, start:start + 40].permute(0, 2, 1) * y
    x, y = sample((5, 4, 50), dtype), sample((5, 40, 4), dtype)
    torch.testing.assert_close(bt.jit(f, target="cpu")(x, y), f(x, y), equal_nan=True)
