"""The CPU schedule's rewrites (babytriton/triton/compiler/cpu.py), each against torch where it applies
and where it must not: masks decided per vector at both ends of a linear condition (every lane, no lane,
lane by lane) or per lane (other conditions), adjacent element-wise nests fused (not where one writes
memory the other reads), pointer blocks advanced by a uniform step kept as an expression plus an offset
(not a non-uniform step), also where a modulo wraps them around, buffers on the stack; and the launch's grid forms (launcher.py)."""
from __future__ import annotations

import runpy
import textwrap

import pytest
import torch

SOURCE = textwrap.dedent('''
    import babytriton.triton as triton
    import babytriton.triton.language as tl

    @triton.jit
    def add(x_ptr, y_ptr, o_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=mask) + tl.load(y_ptr + offs, mask=mask), mask=mask)

    @triton.jit
    def every_third(x_ptr, o_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        keep = (offs % 3 == 0) & (offs < n)
        tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=keep, other=-1.0) * 2, mask=offs < n)

    @triton.jit
    def shift_right(p, n, BLOCK: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        x = tl.load(p + offs, mask=offs < n)
        tl.store(p + offs + 1, x, mask=offs + 1 < n)

    @triton.jit
    def strided_sums(x_ptr, o_ptr, BLOCK: tl.constexpr, STEPS: tl.constexpr):
        offs = tl.arange(0, BLOCK)
        ptrs = x_ptr + offs
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for _ in range(STEPS):
            acc += tl.load(ptrs)
            ptrs += offs          # a step of its own per element: stays a block of pointers
        tl.store(o_ptr + offs, acc)

    @triton.jit
    def row_sums(x_ptr, o_ptr, n_cols, stride, BLOCK: tl.constexpr):
        row = tl.program_id(0)
        ptrs = x_ptr + row * stride + tl.arange(0, BLOCK)
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for start in range(0, n_cols, BLOCK):
            cols = start + tl.arange(0, BLOCK)
            acc += tl.load(ptrs, mask=cols < n_cols, other=0.0)
            ptrs += BLOCK         # the same step for every element: an offset
        tl.store(o_ptr + row, tl.sum(acc, axis=0) / n_cols)

    @triton.jit
    def wrapped_sums(x_ptr, o_ptr, n, stride, STEPS: tl.constexpr, BLOCK: tl.constexpr):
        # columns that wrap around by a modulo (the tutorial matmul's `% N`), read through a pointer
        # block advanced by a uniform step and directly
        cols = (tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)) % n
        ptrs = x_ptr + cols
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for _ in range(STEPS):
            acc += tl.load(ptrs).to(tl.float32)
            ptrs += stride
        acc += tl.load(x_ptr + (cols + 3) % n).to(tl.float32)
        out = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        tl.store(o_ptr + out, acc, mask=out < n)

    @triton.jit
    def row_stats(x_ptr, o_ptr, n, stride, BLOCK: tl.constexpr):
        # a row loaded and reduced twice: each load fused into the reduction that follows it
        row = tl.program_id(0)
        cols = tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride + cols, mask=cols < n, other=-float("inf")).to(tl.float32)
        top = tl.max(x, axis=0)
        e = tl.exp(x - top)
        total = tl.sum(e, axis=0)
        tl.store(o_ptr + row * 3, top)
        tl.store(o_ptr + row * 3 + 1, total)
        tl.store(o_ptr + row * 3 + 2, tl.argmax(x, axis=0).to(tl.float32))
''')


@pytest.fixture(scope="module")
def k(tmp_path_factory):
    path = tmp_path_factory.mktemp("cpu_schedule") / "cpu_kernels.py"
    path.write_text(SOURCE)
    return runpy.run_path(str(path))


@pytest.mark.parametrize("n", [1, 37, 64, 200])
def test_masks_at_a_ragged_edge_in_each_kind_of_vector(k, n):
    # BLOCK 64 at n=37: lanes 0-31 all held, 32-47 some, 48-63 none
    x, y = torch.randn(n), torch.randn(n)
    out = torch.full((n,), float("nan"))
    k["add"][(triton_cdiv(n, 64),)](x, y, out, n, BLOCK=64)
    assert torch.equal(out, x + y)
    kernel = k["add"].warmup(x, y, out, n, BLOCK=64, grid=(1,))
    schedule = kernel.stages["schedule"]
    assert "held" not in schedule and "T.alloc_local((64,)" not in schedule   # decided at the ends, values fused
    assert "TVMBackendAllocWorkspace" not in kernel.source   # the program's buffers are on the stack


def test_a_mask_that_is_not_linear_is_decided_lane_by_lane(k):
    n = 70
    x = torch.randn(n)
    out = torch.empty(n)
    k["every_third"][(3,)](x, out, n, BLOCK=32)
    want = torch.where(torch.arange(n) % 3 == 0, x, torch.tensor(-1.0)) * 2
    assert torch.equal(out, want)


def test_a_store_to_memory_another_element_loads_is_not_fused(k):
    p = torch.arange(10, dtype=torch.float32)
    k["shift_right"][(1,)](p, 10, BLOCK=16)
    assert torch.equal(p, torch.cat([torch.zeros(1), torch.arange(9, dtype=torch.float32)]))


