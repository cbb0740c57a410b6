"""`tl.dot` on tensor cores (babytriton/triton/compiler/mma.py): the fragment layout, the CUDA made for
sm_90 (mma.sync and ldmatrix for float16/bfloat16 dots, compiled by nvcc), the SIMT loop kept for the
rest, and, on a GPU, the results against torch at ragged sizes with masks."""
from __future__ import annotations

import functools
import pathlib
import re
import shutil
import subprocess
import tempfile

import pytest
import torch
import tvm
from hypothesis import given, settings, strategies as st

import babytriton.triton as triton
import babytriton.triton.language as tl
from babytriton.triton import compiler
from babytriton.triton.compiler import gpu, mma
from babytriton.triton.language import core
from nvcc_batch import assert_nvcc_compiles

SM90 = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})
SM75 = tvm.target.Target({"kind": "cuda", "arch": "sm_75"})
MODES = ["loop", "add", "scaled", "rowsum", "relu"]


@triton.jit
def dot_kernel(a_ptr, b_ptr, c_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
               BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr, MODE: tl.constexpr):
    rm = tl.program_id(0) * BM + tl.arange(0, BM)
    rn = tl.program_id(1) * BN + tl.arange(0, BN)
    rk = tl.arange(0, BK)
    acc = tl.zeros((BM, BN), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BK)):
        ks = k * BK + rk
        a = tl.load(a_ptr + rm[:, None] * stride_am + ks[None, :] * stride_ak,
                    mask=(rm[:, None] < M) & (ks[None, :] < K), other=0.0)
        b = tl.load(b_ptr + ks[:, None] * stride_bk + rn[None, :] * stride_bn,
                    mask=(ks[:, None] < K) & (rn[None, :] < N), other=0.0)
        if MODE == "add":
            acc += tl.dot(a, b)                  # a fresh product, added
        elif MODE == "scaled":
            acc = tl.dot(a, b, acc * 0.5)        # the accumulator is an expression, not acc's buffer
        else:
            acc = tl.dot(a, b, acc)              # accumulated in place
    if MODE == "rowsum":
        acc = acc + tl.sum(acc, axis=1)[:, None]   # read across the warps' fragments
    if MODE == "relu":
        acc = tl.where(acc > 0, acc, 0.0)
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn, acc, mask=(rm[:, None] < M) & (rn[None, :] < N))


def reference(a, b, block_k, mode):
    """What dot_kernel computes, with torch in float32."""
    a, b = a.float(), b.float()
    if mode != "scaled":
        c = a @ b
    else:
        c = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float32, device=a.device)
        for k in range(0, a.shape[1], block_k):
            c = c * 0.5 + a[:, k:k + block_k] @ b[k:k + block_k]
    if mode == "rowsum":
        c = c + c.sum(1, keepdim=True)
    if mode == "relu":
        c = torch.relu(c)
    return c


def run(a, b, out_dtype, bm, bn, bk, mode, num_warps):
    (m, k), n = a.shape, b.shape[1]
    c = torch.empty(m, n, dtype=out_dtype, device=a.device)
    dot_kernel[(triton.cdiv(m, bm), triton.cdiv(n, bn))](
        a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BM=bm, BN=bn, BK=bk, MODE=mode, num_warps=num_warps)
    return c


@functools.cache
def cuda(dtype: torch.dtype, bm: int, bn: int, bk: int, mode: str, num_warps: int, target=SM90) -> str:
    """dot_kernel's CUDA source for `target`, inputs of `dtype` and a float32 output: built once, for its
    test and for test_the_tensor_core_sources_compile_with_nvcc (one nvcc run for all of them)."""
    ptr = core.pointer_type(next(t for t in core.DTYPES if t.torch == dtype))
    names = ["M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm", "stride_cn"]
    signature = {"a_ptr": ptr, "b_ptr": ptr, "c_ptr": core.pointer_type(core.float32), **{n: core.int32 for n in names}}
    k = compiler.compile(dot_kernel, signature, {"BM": bm, "BN": bn, "BK": bk, "MODE": mode},
                         {"target": target, "num_warps": num_warps})
    return k.stages["source"]


