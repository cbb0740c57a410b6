"""The twelve Triton-Puzzles (https://github.com/srush/Triton-Puzzles, by Sasha Rush and contributors,
MIT licence; maintained at https://github.com/gpu-mode/Triton-Puzzles), solved in Triton's language: each
puzzle's torch specification, restated here for any size, beside a kernel with the puzzle's own
signature. The statements, signatures, sizes and block sizes are the repository's (puzzle 9 at the
maintained copy's B0 = 64: the original's 200 is no power of two, which Triton's `tl.arange` refuses, as
ours does); the solutions and the prose are ours.

A kernel is written as a Triton user would write it for Triton: it reads only `triton` and
`triton.language` (here `babytriton.triton`), guards every ragged edge with a mask, and takes its sizes
from the puzzle's `nelem` arguments. `PUZZLES` lists each with the shapes of its tensors as functions of
those sizes, the sizes and block sizes the repository tests it at, and ragged sizes of our own.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

import babytriton.triton as triton
import babytriton.triton.language as tl

# ----------------------------------------------------------------------------------------------------
# Puzzle 1: constant add. One program whose block `B0` covers all of `x` (N0 == B0).


def add_spec(x):
    return x + 10.0


@triton.jit
def add_kernel(x_ptr, z_ptr, N0, B0: tl.constexpr):
    range = tl.arange(0, B0)   # the puzzle's own first lines, `range` shadowing Python's in the kernel
    x = tl.load(x_ptr + range)
    tl.store(z_ptr + range, x + 10.0)


# ----------------------------------------------------------------------------------------------------
# Puzzle 2: constant add over blocks. `B0` is smaller than N0: a program per block, the last one masked.


def add2_spec(x):
    return x + 10.0


@triton.jit
def add_mask2_kernel(x_ptr, z_ptr, N0, B0: tl.constexpr):
    offs = tl.program_id(0) * B0 + tl.arange(0, B0)
    mask = offs < N0
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(z_ptr + offs, x + 10.0, mask=mask)


# ----------------------------------------------------------------------------------------------------
# Puzzle 3: outer vector add, z[j, i] = x[i] + y[j], in a single program (B0 == N0, B1 == N1).


def add_vec_spec(x, y):
    return x[None, :] + y[:, None]


@triton.jit
def add_vec_kernel(x_ptr, y_ptr, z_ptr, N0, N1, B0: tl.constexpr, B1: tl.constexpr):
    i = tl.arange(0, B0)
    j = tl.arange(0, B1)
    x = tl.load(x_ptr + i)
    y = tl.load(y_ptr + j)
    tl.store(z_ptr + j[:, None] * N0 + i[None, :], x[None, :] + y[:, None])


# ----------------------------------------------------------------------------------------------------
# Puzzle 4: outer vector add over a 2-D grid of B1 x B0 tiles, masked along both edges.


def add_vec_block_spec(x, y):
    return x[None, :] + y[:, None]


@triton.jit
def add_vec_block_kernel(x_ptr, y_ptr, z_ptr, N0, N1, B0: tl.constexpr, B1: tl.constexpr):
    pid_0 = tl.program_id(0)
    pid_1 = tl.program_id(1)
    i = pid_0 * B0 + tl.arange(0, B0)
    j = pid_1 * B1 + tl.arange(0, B1)
    x = tl.load(x_ptr + i, mask=i < N0)
    y = tl.load(y_ptr + j, mask=j < N1)
    mask = (j[:, None] < N1) & (i[None, :] < N0)
    tl.store(z_ptr + j[:, None] * N0 + i[None, :], x[None, :] + y[:, None], mask=mask)


# ----------------------------------------------------------------------------------------------------
# Puzzle 5: fused outer multiplication and relu, z[j, i] = relu(x[i] * y[j]).


def mul_relu_block_spec(x, y):
    return torch.relu(x[None, :] * y[:, None])


@triton.jit
def mul_relu_block_kernel(x_ptr, y_ptr, z_ptr, N0, N1, B0: tl.constexpr, B1: tl.constexpr):
    pid_0 = tl.program_id(0)
    pid_1 = tl.program_id(1)
    i = pid_0 * B0 + tl.arange(0, B0)
    j = pid_1 * B1 + tl.arange(0, B1)
    x = tl.load(x_ptr + i, mask=i < N0)
    y = tl.load(y_ptr + j, mask=j < N1)
    z = tl.maximum(x[None, :] * y[:, None], 0.0)
    mask = (j[:, None] < N1) & (i[None, :] < N0)
    tl.store(z_ptr + j[:, None] * N0 + i[None, :], z, mask=mask)


# ----------------------------------------------------------------------------------------------------
# Puzzle 6: the backward of z = relu(x * y[:, None]) with respect to the matrix x, given dz. relu's
# derivative is taken as torch takes it: 0 where the product is not positive (0 included).


def mul_relu_block_back_spec(x, y, dz):
    x = x.clone().requires_grad_(True)
    torch.relu(x * y[:, None]).backward(dz)
    return x.grad


@triton.jit
def mul_relu_block_back_kernel(x_ptr, y_ptr, dz_ptr, dx_ptr, N0, N1, B0: tl.constexpr, B1: tl.constexpr):
    pid_0 = tl.program_id(0)
    pid_1 = tl.program_id(1)
    i = pid_0 * B0 + tl.arange(0, B0)
    j = pid_1 * B1 + tl.arange(0, B1)
    mask = (j[:, None] < N1) & (i[None, :] < N0)
    at = j[:, None] * N0 + i[None, :]
    x = tl.load(x_ptr + at, mask=mask)
    y = tl.load(y_ptr + j, mask=j < N1)
    dz = tl.load(dz_ptr + at, mask=mask)
    dx = tl.where(x * y[:, None] > 0, dz * y[:, None], 0.0)
    tl.store(dx_ptr + at, dx, mask=mask)


# ----------------------------------------------------------------------------------------------------
# Puzzle 7: long sum. Each program sums B0 rows of length T, B1 columns at a time.


def sum_spec(x):
    return x.sum(1)


@triton.jit
def sum_kernel(x_ptr, z_ptr, N0, N1, T, B0: tl.constexpr, B1: tl.constexpr):
    rows = tl.program_id(0) * B0 + tl.arange(0, B0)
    acc = tl.zeros([B0, B1], dtype=tl.float32)
    for start in range(0, T, B1):
        cols = start + tl.arange(0, B1)
        mask = (rows[:, None] < N0) & (cols[None, :] < T)
        acc += tl.load(x_ptr + rows[:, None] * T + cols[None, :], mask=mask, other=0.0)
    tl.store(z_ptr + rows, tl.sum(acc, axis=1), mask=rows < N0)


# ----------------------------------------------------------------------------------------------------
# Puzzle 8: long softmax of rows of length T, B1 columns at a time, with exp2. Two passes: the first keeps
# a running maximum and a sum of exponentials rescaled whenever the maximum grows (the "clever" variant
# the puzzle hints at), the second writes exp(x - max) / sum.


def softmax_spec(x):
    x_max = x.max(1, keepdim=True)[0]
    x_exp = (x - x_max).exp()
    return x_exp / x_exp.sum(1, keepdim=True)


@triton.jit
def softmax_kernel(x_ptr, z_ptr, N0, N1, T, B0: tl.constexpr, B1: tl.constexpr):
    pid_0 = tl.program_id(0)
    log2_e = 1.44269504
    rows = pid_0 * B0 + tl.arange(0, B0)
    row_ok = rows[:, None] < N0
    m = tl.full([B0], -float("inf"), tl.float32)
    s = tl.zeros([B0], dtype=tl.float32)
    for start in range(0, T, B1):
        cols = start + tl.arange(0, B1)
        mask = row_ok & (cols[None, :] < T)
        x = tl.load(x_ptr + rows[:, None] * T + cols[None, :], mask=mask, other=-float("inf"))
        m_new = tl.maximum(m, tl.max(x, axis=1))
        # a row with nothing finite yet keeps m_new == -inf: its terms are 0, not exp2(nan)
        safe = tl.where(m_new == -float("inf"), 0.0, m_new)
        p = tl.exp2((x - safe[:, None]) * log2_e)
        s = s * tl.exp2((m - safe) * log2_e) + tl.sum(p, axis=1)
        m = m_new
    for start in range(0, T, B1):
        cols = start + tl.arange(0, B1)
        mask = row_ok & (cols[None, :] < T)
        x = tl.load(x_ptr + rows[:, None] * T + cols[None, :], mask=mask)
        z = tl.exp2((x - m[:, None]) * log2_e) / s[:, None]
        tl.store(z_ptr + rows[:, None] * T + cols[None, :], z, mask=mask)


# ----------------------------------------------------------------------------------------------------
# Puzzle 9: a scalar flash attention, z[i] = sum_j softmax_j(q[i] k[j]) v[j]: a block of B0 queries per
# program, the keys and values B0 at a time with an online softmax (one loop, no T x T scores kept).


def flashatt_spec(q, k, v):
    x = q[:, None] * k[None, :]
    x_exp = (x - x.max(1, keepdim=True)[0]).exp()
    soft = x_exp / x_exp.sum(1, keepdim=True)
    return (v[None, :] * soft).sum(1)


@triton.jit
def flashatt_kernel(q_ptr, k_ptr, v_ptr, z_ptr, N0, T, B0: tl.constexpr):
    log2_e = 1.44269504
    rows = tl.program_id(0) * B0 + tl.arange(0, B0)
    q = tl.load(q_ptr + rows, mask=rows < N0, other=0.0)
    m = tl.full([B0], -float("inf"), tl.float32)
    s = tl.zeros([B0], dtype=tl.float32)
    acc = tl.zeros([B0], dtype=tl.float32)
    for start in range(0, T, B0):
        cols = start + tl.arange(0, B0)
        k = tl.load(k_ptr + cols, mask=cols < T, other=0.0)
        v = tl.load(v_ptr + cols, mask=cols < T, other=0.0)
        x = tl.where(cols[None, :] < T, q[:, None] * k[None, :], -float("inf"))
        m_new = tl.maximum(m, tl.max(x, axis=1))
        p = tl.exp2((x - m_new[:, None]) * log2_e)
        alpha = tl.exp2((m - m_new) * log2_e)
        s = s * alpha + tl.sum(p, axis=1)
        acc = acc * alpha + tl.sum(p * v[None, :], axis=1)
        m = m_new
    tl.store(z_ptr + rows, acc / s, mask=rows < N0)


# ----------------------------------------------------------------------------------------------------
# Puzzle 10: a batched 2-D convolution (cross-correlation) of H x W single-channel images with a KH x KW
# kernel, the image padded with zeros past its bottom and right edges so the output keeps its size.


def conv2d_spec(x, k):
    n, h, w = x.shape
    kh, kw = k.shape
    padded = torch.nn.functional.pad(x, (0, kw, 0, kh))
    z = torch.zeros(n, h, w, dtype=x.dtype)
    for i in range(h):
        for j in range(w):
            z[:, i, j] = (k[None, :, :] * padded[:, i:i + kh, j:j + kw]).sum(1).sum(1)
    return z


@triton.jit
def conv2d_kernel(x_ptr, k_ptr, z_ptr, N0, H, W, KH: tl.constexpr, KW: tl.constexpr, B0: tl.constexpr):
    pid_0 = tl.program_id(0)
    b = pid_0 * B0 + tl.arange(0, B0)
    di = tl.arange(0, KH)
    dj = tl.arange(0, KW)
    k = tl.load(k_ptr + di[:, None] * KW + dj[None, :])
    for i in range(0, H):
        for j in range(0, W):
            rows = i + di[None, :, None]
            cols = j + dj[None, None, :]
            mask = (b[:, None, None] < N0) & (rows < H) & (cols < W)
            x = tl.load(x_ptr + b[:, None, None] * H * W + rows * W + cols, mask=mask, other=0.0)
            z = tl.sum(tl.sum(x * k[None, :, :], axis=2), axis=1)
            tl.store(z_ptr + b * H * W + i * W + j, z, mask=b < N0)


# ----------------------------------------------------------------------------------------------------
# Puzzle 11: a batched matrix multiplication z[b] = x[b] @ y[b], a B0 x B1 tile of B2 batches per
# program, the middle dimension B_MID at a time through tl.dot.


def dot_spec(x, y):
    return x @ y


@triton.jit
def dot_kernel(x_ptr, y_ptr, z_ptr, N0, N1, N2, MID, B0: tl.constexpr, B1: tl.constexpr, B2: tl.constexpr,
               B_MID: tl.constexpr):
    pid_0 = tl.program_id(0)
    pid_1 = tl.program_id(1)
    pid_2 = tl.program_id(2)
    rows = pid_0 * B0 + tl.arange(0, B0)
    cols = pid_1 * B1 + tl.arange(0, B1)
    for b in tl.static_range(B2):
        batch = pid_2 * B2 + b
        acc = tl.zeros([B0, B1], dtype=tl.float32)
        for start in range(0, MID, B_MID):
            mids = start + tl.arange(0, B_MID)
            x_mask = (batch < N2) & (rows[:, None] < N0) & (mids[None, :] < MID)
            y_mask = (batch < N2) & (mids[:, None] < MID) & (cols[None, :] < N1)
            x = tl.load(x_ptr + batch * N0 * MID + rows[:, None] * MID + mids[None, :], mask=x_mask, other=0.0)
            y = tl.load(y_ptr + batch * MID * N1 + mids[:, None] * N1 + cols[None, :], mask=y_mask, other=0.0)
            acc = tl.dot(x, y, acc)
        z_mask = (batch < N2) & (rows[:, None] < N0) & (cols[None, :] < N1)
        tl.store(z_ptr + batch * N0 * N1 + rows[:, None] * N1 + cols[None, :], acc, mask=z_mask)


@triton.jit
def dot_batched_kernel(x_ptr, y_ptr, z_ptr, N0, N1, N2, MID, B0: tl.constexpr, B1: tl.constexpr,
                       B2: tl.constexpr, B_MID: tl.constexpr):
    """Puzzle 11 again, the B2 batches of a program at once: rank-3 blocks and a batched tl.dot."""
    pid_0 = tl.program_id(0)
    pid_1 = tl.program_id(1)
    pid_2 = tl.program_id(2)
    batch = (pid_2 * B2 + tl.arange(0, B2))[:, None, None]
    rows = (pid_0 * B0 + tl.arange(0, B0))[None, :, None]
    cols = (pid_1 * B1 + tl.arange(0, B1))[None, None, :]
    acc = tl.zeros([B2, B0, B1], dtype=tl.float32)
    for start in range(0, MID, B_MID):
        mids = start + tl.arange(0, B_MID)
        x_mask = (batch < N2) & (rows < N0) & (mids[None, None, :] < MID)
        y_mask = (batch < N2) & (mids[None, :, None] < MID) & (cols < N1)
        x = tl.load(x_ptr + batch * N0 * MID + rows * MID + mids[None, None, :], mask=x_mask, other=0.0)
        y = tl.load(y_ptr + batch * MID * N1 + mids[None, :, None] * N1 + cols, mask=y_mask, other=0.0)
        acc = tl.dot(x, y, acc)
    tl.store(z_ptr + batch * N0 * N1 + rows * N1 + cols, acc, mask=(batch < N2) & (rows < N0) & (cols < N1))


# ----------------------------------------------------------------------------------------------------
# Puzzle 12: a quantised matrix multiplication. Row j of the weight holds MID 4-bit values, FPINT to an
# int32 (value l in bits 4 * (l % FPINT) of word l // FPINT); each GROUP of consecutive values shares a
# float scale and a 4-bit shift, the shifts of a row packed into one int32 of `offset` (group g in bits
# 4 * g). z = (scale * (weight - shift)) @ activation.

FPINT = tl.constexpr(32 // 4)
GROUP = tl.constexpr(8)


def _nibbles(words, count):
    """The `count` 4-bit values of each int32 in `words`, lowest bits first (a new last dimension)."""
    return (words[..., None] >> (torch.arange(count) * 4)) & 0xF


def quant_dot_spec(scale, offset, weight, activation):
    fpint, group = FPINT.value, GROUP.value
    rows, mid = weight.shape[0], activation.shape[0]
    values = _nibbles(weight, fpint).reshape(rows, -1)[:, :mid]
    shifts = _nibbles(offset, mid // group).repeat_interleave(group, dim=1)
    return (scale.repeat_interleave(group, dim=1) * (values - shifts)) @ activation


@triton.jit
def quant_dot_kernel(scale_ptr, offset_ptr, weight_ptr, activation_ptr, z_ptr, N0, N1, MID, B0: tl.constexpr,
                     B1: tl.constexpr, B_MID: tl.constexpr):
    pid_0 = tl.program_id(0)
    pid_1 = tl.program_id(1)
    rows = pid_0 * B0 + tl.arange(0, B0)
    cols = pid_1 * B1 + tl.arange(0, B1)
    shifts = tl.load(offset_ptr + rows, mask=rows < N0, other=0)
    acc = tl.zeros([B0, B1], dtype=tl.float32)
    for start in range(0, MID, B_MID):
        mids = start + tl.arange(0, B_MID)
        mask = (rows[:, None] < N0) & (mids[None, :] < MID)
        words = tl.load(weight_ptr + rows[:, None] * (MID // FPINT) + mids[None, :] // FPINT, mask=mask, other=0)
        w = (words >> (mids[None, :] % FPINT * 4)) & 0xF
        group = mids[None, :] // GROUP
        shift = (shifts[:, None] >> (group * 4)) & 0xF
        sc = tl.load(scale_ptr + rows[:, None] * (MID // GROUP) + group, mask=mask, other=0.0)
        a_mask = (mids[:, None] < MID) & (cols[None, :] < N1)
        a = tl.load(activation_ptr + mids[:, None] * N1 + cols[None, :], mask=a_mask, other=0.0)
        acc = tl.dot(sc * (w - shift).to(tl.float32), a, acc)
    tl.store(z_ptr + rows[:, None] * N1 + cols[None, :], acc, mask=(rows[:, None] < N0) & (cols[None, :] < N1))


# ----------------------------------------------------------------------------------------------------
# The table the tests walk


@dataclass(frozen=True)
class Puzzle:
    """A puzzle's kernel and spec; `shapes(n)` gives, for the sizes `n` (the puzzle's `nelem`), each
    input's shape and dtype and the output's shape (the puzzle's annotations); `nelem` and `blocks` are
    the repository's test, `ragged` our sizes whose blocks leave masked edges (a "B..." key in one of
    those replaces that block size)."""
    kernel: Callable
    spec: Callable
    shapes: Callable
    nelem: dict
    blocks: dict
    ragged: list = field(default_factory=list)


F32, I32 = torch.float32, torch.int32


def grid(n: dict, b: dict) -> tuple:
    """The puzzles' grid: a program per B0 x B1 x B2 tile of N0 x N1 x N2 (the repository's `test`)."""
    return (triton.cdiv(n["N0"], b["B0"]), triton.cdiv(n.get("N1", 1), b.get("B1", 1)),
            triton.cdiv(n.get("N2", 1), b.get("B2", 1)))


def sizes(puzzle: Puzzle, case: dict | None = None) -> tuple[dict, dict]:
    """A test's sizes and block sizes: the repository's, or a ragged `case`'s, the blocks completed as the
    repository's `test` completes them (B1 and B2 are 32 when not given)."""
    nelem = {k: v for k, v in (case or puzzle.nelem).items() if not k.startswith("B")}
    b = {**puzzle.blocks, **{k: v for k, v in (case or {}).items() if k.startswith("B")}}
    for size, block in (("N1", "B1"), ("N2", "B2")):
        if size in nelem and block not in b:
            b[block] = 32
    return nelem, b