def test_pointer_blocks_by_a_uniform_step_and_by_their_own(k):
    block, steps = 16, 4
    x = torch.randn(block * block * steps)
    out = torch.empty(block)
    k["strided_sums"][(1,)](x, out, BLOCK=block, STEPS=steps)
    offs = torch.arange(block)
    torch.testing.assert_close(out, sum(x[offs * (s + 1)] for s in range(steps)))
    rows = torch.randn(5, 100)[:, :77]   # a row stride other than the width, a ragged last step
    means = torch.empty(5)
    k["row_sums"][(5,)](rows, means, 77, rows.stride(0), BLOCK=32)
    torch.testing.assert_close(means, rows.mean(1))
    kernel = k["row_sums"].warmup(rows, means, 77, rows.stride(0), BLOCK=32, grid=(5,))
    assert 'alloc_local((32,), "int64"' not in kernel.stages["schedule"]   # no block of pointers
    kernel = k["strided_sums"].warmup(x, out, BLOCK=block, STEPS=steps, grid=(1,))
    assert 'alloc_local((16,), "int64"' in kernel.stages["schedule"]


@pytest.mark.parametrize("n, block", [(64, 32), (77, 32), (40, 64), (5, 16), (300, 128)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_columns_wrapped_by_a_modulo(k, n, block, dtype):
    steps = 3
    x = torch.randn(steps, n + 7).to(dtype)   # a row stride other than the width
    out = torch.full((n,), float("nan"))
    k["wrapped_sums"][(triton_cdiv(n, block),)](x, out, n, x.stride(0), STEPS=steps, BLOCK=block)
    cols = torch.arange(n)
    want = x[:, :n].float().sum(0) + x[0, (cols + 3) % n].float()
    torch.testing.assert_close(out, want)
    kernel = k["wrapped_sums"].warmup(x, out, n, x.stride(0), STEPS=steps, BLOCK=block, grid=(1,))
    assert f'alloc_local(({block},), "int64"' not in kernel.stages["schedule"]   # no block of pointers


@pytest.mark.parametrize("n, block", [(1, 32), (31, 32), (32, 32), (100, 128), (1000, 1024), (64, 256)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_a_row_loaded_into_its_reductions(k, n, block, dtype):
    rows = 5
    x = torch.randn(rows, n + 3).to(dtype)
    x[1, n // 2] = float("inf") if n > 2 else x[1, 0]
    out = torch.empty(rows, 3)
    k["row_stats"][(rows,)](x, out, n, x.stride(0), BLOCK=block)
    v = x[:, :n].float()
    top = v.max(1).values
    torch.testing.assert_close(out[:, 0], top)
    torch.testing.assert_close(out[:, 1], torch.exp(v - top[:, None]).sum(1), equal_nan=True)
    assert torch.equal(out[:, 2], v.argmax(1).float())
    schedule = k["row_stats"].warmup(x, out, n, x.stride(0), BLOCK=block, grid=(rows,)).stages["schedule"]
    assert schedule.index("x_ptr[") > schedule.index("r_vec")   # the first load inside a reduction's loop


def triton_cdiv(a, b):
    return (a + b - 1) // b


@pytest.mark.parametrize("grid", [(2,), [2], (2, 1), (2, 1, 1), lambda meta: (triton_cdiv(meta["n"], 64),),
                                  lambda meta: 2])
def test_every_grid_form_launches_on_the_fast_path(k, grid):
    x, y = torch.randn(100), torch.randn(100)
    for _ in range(2):   # the second launch takes the fast path
        out = torch.zeros(100)
        k["add"][grid](x, y, out, 100, BLOCK=64)
        assert torch.equal(out, x + y)


def test_a_negative_grid_is_refused_on_the_fast_path_too(k):
    x = torch.randn(8)
    k["add"][(1,)](x, x, torch.empty(8), 8, BLOCK=64)
    with pytest.raises(ValueError, match="negative"):
        k["add"][(-1,)](x, x, torch.empty(8), 8, BLOCK=64)
    out = torch.full((8,), 3.0)
    k["add"][(0,)](x, x, out, 8, BLOCK=64)   # no programs: nothing runs
    assert torch.equal(out, torch.full((8,), 3.0))


@pytest.mark.parametrize("m, n, k_, blocks", [(64, 64, 64, (32, 32, 32)), (37, 50, 29, (16, 32, 16)),
                                              (70, 130, 40, (32, 64, 16)), (8, 8, 100, (16, 16, 32)),
                                              (40, 200, 24, (16, 128, 16)), (24, 300, 20, (16, 256, 16))])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_a_dot_of_narrow_tiles_reads_them_widened_once(m, n, k_, blocks, dtype):
    import kernels
    gen = torch.Generator().manual_seed(m * n)
    a, b = torch.randn(m, k_, generator=gen).to(dtype), torch.randn(k_, n, generator=gen).to(dtype)
    c = torch.full((m, n), float("nan"), dtype=torch.float16)
    bm, bn, bk = blocks
    grid = (triton_cdiv(m, bm) * triton_cdiv(n, bn),)
    args = (a, b, c, m, n, k_, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1))
    meta = dict(BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=2, ACTIVATION="")
    kernels.matmul_kernel.fn[grid](*args, **meta)
    want = a.float() @ b.float()
    torch.testing.assert_close(c.float(), want, atol=2e-2 * (1 + want.abs().max().item()), rtol=2e-2)
    schedule = kernels.matmul_kernel.fn.warmup(*args, **meta, grid=grid).stages["schedule"]
    narrow = "float16" if dtype == torch.float16 else "bfloat16"
    assert f'alloc_local(({bm}, {bk}), "{narrow}"' not in schedule   # the tiles converted where loaded
    assert f'alloc_local(({bk}, {bn}), "int64"' not in schedule       # B's `% N` columns read as vectors