# --- the layout ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("m, n, threads", [(32, 32, 128), (128, 256, 256), (64, 32, 64), (16, 8, 32), (48, 40, 32)])
def test_the_fragment_layout_gives_each_element_to_one_thread(m, n, threads):
    lay = mma.layout(m, n, threads)
    assert lay is not None and lay.warps_m * lay.warps_n * 32 == threads
    owner = {}
    for tx in range(threads):
        for it in range(lay.rounds):
            row, col = lay.at(it, tx)
            assert (row, col) not in owner
            owner[row, col] = (tx, it)
    assert set(owner) == {(r, c) for r in range(m) for c in range(n)}
    # the accumulator of mma.m16n8k16 (PTX ISA): lane l's registers 0-3 hold rows l/4, l/4 + 8, columns 2(l%4), +1
    assert owner[0, 0] == (0, 0) and owner[0, 1] == (0, 1) and owner[8, 0] == (0, 2) and owner[9, 3] == (5, 3)


@pytest.mark.parametrize("m, n, threads", [(16, 16, 128), (8, 64, 32), (32, 12, 32)])
def test_no_layout_for_blocks_that_are_not_whole_fragments_per_warp(m, n, threads):
    assert mma.layout(m, n, threads) is None


# --- the CUDA source (no GPU needed) ------------------------------------------------------------------

HALF_DTYPES = [torch.float16, torch.bfloat16]
TILE_SHAPES = [(128, 256, 64, 8), (64, 128, 32, 4), (16, 32, 16, 2), (32, 64, 16, 4), (16, 16, 16, 1), (16, 16, 16, 2)]


@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize("mode", MODES)
def test_half_dots_are_made_by_tensor_cores(dtype, mode):
    source = cuda(dtype, 32, 32, 32, mode, 4)
    kind = "bf16" if dtype == torch.bfloat16 else "f16"
    assert f"mma.sync.aligned.m16n8k16.row.col.f32.{kind}.{kind}.f32" in source
    assert "ldmatrix.sync.aligned.m8n8.x4.shared.b16" in source and "ldmatrix.sync.aligned.m8n8.x4.trans" in source


@pytest.mark.parametrize("bm, bn, bk, warps", TILE_SHAPES)
def test_tutorial_tile_shapes_use_tensor_cores_and_compile(bm, bn, bk, warps):
    """(nvcc compiles them: test_the_tensor_core_sources_compile_with_nvcc)"""
    source = cuda(torch.float16, bm, bn, bk, "loop", warps)
    assert "mma.sync.aligned.m16n8k16" in source


def test_a_large_tile_read_across_threads_builds():
    """128 x 256 in 8 warps: the operands past the static limit go to dynamic shared memory, the row
    sum's result (fewer elements than threads, written under `tx < 128`) stays static, where TVM's
    sync planner does not take it for part of the merged dynamic buffer it reads (no barrier in a
    condition)."""
    source = cuda(torch.float16, 128, 256, 64, "rowsum", 8)
    assert "mma.sync.aligned.m16n8k16" in source and "extern __shared__" in source


@functools.cache
def tutorial_matmul_source(bm, bn, bk, warps, ones=(), stages=3) -> str:
    """The tutorial matmul's CUDA for sm_90; `ones`: the int parameters specialised as 1 (equal_to_1);
    `stages`: num_stages (1: the K loop not pipelined)."""
    import kernels
    ptr = core.pointer_type(core.float16)
    names = ["M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm", "stride_cn"]
    signature = {"a_ptr": ptr, "b_ptr": ptr, "c_ptr": ptr, **{n: core.int32 for n in names}}
    k = compiler.compile(kernels.matmul_kernel.fn, signature, {"BLOCK_SIZE_M": bm, "BLOCK_SIZE_N": bn,
                         "BLOCK_SIZE_K": bk, "GROUP_SIZE_M": 8, "ACTIVATION": ""},
                         {"target": SM90, "num_warps": warps, "equal_to_1": tuple(ones), "num_stages": stages})
    return k.stages["source"]


UNIT_STRIDES = ("stride_ak", "stride_bn", "stride_cn")   # what a launch on contiguous tensors specialises