def _matmul_shapes(n: dict) -> tuple:
    return [((n["N2"], n["N0"], n["MID"]), F32), ((n["N2"], n["MID"], n["N1"]), F32)], (n["N2"], n["N0"], n["N1"])


_MATMUL_SIZES = ({"N0": 32, "N1": 32, "N2": 4, "MID": 32}, {"B0": 16, "B1": 16, "B2": 1, "B_MID": 16},
                 [{"N0": 19, "N1": 33, "N2": 3, "MID": 21, "B2": 2}])

PUZZLES = {
    "constant_add": Puzzle(add_kernel, add_spec, lambda n: ([((n["N0"],), F32)], (n["N0"],)),
                           {"N0": 32}, {"B0": 32}, [{"N0": 8, "B0": 8}]),
    "constant_add_block": Puzzle(add_mask2_kernel, add2_spec, lambda n: ([((n["N0"],), F32)], (n["N0"],)),
                                 {"N0": 200}, {"B0": 32}, [{"N0": 1}, {"N0": 37}]),
    "outer_vector_add": Puzzle(add_vec_kernel, add_vec_spec,
                               lambda n: ([((n["N0"],), F32), ((n["N1"],), F32)], (n["N1"], n["N0"])),
                               {"N0": 32, "N1": 32}, {"B0": 32}, [{"N0": 16, "N1": 8, "B0": 16, "B1": 8}]),
    "outer_vector_add_block": Puzzle(add_vec_block_kernel, add_vec_block_spec,
                                     lambda n: ([((n["N0"],), F32), ((n["N1"],), F32)], (n["N1"], n["N0"])),
                                     {"N0": 100, "N1": 90}, {"B0": 32}, [{"N0": 1, "N1": 33}, {"N0": 65, "N1": 7}]),
    "fused_outer_multiplication": Puzzle(mul_relu_block_kernel, mul_relu_block_spec,
                                         lambda n: ([((n["N0"],), F32), ((n["N1"],), F32)], (n["N1"], n["N0"])),
                                         {"N0": 100, "N1": 90}, {"B0": 32}, [{"N0": 33, "N1": 1}]),
    "fused_outer_multiplication_backwards": Puzzle(
        mul_relu_block_back_kernel, mul_relu_block_back_spec,
        lambda n: ([((n["N1"], n["N0"]), F32), ((n["N1"],), F32), ((n["N1"], n["N0"]), F32)], (n["N1"], n["N0"])),
        {"N0": 100, "N1": 90}, {"B0": 32}, [{"N0": 5, "N1": 40}]),
    "long_sum": Puzzle(sum_kernel, sum_spec, lambda n: ([((n["N0"], n["T"]), F32)], (n["N0"],)),
                       {"N0": 4, "N1": 32, "T": 200}, {"B0": 1, "B1": 32},
                       [{"N0": 5, "N1": 32, "T": 31}, {"N0": 7, "N1": 32, "T": 65, "B0": 4}]),
    "long_softmax": Puzzle(softmax_kernel, softmax_spec, lambda n: ([((n["N0"], n["T"]), F32)], (n["N0"], n["T"])),
                           {"N0": 4, "N1": 32, "T": 200}, {"B0": 1, "B1": 32},
                           [{"N0": 5, "N1": 32, "T": 31}, {"N0": 3, "N1": 32, "T": 97, "B0": 2}]),
    "simple_flash_attention": Puzzle(flashatt_kernel, flashatt_spec,
                                     lambda n: ([((n["N0"],), F32), ((n["T"],), F32), ((n["T"],), F32)], (n["N0"],)),
                                     {"N0": 200, "T": 200}, {"B0": 64}, [{"N0": 37, "T": 70, "B0": 16}]),
    "two_dimensional_convolution": Puzzle(conv2d_kernel, conv2d_spec,
                                          lambda n: ([((n["N0"], n["H"], n["W"]), F32), ((n["KH"], n["KW"]), F32)],
                                                     (n["N0"], n["H"], n["W"])),
                                          {"N0": 4, "H": 8, "W": 8, "KH": 4, "KW": 4}, {"B0": 1},
                                          [{"N0": 3, "H": 5, "W": 7, "KH": 2, "KW": 4, "B0": 2}]),
    "matrix_multiplication": Puzzle(dot_kernel, dot_spec, _matmul_shapes, *_MATMUL_SIZES),
    "matrix_multiplication_batched_dot": Puzzle(dot_batched_kernel, dot_spec, _matmul_shapes, *_MATMUL_SIZES),
    "quantized_matrix_mult": Puzzle(quant_dot_kernel, quant_dot_spec,
                                    lambda n: ([((n["N0"], n["MID"] // GROUP.value), F32), ((n["N0"],), I32),
                                                ((n["N0"], n["MID"] // FPINT.value), I32), ((n["MID"], n["N1"]), F32)],
                                               (n["N0"], n["N1"])),
                                    {"N0": 32, "N1": 32, "MID": 64}, {"B0": 16, "B1": 16, "B_MID": 64},
                                    [{"N0": 19, "N1": 37, "MID": 40, "B_MID": 16}]),
}


def inputs(puzzle: Puzzle, nelem: dict, seed: int = 0, full_range: bool = False) -> list:
    """The repository's inputs: floats uniform in [-0.5, 0.5), int32s in [-100000, 100000) (every bit
    of an int32 when `full_range`, so the top nibble and the sign are exercised), and a zeroed output."""
    gen = torch.Generator().manual_seed(seed)
    shapes, out_shape = puzzle.shapes(nelem)
    low, high = (-2 ** 31, 2 ** 31) if full_range else (-100000, 100000)
    args = [torch.rand(*s, generator=gen) - 0.5 if dtype == F32 else
            torch.randint(low, high, s, generator=gen, dtype=torch.int64).to(dtype) for s, dtype in shapes]
    return args + [torch.zeros(out_shape)]


def run(puzzle: Puzzle, args: list, nelem: dict, blocks: dict, device: str = "cpu") -> torch.Tensor:
    """Launch the puzzle's kernel as the repository's `test` does (`kernel[grid](*tensors, **B, **nelem)`)
    and return its output tensor."""
    args = [a.to(device) for a in args]
    puzzle.kernel[lambda meta: grid(nelem, meta)](*args, **blocks, **nelem)
    return args[-1].cpu()