@pytest.mark.parametrize("extents, threads", [((128, 64), 256), ((64, 256), 128), ((16, 32), 64), ((32, 16), 256)])
def test_operand_runs_cover_each_element_once_and_neighbours_are_adjacent(extents, threads):
    runs = extents[0] * extents[1] // 8
    seen = {}
    for run in range(runs):
        start = gpu.run_start(list(extents), 8, run)
        for v in range(8):
            seen[start[0], start[1] + v] = run
        if run % (extents[1] // 8):   # a run after another in the same row starts where that one ends
            assert start == [gpu.run_start(list(extents), 8, run - 1)[0], gpu.run_start(list(extents), 8, run - 1)[1] + 8]
    assert set(seen) == {(r, c) for r in range(extents[0]) for c in range(extents[1])}


@pytest.mark.parametrize("bm, bn, bk, warps", [(128, 256, 64, 8), (64, 256, 32, 4), (128, 128, 32, 4), (32, 64, 32, 2)])
def test_tutorial_operands_are_copied_16_bytes_at_a_time(bm, bn, bk, warps):
    """With unit inner strides each thread copies its runs of 8 halves of the A and B tiles with one
    16-byte load each (element by element only at a ragged or misaligned run), all loaded before any
    is stored to shared memory, 16 bytes a store; the pointer blocks, advanced by one step for all
    their elements, are their expression plus one offset, not 64-bit registers per element (which
    spilled: 255 registers and 1.4 KB of local memory at 128 x 256 x 64). (num_stages=1: the K loop
    not pipelined, its copies through registers.)"""
    source = tutorial_matmul_source(bm, bn, bk, warps, UNIT_STRIDES, stages=1)
    loop = source[source.index("for (int k_iter"):source.index("ldmatrix")]
    threads = warps * 32
    assert loop.count("= *(uint4*)(a_ptr_ptr") == bm * bk // 8 // threads
    assert loop.count("= *(uint4*)(b_ptr_ptr") == bk * bn // 8 // threads
    stores = re.findall(r"\*\(uint4\*\)\((\(\(half\*\)buf_dyn_shmem_ptr\)|\w+) \+ [^;]*= \*\(uint4\*\)\(\w+_staged_ptr", loop)
    assert len(stores) == (bm * bk + bk * bn) // 8 // threads and "staged" not in "".join(stores)   # to shared memory
    assert "a_ptrs_1_own" not in source and "b_ptrs_2_own" not in source
    if shutil.which("nvcc"):
        with tempfile.TemporaryDirectory() as tmp:
            path = pathlib.Path(tmp, "k.cu")
            path.write_text(source)
            out = subprocess.run(["nvcc", "-arch=sm_90", "-cubin", "--resource-usage", "-o", str(path.with_suffix(".cubin")),
                                  str(path)], capture_output=True, text=True, check=True)
            assert "0 bytes spill stores" in out.stdout + out.stderr


# (128 x 256 x 64 at num_stages 5: 3 slots fit, the source of the pipelining test below, compiled once)
@pytest.mark.parametrize("bm, bn, bk, warps, stages", [(128, 256, 64, 8, 5), (64, 128, 32, 4, 1), (32, 64, 32, 2, 3)])
def test_what_the_k_loop_does_not_change_is_computed_before_it(bm, bn, bk, warps, stages):
    """Each operand run's start (the rows' `% M`, the columns' `% N`, the program's ids) and the check
    that its elements are consecutive (`(x + v) % N - x % N == v`) do not change with k: they are
    registers filled before the K loop, which adds the pointer's offset to the start and tests its
    alignment (nvcc had left the modulos in the loop: 1100 of the 1500 instructions a warp ran a
    step at 128 x 256 x 64)."""
    source = tutorial_matmul_source(bm, bn, bk, warps, UNIT_STRIDES, stages=stages)
    end = source.rindex("wait_group_0();") if stages > 1 else source.rindex("mma.sync")   # the K loop's end
    before, loop = source[:source.index("for (int k_iter")], source[source.index("for (int k_iter"):end]
    starts = re.findall(r"int64_t start\w* = (.*);", loop)
    checks = re.findall(r"bool whole\w* = (.*);", loop)
    assert len(starts) == len(checks) == (bm * bk + bk * bn) // 8 // (warps * 32)
    assert all(re.fullmatch(r"\(load_\d+(_slots)?_base_ptr\[\d+\] \+ (a|b)_ptrs_\d+_offset_ptr\[0\]\)", s) for s in starts)
    assert not any("%" in c or "/" in c for c in checks)
    assert re.search(r"load_4(_slots)?_contiguous_ptr\[0\] = ", before) and \
        re.search(r"load_3(_slots)?_base_ptr\[0\] = .*% M", before)


@pytest.mark.parametrize("bm, bn, bk, warps, stages, slots", [(128, 256, 64, 8, 5, 3), (64, 128, 32, 4, 4, 4),
                                                               (32, 64, 32, 2, 5, 5)])
def test_the_k_loop_is_pipelined_over_num_stages_slots(bm, bn, bk, warps, stages, slots):
    """num_stages slots of each operand tile (as many as fit 200 KB: 3 of 52 KB at 128 x 256 x 64):
    the copies of the first slots - 1 steps are issued before the K loop; each step waits for its
    own (cp.async.wait_group slots - 2), then one barrier (every thread's copies landed, every warp
    done with the slot about to be refilled), then the copies of the step slots - 1 ahead into that
    slot, one 16-byte cp.async a run with no registers between (the rest of a run by st.shared),
    while the warps multiply."""
    source = tutorial_matmul_source(bm, bn, bk, warps, UNIT_STRIDES, stages=stages)
    runs = (bm * bk + bk * bn) // 8 // (warps * 32)
    before, loop = source[:source.index("for (int k_iter")], source[source.index("for (int k_iter"):]
    body = loop[:loop.rindex("wait_group_0();")]   # none in flight past the loop
    copy = "tvm_builtin_ptx_cp_async_cg_async_cg_shared_global_16("
    assert before.count(copy) - 1 == runs * (slots - 1) and body.count(copy) == runs   # - its definition
    assert body.index(f"wait_group_{slots - 2}();") < body.index("__syncthreads();") < body.index("mma.sync") < \
        body.index(copy)   # the copies spread among the product's steps (after the first), not all before it
    slot = f"(k_iter + {slots - 1}) & {slots - 1}" if slots & (slots - 1) == 0 else f"(k_iter + {slots - 1}) % {slots}"
    assert slot in body and "uint4" not in body and "staged" not in source
    # one barrier a step: the copies are no accesses to TVM's sync planner, which would add one before the dot
    assert body.count("__syncthreads()") == 1


@settings(max_examples=4, deadline=None)
@given(tile=st.sampled_from([(16, 32, 16, 1), (32, 32, 32, 2), (64, 64, 32, 4), (64, 32, 64, 2), (32, 128, 16, 4)]),
       stages=st.integers(1, 6))
def test_pipelined_dots_at_generated_tiles_and_stages(tile, stages):
    """Any tile and num_stages: the K loop issues one cp.async a 16-byte run of the step stages - 1
    ahead, into slot (k + stages - 1) % stages, and waits until stages - 2 groups are in flight
    (num_stages 1: copies through registers, no cp.async). (On the GPU: the tests below.)"""
    bm, bn, bk, warps = tile
    ptr = core.pointer_type(core.float16)
    names = ["M", "N", "K", "stride_am", "stride_ak", "stride_bk", "stride_bn", "stride_cm", "stride_cn"]
    signature = {"a_ptr": ptr, "b_ptr": ptr, "c_ptr": core.pointer_type(core.float32), **{x: core.int32 for x in names}}
    source = compiler.compile(dot_kernel, signature, {"BM": bm, "BN": bn, "BK": bk, "MODE": "loop"},
                              {"target": SM90, "num_warps": warps, "num_stages": stages}).stages["source"]
    loop = source[source.index("for (int k_iter"):]
    body = loop[:loop.rindex("wait_group_0();") if stages > 1 else loop.rindex("mma.sync")]   # to the loop's end
    copy = "tvm_builtin_ptx_cp_async_cg_async_cg_shared_global_16("
    rounds = sum(-(-tile_elements // 8 // (warps * 32)) for tile_elements in (bm * bk, bk * bn))   # a thread's runs
    assert body.count(copy) == (rounds if stages > 1 else 0)
    assert (f"wait_group_{stages - 2}();" in body) == (stages > 1)
    if stages > 2:
        assert re.search(rf"\(k_iter \+ {stages - 1}\) (% {stages}|& {stages - 1})\)", body)


def test_which_k_loops_are_pipelined():
    """Every mode of dot_kernel's K loop is pipelined (`acc += tl.dot(a, b)`: a temporary product,
    added after the dot; `tl.dot(a, b, acc * 0.5)`: the dot's own init); flash attention's is not
    (two dots with a softmax between: its body is more than fills, one dot and what follows it)."""
    copy = "tvm_builtin_ptx_cp_async_cg_async_cg_shared_global_16("
    for mode in MODES:
        assert copy in cuda(torch.float16, 32, 32, 32, mode, 4), mode
    assert copy not in flash_attention_source(torch.float16) and "mma.sync" in flash_attention_source(torch.float16)


def test_operand_copies_check_the_pointers_alignment_too():
    """torch passes a view by its first element's address (no element offset), which may be off a
    16-byte boundary (`a[:, 1:]` of float16): each run's 16-byte load then needs the tensor's pointer
    aligned as well as the run's start, or the load faults (misaligned address)."""
    source = tutorial_matmul_source(64, 128, 32, 4, UNIT_STRIDES)
    checks = re.findall(r"bool whole\w* = (.*);", source)
    assert checks and all(re.search(r"reinterpret_cast<uint64_t>\((a|b)_ptr_ptr\) & \(uint64_t\)15ULL", c) for c in checks)
    assert {re.search(r"\((a|b)_ptr_ptr\)", c).group(1) for c in checks} == {"a", "b"}


@triton.jit
def advance_kernel(x_ptr, y_ptr, n, B: tl.constexpr, UNIFORM: tl.constexpr):
    offs = tl.arange(0, B)
    ptrs = x_ptr + offs
    total = tl.zeros((B,), dtype=tl.float32)
    for _ in range(0, n):
        total += tl.load(ptrs)
        if UNIFORM:
            ptrs += 2
        else:
            ptrs += offs + 1             # element i steps by i + 1: not one advance for all
    tl.store(y_ptr + offs, total)


def test_the_accumulator_stays_in_registers_across_the_k_loop():
    """acc = tl.dot(a, b, acc): the mma's accumulator is the thread's own registers of acc, which the
    zero-fill and the store use too: acc never goes to shared memory."""
    source = cuda(torch.float16, 64, 64, 32, "loop", 4)
    assert "acc_0_own" in source and "__shared__ alignas(64) float" not in source
    assert '"=f"(((float *)(acc_0_own_ptr' in source


@pytest.mark.parametrize("mode", MODES)
def test_every_mma_accumulates_in_registers(mode):
    """Whatever else reads the accumulator (a row sum reads across the warps' fragments), the
    instruction's accumulator is registers; a reader across threads gets a shared copy, made after
    the K loop, not in it."""
    source = cuda(torch.float16, 32, 64, 16, mode, 4)
    accumulators = re.findall(r'"=f"\(\(\(float \*\)\((\w+)_ptr', source)
    assert accumulators and all(name.endswith("_own") for name in accumulators)
    loop = source[source.index("for (int k_iter"):source.rindex("mma.sync")]   # the K loop, to its last mma
    assert ("__shared__ alignas(64) float" in source) == (mode == "rowsum")
    assert "ldmatrix" in loop and not re.search(r"\bacc_\d+_ptr\[", loop)   # no shared accumulator in the loop


@functools.cache
def flash_attention_source(dtype: torch.dtype) -> str:
    """The flash-attention kernel's CUDA for sm_90 (D 32, 64 x 32 blocks, 4 warps): built once."""
    import kernels
    ptr = core.pointer_type(next(t for t in core.DTYPES if t.torch == dtype))
    signature = {"q_ptr": ptr, "k_ptr": ptr, "v_ptr": ptr, "o_ptr": ptr, "seq_len": core.int32, "scale": core.float32}
    k = compiler.compile(kernels.flash_attention_kernel, signature, {"D": 32, "BLOCK_M": 64, "BLOCK_N": 32},
                         {"target": SM90, "num_warps": 4})
    return k.stages["source"]


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_flash_attention_runs_both_products_on_tensor_cores(dtype):
    """q k^T (k transposed: a view, copied to its own tile), read across threads by the row max and
    in registers by the exponent, then p v accumulated in registers with its rescaling."""
    source = flash_attention_source(dtype)
    assert source.count("mma.sync.aligned.m16n8k16") >= 2
    assert all(name.endswith("_own") for name in re.findall(r'"=f"\(\(\(float \*\)\((\w+)_ptr', source))


@pytest.mark.skipif(not shutil.which("nvcc"), reason="needs nvcc")
def test_the_tensor_core_sources_compile_with_nvcc():
    """nvcc accepts the CUDA of the tests above (the half dots of every mode, the tutorial's tile shapes,
    the large tile, flash attention): one nvcc run for all of them (tests/nvcc_batch.py)."""
    builds = {**{f"half dot {dtype} {mode}": (cuda, (dtype, 32, 32, 32, mode, 4)) for dtype in HALF_DTYPES for mode in MODES},
              **{f"tile {shape}": (cuda, (torch.float16, *shape[:3], "loop", shape[3])) for shape in TILE_SHAPES},
              "large tile": (cuda, (torch.float16, 128, 256, 64, "rowsum", 8)),
              **{f"flash attention {dtype}": (flash_attention_source, (dtype,)) for dtype in HALF_DTYPES}}
    assert_nvcc_compiles([build(*args) for build, args in builds.values()], list(builds))


@pytest.mark.parametrize("case", [(torch.float32, 32, 32, 32, 4, SM90), (torch.float16, 16, 16, 16, 4, SM90),
                                  (torch.float16, 32, 32, 32, 4, SM75)],
                         ids=["float32-operands", "tile-smaller-than-the-warps", "sm_75"])
def test_other_dots_keep_the_simt_loop(case):
    dtype, bm, bn, bk, warps, target = case
    source = cuda(dtype, bm, bn, bk, "loop", warps, target)
    assert "mma.sync" not in source and "ldmatrix" not in source and "__global__" in source


# --- on the GPU ---------------------------------------------------------------------------------------

CONFIGS = [(32, 32, 32, 4), (16, 32, 16, 2), (64, 128, 32, 4), (128, 64, 32, 4), (128, 256, 64, 8), (16, 16, 16, 1),
           (16, 16, 16, 2), (16, 16, 16, 4)]


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("config", CONFIGS, ids=["x".join(map(str, c)) for c in CONFIGS])
def test_dot_on_gpu_agrees_with_torch_at_ragged_sizes(dtype, mode, config):
    bm, bn, bk, warps = config
    gen = torch.Generator().manual_seed(bm + bn + bk)
    m, n, k = 2 * bm + 5, (bn + 3 if mode == "rowsum" else 2 * bn + 7), 3 * bk - 5   # rowsum: one block of columns
    if mode == "rowsum":
        n = min(n, bn)
    a = torch.randn(m, k, generator=gen).to(dtype).cuda()
    b = torch.randn(k, n, generator=gen).to(dtype).cuda()
    got = run(a, b, torch.float32, bm, bn, bk, mode, warps)
    want = reference(a, b, bk, mode)
    torch.testing.assert_close(got, want, atol=1e-2 * (1 + want.abs().max().item()) / 10, rtol=1e-3)


@pytest.mark.gpu
def test_dot_on_gpu_with_special_values_and_transposed_views():
    a = torch.randn(70, 96, device="cuda", dtype=torch.float16)
    b = torch.randn(40, 96, device="cuda", dtype=torch.float16).t()   # a strided view: K x N, column major
    a[3, 5], a[10, 7], b[2, 9] = float("inf"), float("nan"), float("-inf")
    got = run(a, b, torch.float32, 64, 32, 32, "loop", 4)
    torch.testing.assert_close(got, a.float() @ b.float(), atol=1e-2, rtol=1e-3, equal_nan=True)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("seq_len", [37, 200])
def test_flash_attention_on_gpu_with_tensor_cores(dtype, seq_len):
    import kernels
    gen = torch.Generator().manual_seed(seq_len)
    q, k, v = (torch.randn(seq_len, 32, generator=gen).to(dtype).cuda() for _ in range(3))
    o = torch.empty_like(q)
    kernels.flash_attention_kernel[(triton.cdiv(seq_len, 64),)](q, k, v, o, seq_len, 32 ** -0.5, D=32, BLOCK_M=64,
                                                                BLOCK_N=32, num_warps=4)
    want = kernels.flash_attention_ref(q, k, v)
    torch.testing.assert_close(o.float(), want.float(), atol=2e-2, rtol=2e-2)


@pytest.mark.gpu
def test_tutorial_matmul_on_gpu_with_tensor_core_configs():
    import kernels
    a = torch.randn(1000, 777, device="cuda", dtype=torch.float16)
    b = torch.randn(777, 555, device="cuda", dtype=torch.float16)
    fn = kernels.matmul_kernel.fn
    for bm, bn, bk, warps in [(128, 256, 64, 8), (64, 128, 32, 4), (128, 64, 32, 4)]:
        c = torch.empty(1000, 555, device="cuda", dtype=torch.float16)
        grid = (triton.cdiv(1000, bm) * triton.cdiv(555, bn),)
        fn[grid](a, b, c, 1000, 555, 777, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                 c.stride(1), BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=8,
                 ACTIVATION="leaky_relu", num_warps=warps)
        torch.testing.assert_close(c, kernels.matmul_ref(a, b, "leaky_relu"), atol=5e-2, rtol=1e-2)


@pytest.mark.gpu
@settings(max_examples=30, deadline=None)
@given(m=st.integers(1, 300), n=st.integers(1, 300), k=st.integers(1, 200), shift=st.integers(0, 9),
       config=st.sampled_from([(128, 256, 64, 8), (64, 128, 32, 4), (32, 64, 32, 2)]))
def test_tutorial_matmul_on_gpu_at_generated_sizes_and_offsets(m, n, k, shift, config):
    """The 16-byte operand copies (on a unit stride) against torch where runs are whole, ragged (K,
    N not multiples of 8, `% N` wrapping a run) and misaligned (views starting `shift` elements in)."""
    import kernels
    bm, bn, bk, warps = config
    gen = torch.Generator().manual_seed(m * 7 + n * 5 + k * 3 + shift)
    a = torch.randn(m, k + shift, generator=gen).half().cuda()[:, shift:]
    b = torch.randn(k, n + shift, generator=gen).half().cuda()[:, shift:]
    c = torch.empty(m, n, device="cuda", dtype=torch.float16)
    kernels.matmul_kernel.fn[(triton.cdiv(m, bm) * triton.cdiv(n, bn),)](
        a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0), c.stride(1),
        BLOCK_SIZE_M=bm, BLOCK_SIZE_N=bn, BLOCK_SIZE_K=bk, GROUP_SIZE_M=8, ACTIVATION="", num_warps=warps)
    torch.testing.assert_close(c, kernels.matmul_ref(a, b), atol=5e-2, rtol=1e-2)


@pytest.mark.gpu
@pytest.mark.parametrize("uniform", [True, False])
def test_advanced_pointer_blocks_on_gpu(uniform):
    n, width = 7, 64
    x = torch.randn(width * (n + 1), device="cuda")
    y = torch.empty(width, device="cuda")
    advance_kernel[(1,)](x, y, n, B=width, UNIFORM=uniform, num_warps=1)
    i = torch.arange(width, device="cuda")
    step = torch.full_like(i, 2) if uniform else i + 1
    want = sum(x[i + j * step] for j in range(n))
    torch.testing.assert_close(y, want)


@pytest.mark.parametrize("halves, scopes", [
    ((16896, 9216), ("shared.dyn", "shared.dyn")),          # 33 KB + 18 KB: both dynamic, 51 KB opted in
    ((65536, 16896, 9216, 256), ("shared.dyn", "shared.dyn", "shared", "shared")),  # 128 KB + 33 KB moved
    ((9216, 4096), ("shared", "shared")),                   # 26 KB: all static
])
def test_shared_memory_past_48_kb_is_launchable(halves, scopes):
    """Static shared memory stays within 48 KB, and past 48 KB in all, the dynamic part is at least 48 KB:
    TVM's launcher opts a kernel in to more shared memory only then (33 KB dynamic beside 18 KB static
    failed at the launch with CUDA_ERROR_INVALID_VALUE on an H200)."""
    from tvm import tirx

    from babytriton.triton.compiler import gpu
    buffers = [tirx.decl_buffer((n,), "float16", f"b{i}", scope="shared") for i, n in enumerate(halves)]
    body = gpu._dynamic_shared_if_large(tirx.SeqStmt([tirx.AllocBuffer(b) for b in buffers] + [tirx.Evaluate(0)]))
    assert tuple(s.buffer.ty.storage_scope for s in body.seq if isinstance(s, tirx.AllocBuffer)) == scopes
