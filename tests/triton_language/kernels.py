"""Triton kernels to run, shared by the interpreter's and the compiler's tests: the `@triton.jit`
functions of Triton's tutorials 01, 02, 03 and 05 exactly as the tutorials write them (only the imports
changed), and Triton-Puzzles-style kernels, each with its host wrapper and the torch computation it equals.

`CASES` names each kernel's wrapper, its torch reference and the inputs to try it on."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

import babytriton.triton as triton
import babytriton.triton.language as tl

# ----------------------------------------------------------------------------------------------------
# Tutorial 01: vector addition (python/tutorials/01-vector-add.py)


@triton.jit
def add_kernel(
    x_ptr,  # *Pointer* to first input vector
    y_ptr,  # *Pointer* to second input vector
    output_ptr,  # *Pointer* to output vector
    n_elements,  # Size of the vector
    BLOCK_SIZE: tl.constexpr,  # Number of elements each program should process
                 # NOTE: `constexpr` so it can be used as a shape value
):
    # There are multiple 'program's processing different data. We identify which program
    # we are here
    pid = tl.program_id(axis=0)  # We use a 1D launch grid so axis is 0
    # This program will process inputs that are offset from the initial data.
    # for instance, if you had a vector of length 256 and block_size of 64, the programs
    # would each access the elements [0:64, 64:128, 128:192, 192:256].
    # Note that offsets is a list of pointers
    block_start = pid * BLOCK_SIZE
    offsets = block_start + tl.arange(0, BLOCK_SIZE)
    # Create a mask to guard memory operations against out-of-bounds accesses
    mask = offsets < n_elements
    # Load x and y from DRAM, masking out any extra elements in case the input is not a
    # multiple of the block size
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.load(y_ptr + offsets, mask=mask)
    output = x + y
    # Write x + y back to DRAM
    tl.store(output_ptr + offsets, output, mask=mask)


def add(x: torch.Tensor, y: torch.Tensor, BLOCK_SIZE: int = 1024):
    output = torch.empty_like(x)
    n_elements = output.numel()
    grid = lambda meta: (triton.cdiv(n_elements, meta['BLOCK_SIZE']), )
    add_kernel[grid](x, y, output, n_elements, BLOCK_SIZE=BLOCK_SIZE)
    return output


# ----------------------------------------------------------------------------------------------------
# Tutorial 02: fused softmax (python/tutorials/02-fused-softmax.py): persistent programs, a row each step


@triton.jit
def softmax_kernel(output_ptr, input_ptr, input_row_stride, output_row_stride, n_rows, n_cols, BLOCK_SIZE: tl.constexpr,
                   num_stages: tl.constexpr):
    # starting row of the program
    row_start = tl.program_id(0)
    row_step = tl.num_programs(0)
    for row_idx in tl.range(row_start, n_rows, row_step, num_stages=num_stages):
        # The stride represents how much we need to increase the pointer to advance 1 row
        row_start_ptr = input_ptr + row_idx * input_row_stride
        # The block size is the next power of two greater than n_cols, so we can fit each
        # row in a single block
        col_offsets = tl.arange(0, BLOCK_SIZE)
        input_ptrs = row_start_ptr + col_offsets
        # Load the row into SRAM, using a mask since BLOCK_SIZE may be > than n_cols
        mask = col_offsets < n_cols
        row = tl.load(input_ptrs, mask=mask, other=-float('inf'))
        # Subtract maximum for numerical stability
        row_minus_max = row - tl.max(row, axis=0)
        # Note that exponentiation in Triton is fast but approximate (i.e., think __expf in CUDA)
        numerator = tl.exp(row_minus_max)
        denominator = tl.sum(numerator, axis=0)
        softmax_output = numerator / denominator
        # Write back output to DRAM
        output_row_start_ptr = output_ptr + row_idx * output_row_stride
        output_ptrs = output_row_start_ptr + col_offsets
        tl.store(output_ptrs, softmax_output, mask=mask)


def softmax(x: torch.Tensor, num_programs: int | None = None):
    """The tutorial's wrapper without its occupancy query (driver internals): at most 4 programs, so
    each takes several rows through the grid-stride `tl.range`."""
    n_rows, n_cols = x.shape
    BLOCK_SIZE = triton.next_power_of_2(n_cols)
    y = torch.empty_like(x)
    num_programs = min(num_programs or 4, n_rows)
    softmax_kernel[(num_programs, 1, 1)](y, x, x.stride(0), y.stride(0), n_rows, n_cols, BLOCK_SIZE, 2, num_warps=8)
    return y


# ----------------------------------------------------------------------------------------------------
# Tutorial 03: matrix multiplication (python/tutorials/03-matrix-multiplication.py). The configs are
# small ones (the tutorial's are for a GPU's 4096-sized matrices and would make tests slow).


def get_autotune_config():
    return [
        triton.Config({'BLOCK_SIZE_M': 32, 'BLOCK_SIZE_N': 32, 'BLOCK_SIZE_K': 32, 'GROUP_SIZE_M': 8}, num_stages=3,
                      num_warps=4),
        triton.Config({'BLOCK_SIZE_M': 16, 'BLOCK_SIZE_N': 32, 'BLOCK_SIZE_K': 16, 'GROUP_SIZE_M': 2}, num_stages=2,
                      num_warps=2),
    ]


# `triton.jit`'ed functions can be auto-tuned by using the `triton.autotune` decorator, which consumes:
#   - A list of `triton.Config` objects that define different configurations of
#       meta-parameters (e.g., `BLOCK_SIZE_M`) and compilation options (e.g., `num_warps`) to try
#   - An auto-tuning *key* whose change in values will trigger evaluation of all the
#       provided configs
@triton.autotune(
    configs=get_autotune_config(),
    key=['M', 'N', 'K'],
)
@triton.jit
def matmul_kernel(
        # Pointers to matrices
        a_ptr, b_ptr, c_ptr,
        # Matrix dimensions
        M, N, K,
        # The stride variables represent how much to increase the ptr by when moving by 1
        # element in a particular dimension. E.g. `stride_am` is how much to increase `a_ptr`
        # by to get the element one row down (A has M rows).
        stride_am, stride_ak,  #
        stride_bk, stride_bn,  #
        stride_cm, stride_cn,
        # Meta-parameters
        BLOCK_SIZE_M: tl.constexpr, BLOCK_SIZE_N: tl.constexpr, BLOCK_SIZE_K: tl.constexpr,  #
        GROUP_SIZE_M: tl.constexpr,  #
        ACTIVATION: tl.constexpr  #
):
    """Kernel for computing the matmul C = A x B.
    A has shape (M, K), B has shape (K, N) and C has shape (M, N)
    """
    # -----------------------------------------------------------
    # Map program ids `pid` to the block of C it should compute.
    # This is done in a grouped ordering to promote L2 data reuse.
    # See above `L2 Cache Optimizations` section for details.
    pid = tl.program_id(axis=0)
    num_pid_m = tl.cdiv(M, BLOCK_SIZE_M)
    num_pid_n = tl.cdiv(N, BLOCK_SIZE_N)
    num_pid_in_group = GROUP_SIZE_M * num_pid_n
    group_id = pid // num_pid_in_group
    first_pid_m = group_id * GROUP_SIZE_M
    group_size_m = min(num_pid_m - first_pid_m, GROUP_SIZE_M)
    pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)
    pid_n = (pid % num_pid_in_group) // group_size_m

    # ----------------------------------------------------------
    # Create pointers for the first blocks of A and B.
    # We will advance this pointer as we move in the K direction
    # and accumulate
    # `a_ptrs` is a block of [BLOCK_SIZE_M, BLOCK_SIZE_K] pointers
    # `b_ptrs` is a block of [BLOCK_SIZE_K, BLOCK_SIZE_N] pointers
    # See above `Pointer Arithmetic` section for details
    offs_am = (pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)) % M
    offs_bn = (pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)) % N
    offs_k = tl.arange(0, BLOCK_SIZE_K)
    a_ptrs = a_ptr + (offs_am[:, None] * stride_am + offs_k[None, :] * stride_ak)
    b_ptrs = b_ptr + (offs_k[:, None] * stride_bk + offs_bn[None, :] * stride_bn)

    # -----------------------------------------------------------
    # Iterate to compute a block of the C matrix.
    # We accumulate into a `[BLOCK_SIZE_M, BLOCK_SIZE_N]` block
    # of fp32 values for higher accuracy.
    # `accumulator` will be converted back to fp16 after the loop.
    accumulator = tl.zeros((BLOCK_SIZE_M, BLOCK_SIZE_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_SIZE_K)):
        # Load the next block of A and B, generate a mask by checking the K dimension.
        # If it is out of bounds, set it to 0.
        a = tl.load(a_ptrs, mask=offs_k[None, :] < K - k * BLOCK_SIZE_K, other=0.0)
        b = tl.load(b_ptrs, mask=offs_k[:, None] < K - k * BLOCK_SIZE_K, other=0.0)
        # We accumulate along the K dimension.
        accumulator = tl.dot(a, b, accumulator)
        # Advance the ptrs to the next K block.
        a_ptrs += BLOCK_SIZE_K * stride_ak
        b_ptrs += BLOCK_SIZE_K * stride_bk
    # You can fuse arbitrary activation functions here
    # while the accumulator is still in FP32!
    if ACTIVATION == "leaky_relu":
        accumulator = leaky_relu(accumulator)
    c = accumulator.to(tl.float16)

    # -----------------------------------------------------------
    # Write back the block of the output matrix C with masks.
    offs_cm = pid_m * BLOCK_SIZE_M + tl.arange(0, BLOCK_SIZE_M)
    offs_cn = pid_n * BLOCK_SIZE_N + tl.arange(0, BLOCK_SIZE_N)
    c_ptrs = c_ptr + stride_cm * offs_cm[:, None] + stride_cn * offs_cn[None, :]
    c_mask = (offs_cm[:, None] < M) & (offs_cn[None, :] < N)
    tl.store(c_ptrs, c, mask=c_mask)


# We can fuse `leaky_relu` by providing it as an `ACTIVATION` meta-parameter in `matmul_kernel`.
@triton.jit
def leaky_relu(x):
    return tl.where(x >= 0, x, 0.01 * x)


def matmul(a, b, activation=""):
    # Check constraints.
    assert a.shape[1] == b.shape[0], "Incompatible dimensions"
    M, K = a.shape
    K, N = b.shape
    # Allocates output.
    c = torch.empty((M, N), device=a.device, dtype=torch.float16)
    # 1D launch kernel where each block gets its own program.
    grid = lambda META: (triton.cdiv(M, META['BLOCK_SIZE_M']) * triton.cdiv(N, META['BLOCK_SIZE_N']), )
    matmul_kernel[grid](
        a, b, c,  #
        M, N, K,  #
        a.stride(0), a.stride(1),  #
        b.stride(0), b.stride(1),  #
        c.stride(0), c.stride(1),  #
        ACTIVATION=activation  #
    )
    return c


def matmul_ref(a, b, activation=""):
    c = a.float() @ b.float()
    if activation == "leaky_relu":
        c = torch.where(c >= 0, c, 0.01 * c)
    return c.half()


# ----------------------------------------------------------------------------------------------------
# Tutorial 05: layer-norm forward (python/tutorials/05-layer-norm.py)


@triton.jit
def _layer_norm_fwd_fused(
    X,  # pointer to the input
    Y,  # pointer to the output
    W,  # pointer to the weights
    B,  # pointer to the biases
    Mean,  # pointer to the mean
    Rstd,  # pointer to the 1/std
    stride,  # how much to increase the pointer when moving by 1 row
    N,  # number of columns in X
    eps,  # epsilon to avoid division by zero
    BLOCK_SIZE: tl.constexpr,
):
    # Map the program id to the row of X and Y it should compute.
    row = tl.program_id(0)
    Y += row * stride
    X += row * stride
    # Compute mean
    mean = 0
    _mean = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        a = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        _mean += a
    mean = tl.sum(_mean, axis=0) / N
    # Compute variance
    _var = tl.zeros([BLOCK_SIZE], dtype=tl.float32)
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        x = tl.load(X + cols, mask=cols < N, other=0.).to(tl.float32)
        x = tl.where(cols < N, x - mean, 0.)
        _var += x * x
    var = tl.sum(_var, axis=0) / N
    rstd = 1 / tl.sqrt(var + eps)
    # Write mean / rstd
    tl.store(Mean + row, mean)
    tl.store(Rstd + row, rstd)
    # Normalize and apply linear transformation
    for off in range(0, N, BLOCK_SIZE):
        cols = off + tl.arange(0, BLOCK_SIZE)
        mask = cols < N
        w = tl.load(W + cols, mask=mask)
        b = tl.load(B + cols, mask=mask)
        x = tl.load(X + cols, mask=mask, other=0.).to(tl.float32)
        x_hat = (x - mean) * rstd
        y = x_hat * w + b
        # Write output
        tl.store(Y + cols, y, mask=mask)


def layer_norm(x, weight, bias, eps=1e-5, BLOCK_SIZE=None):
    """The tutorial's forward wrapper; `BLOCK_SIZE` below the row length makes the kernel loop."""
    y = torch.empty_like(x)
    x_arg = x.reshape(-1, x.shape[-1])
    M, N = x_arg.shape
    mean = torch.empty((M, ), dtype=torch.float32, device=x.device)
    rstd = torch.empty((M, ), dtype=torch.float32, device=x.device)
    MAX_FUSED_SIZE = 65536 // x.element_size()
    BLOCK_SIZE = BLOCK_SIZE or min(MAX_FUSED_SIZE, triton.next_power_of_2(N))
    num_warps = min(max(BLOCK_SIZE // 256, 1), 8)
    _layer_norm_fwd_fused[(M, )](  #
        x_arg, y, weight, bias, mean, rstd,  #
        x_arg.stride(0), N, eps,  #
        BLOCK_SIZE=BLOCK_SIZE, num_warps=num_warps, num_ctas=1)
    return y, mean, rstd


def layer_norm_ref(x, weight, bias, eps=1e-5, BLOCK_SIZE=None):
    xf = x.float()
    mean = xf.mean(dim=-1)
    rstd = 1 / torch.sqrt(xf.var(dim=-1, unbiased=False) + eps)
    y = torch.nn.functional.layer_norm(xf, (x.shape[-1], ), weight.float(), bias.float(), eps)
    return y.to(x.dtype), mean.reshape(-1), rstd.reshape(-1)


# ----------------------------------------------------------------------------------------------------
# Puzzle-style kernels (written for babytriton, in Triton's language)


@triton.jit
def outer_add_kernel(x_ptr, y_ptr, z_ptr, N0, N1, B0: tl.constexpr, B1: tl.constexpr):
    """z[j, i] = x[i] + y[j] over a 2-D grid of B1 x B0 tiles, masked at both ragged edges."""
    offs_i = tl.program_id(0) * B0 + tl.arange(0, B0)
    offs_j = tl.program_id(1) * B1 + tl.arange(0, B1)
    x = tl.load(x_ptr + offs_i, mask=offs_i < N0, other=0.0)
    y = tl.load(y_ptr + offs_j, mask=offs_j < N1, other=0.0)
    z = y[:, None] + x[None, :]
    mask = (offs_j[:, None] < N1) & (offs_i[None, :] < N0)
    tl.store(z_ptr + offs_j[:, None] * N0 + offs_i[None, :], z, mask=mask)


def outer_add(x, y, B0=16, B1=8):
    z = torch.empty((y.numel(), x.numel()), device=x.device, dtype=torch.result_type(x, y))
    outer_add_kernel[(triton.cdiv(x.numel(), B0), triton.cdiv(y.numel(), B1))](x, y, z, x.numel(), y.numel(), B0, B1)
    return z


def outer_add_ref(x, y, B0=16, B1=8):
    return y[:, None] + x[None, :]


@triton.jit
def long_softmax_kernel(x_ptr, out_ptr, stride_row, n_cols, BLOCK: tl.constexpr):
    """Softmax of rows longer than a block: one pass for the running max and sum (online), one to write."""
    row = tl.program_id(0)
    x_row = x_ptr + row * stride_row
    m = tl.full([BLOCK], -float('inf'), tl.float32)
    s = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=-float('inf')).to(tl.float32)
        m_new = tl.maximum(m, x)
        alpha = tl.where(m_new == -float('inf'), 0.0, tl.exp(m - m_new))
        s = s * alpha + tl.where(x == -float('inf'), 0.0, tl.exp(x - m_new))
        m = m_new
    row_max = tl.max(m, axis=0)
    total = tl.sum(s * tl.exp(m - row_max), axis=0)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_row + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
        tl.store(out_ptr + row * stride_row + cols, tl.exp(x - row_max) / total, mask=cols < n_cols)


def long_softmax(x, BLOCK=32):
    out = torch.empty_like(x)
    long_softmax_kernel[(x.shape[0], )](x, out, x.stride(0), x.shape[1], BLOCK=BLOCK)
    return out


def long_softmax_ref(x, BLOCK=32):
    return torch.softmax(x.float(), dim=-1).to(x.dtype)


@triton.jit
def flash_attention_kernel(q_ptr, k_ptr, v_ptr, o_ptr, seq_len, scale, D: tl.constexpr, BLOCK_M: tl.constexpr,
                           BLOCK_N: tl.constexpr):
    """One head of softmax(q k^T * scale) v: a program per block of queries, the keys in blocks with an
    online softmax, both products through tl.dot."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, D)
    q = tl.load(q_ptr + offs_m[:, None] * D + offs_d[None, :], mask=offs_m[:, None] < seq_len, other=0.0)
    m_i = tl.full([BLOCK_M], -float('inf'), tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, D], dtype=tl.float32)
    for start_n in range(0, seq_len, BLOCK_N):
        offs_n = start_n + tl.arange(0, BLOCK_N)
        k = tl.load(k_ptr + offs_n[:, None] * D + offs_d[None, :], mask=offs_n[:, None] < seq_len, other=0.0)
        v = tl.load(v_ptr + offs_n[:, None] * D + offs_d[None, :], mask=offs_n[:, None] < seq_len, other=0.0)
        qk = tl.dot(q, tl.trans(k)) * scale
        qk = tl.where(offs_n[None, :] < seq_len, qk, -float('inf'))
        m_new = tl.maximum(m_i, tl.max(qk, axis=1))
        p = tl.exp(qk - m_new[:, None])
        alpha = tl.exp(m_i - m_new)
        l_i = l_i * alpha + tl.sum(p, axis=1)
        acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
        m_i = m_new
    acc = acc / l_i[:, None]
    tl.store(o_ptr + offs_m[:, None] * D + offs_d[None, :], acc.to(o_ptr.dtype.element_ty),
             mask=offs_m[:, None] < seq_len)


def flash_attention(q, k, v, BLOCK_M=16, BLOCK_N=16):
    seq_len, D = q.shape
    o = torch.empty_like(q)
    flash_attention_kernel[(triton.cdiv(seq_len, BLOCK_M), )](q, k, v, o, seq_len, D ** -0.5, D=D, BLOCK_M=BLOCK_M,
                                                               BLOCK_N=BLOCK_N)
    return o


def flash_attention_ref(q, k, v, BLOCK_M=16, BLOCK_N=16):
    s = (q.float() @ k.float().T) * q.shape[1] ** -0.5
    return (torch.softmax(s, dim=-1) @ v.float()).to(q.dtype)


@triton.jit
def conv1d_kernel(x_ptr, w_ptr, out_ptr, n_out, KW: tl.constexpr, BLOCK: tl.constexpr):
    """A 'valid' 1-D convolution (cross-correlation): out[i] = sum_k x[i + k] * w[k]."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    ks = tl.arange(0, KW)
    x = tl.load(x_ptr + offs[:, None] + ks[None, :], mask=offs[:, None] < n_out, other=0.0)
    w = tl.load(w_ptr + ks)
    tl.store(out_ptr + offs, tl.sum(x * w[None, :], axis=1), mask=offs < n_out)


def conv1d(x, w, BLOCK=32):
    n_out = x.numel() - w.numel() + 1
    out = torch.empty(n_out, device=x.device, dtype=torch.result_type(x, w))
    conv1d_kernel[(triton.cdiv(n_out, BLOCK), )](x, w, out, n_out, KW=w.numel(), BLOCK=BLOCK)
    return out


def conv1d_ref(x, w, BLOCK=32):
    return torch.nn.functional.conv1d(x.float()[None, None], w.float()[None, None])[0, 0].to(torch.result_type(x, w))


@triton.jit
def quant_matmul_kernel(x_ptr, w_ptr, scale_ptr, zero_ptr, out_ptr, M, N, K, BLOCK_M: tl.constexpr,
                        BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """out = x @ dequant(w): w packs eight 4-bit weights in each int32 (k = 8 * row + nibble), dequantised
    per column as (nibble - zero[n]) * scale[n]; the nibbles come out with shifts and a mask."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    scale = tl.load(scale_ptr + offs_n, mask=offs_n < N, other=0.0)
    zero = tl.load(zero_ptr + offs_n, mask=offs_n < N, other=0)
    acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        offs_k = k0 + tl.arange(0, BLOCK_K)
        x = tl.load(x_ptr + offs_m[:, None] * K + offs_k[None, :], mask=(offs_m[:, None] < M) & (offs_k[None, :] < K),
                    other=0.0)
        packed = tl.load(w_ptr + (offs_k[:, None] // 8) * N + offs_n[None, :],
                         mask=(offs_k[:, None] < K) & (offs_n[None, :] < N), other=0)
        nibble = (packed >> ((offs_k[:, None] % 8) * 4)) & 0xF
        w = (nibble - zero[None, :]).to(tl.float32) * scale[None, :]
        acc += tl.dot(x, w)
    tl.store(out_ptr + offs_m[:, None] * N + offs_n[None, :], acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


def quant_pack(nibbles):
    """Pack a (K, N) tensor of 4-bit values (K a multiple of 8) into (K // 8, N) int32."""
    k, n = nibbles.shape
    parts = nibbles.to(torch.int64).reshape(k // 8, 8, n) << (4 * torch.arange(8, device=nibbles.device))[None, :, None]
    packed = parts.sum(dim=1)
    return torch.where(packed >= 2 ** 31, packed - 2 ** 32, packed).to(torch.int32)


def quant_matmul(x, nibbles, scale, zero, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16):
    M, K = x.shape
    N = nibbles.shape[1]
    out = torch.empty((M, N), device=x.device, dtype=torch.float32)
    grid = (triton.cdiv(M, BLOCK_M), triton.cdiv(N, BLOCK_N))
    quant_matmul_kernel[grid](x, quant_pack(nibbles), scale, zero, out, M, N, K, BLOCK_M, BLOCK_N, BLOCK_K)
    return out


def quant_matmul_ref(x, nibbles, scale, zero, BLOCK_M=16, BLOCK_N=16, BLOCK_K=16):
    return x.float() @ ((nibbles - zero[None, :]).float() * scale[None, :])


@triton.jit
def gather_rows_kernel(table_ptr, idx_ptr, out_ptr, n_idx, D, BLOCK_R: tl.constexpr, BLOCK_D: tl.constexpr):
    """out[r, :] = table[idx[r], :]: an embedding lookup, the row indices loaded from memory."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    cols = tl.arange(0, BLOCK_D)
    idx = tl.load(idx_ptr + rows, mask=rows < n_idx, other=0)
    mask = (rows[:, None] < n_idx) & (cols[None, :] < D)
    vals = tl.load(table_ptr + idx[:, None] * D + cols[None, :], mask=mask)
    tl.store(out_ptr + rows[:, None] * D + cols[None, :], vals, mask=mask)


def gather_rows(table, idx, BLOCK_R=8):
    D = table.shape[1]
    out = torch.empty((idx.numel(), D), device=table.device, dtype=table.dtype)
    gather_rows_kernel[(triton.cdiv(idx.numel(), BLOCK_R), )](table, idx, out, idx.numel(), D, BLOCK_R,
                                                              triton.next_power_of_2(D))
    return out


def gather_rows_ref(table, idx, BLOCK_R=8):
    return table[idx.long()]


@triton.jit
def scale_shift_kernel(x_ptr, out_ptr, n, alpha, beta, BLOCK: tl.constexpr):
    """out = alpha * x + beta with a grid-stride loop: each program steps by num_programs blocks."""
    pid = tl.program_id(0)
    step = tl.num_programs(0) * BLOCK
    for start in range(pid * BLOCK, n, step):
        offs = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + offs, mask=offs < n)
        tl.store(out_ptr + offs, alpha * x + beta, mask=offs < n)


def scale_shift(x, alpha=2.0, beta=-1.0, BLOCK=32, programs=3):
    out = torch.empty_like(x)
    scale_shift_kernel[(programs, )](x, out, x.numel(), alpha, beta, BLOCK=BLOCK)
    return out


def scale_shift_ref(x, alpha=2.0, beta=-1.0, BLOCK=32, programs=3):
    return (alpha * x.float() + beta).to(x.dtype)


@triton.jit
def histogram_kernel(x_ptr, hist_ptr, total_ptr, n, BINS: tl.constexpr, BLOCK: tl.constexpr):
    """A histogram of integers in [0, BINS) and their float sum: atomic adds from every program."""
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0)
    tl.atomic_add(hist_ptr + x, 1, mask=mask)
    tl.atomic_add(total_ptr, tl.sum(x.to(tl.float32), axis=0))


def histogram(x, BINS=16, BLOCK=32):
    hist = torch.zeros(BINS, device=x.device, dtype=torch.int32)
    total = torch.zeros(1, device=x.device, dtype=torch.float32)
    histogram_kernel[(triton.cdiv(x.numel(), BLOCK), )](x, hist, total, x.numel(), BINS=BINS, BLOCK=BLOCK)
    return hist, total


def histogram_ref(x, BINS=16, BLOCK=32):
    return torch.bincount(x.long(), minlength=BINS).int(), x.float().sum().reshape(1)


@triton.jit
def row_argmax_kernel(x_ptr, idx_ptr, max_ptr, n_cols, stride, BLOCK: tl.constexpr):
    """Each row's maximum and its first index (argmax, max with indices)."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * stride + cols, mask=cols < n_cols, other=-float('inf'))
    tl.store(idx_ptr + row, tl.argmax(x, axis=0))
    tl.store(max_ptr + row, tl.max(x, axis=0))


def row_argmax(x):
    idx = torch.empty(x.shape[0], device=x.device, dtype=torch.int32)
    mx = torch.empty(x.shape[0], device=x.device, dtype=x.dtype)
    row_argmax_kernel[(x.shape[0], )](x, idx, mx, x.shape[1], x.stride(0), triton.next_power_of_2(x.shape[1]))
    return idx, mx


def row_argmax_ref(x):
    mx, idx = x.max(dim=1)
    return idx.int(), mx


# ----------------------------------------------------------------------------------------------------
# The table the tests walk


@dataclass(frozen=True)
class Case:
    """A kernel's wrapper, its torch reference, and a maker of inputs (dtype, size) -> args."""
    run: Callable
    ref: Callable
    make: Callable
    dtypes: tuple = (torch.float32, torch.float16, torch.bfloat16)


def _vec(dtype, n, gen):
    return (torch.randn(n, generator=gen).to(dtype), torch.randn(n, generator=gen).to(dtype))


def _rows(dtype, n, gen):
    return (torch.randn(5, n, generator=gen).to(dtype),)


def _matmul(dtype, n, gen):
    return (torch.randn(n + 3, n, generator=gen).to(dtype), torch.randn(n, n + 7, generator=gen).to(dtype),
            "leaky_relu")


def _layer_norm(dtype, n, gen):
    x = (torch.randn(4, n, generator=gen) * 2 + 1).to(dtype)
    return (x, torch.rand(n, generator=gen).to(dtype), torch.rand(n, generator=gen).to(dtype), 1e-5, 16)


def _attention(dtype, n, gen):
    return tuple(torch.randn(n, 16, generator=gen).to(dtype) for _ in range(3))


def _conv(dtype, n, gen):
    return (torch.randn(n, generator=gen).to(dtype), torch.randn(4, generator=gen).to(dtype))


def _quant(dtype, n, gen):
    k = 8 * (n // 8 + 2)
    return (torch.randn(n, k, generator=gen), torch.randint(0, 16, (k, n + 5), generator=gen),
            torch.rand(n + 5, generator=gen), torch.randint(0, 16, (n + 5,), generator=gen, dtype=torch.int32))


def _gather(dtype, n, gen):
    table = torch.randn(n, 12, generator=gen).to(dtype)
    return (table, torch.randint(0, n, (n + 3,), generator=gen, dtype=torch.int32))


def _hist(dtype, n, gen):
    return (torch.randint(0, 16, (n,), generator=gen, dtype=torch.int32),)


CASES = {
    "vector_add": Case(add, lambda x, y: x + y, _vec),
    "fused_softmax": Case(softmax, lambda x: torch.softmax(x.float(), dim=1).to(x.dtype), _rows, (torch.float32,)),
    "matmul": Case(matmul, matmul_ref, _matmul, (torch.float16, torch.bfloat16)),
    "layer_norm": Case(layer_norm, layer_norm_ref, _layer_norm),
    "outer_add": Case(outer_add, outer_add_ref, _vec),
    "long_softmax": Case(long_softmax, long_softmax_ref, _rows),
    "flash_attention": Case(flash_attention, flash_attention_ref, _attention, (torch.float32, torch.float16,
                                                                               torch.bfloat16)),
    "conv1d": Case(conv1d, conv1d_ref, _conv),
    "quant_matmul": Case(quant_matmul, quant_matmul_ref, _quant, (torch.float32,)),
    "gather_rows": Case(gather_rows, gather_rows_ref, _gather),
    "scale_shift": Case(scale_shift, scale_shift_ref, lambda dtype, n, gen: (torch.randn(n, generator=gen).to(dtype),)),
    "histogram": Case(histogram, histogram_ref, _hist, (torch.int32,)),
    "row_argmax": Case(row_argmax, row_argmax_ref, _rows),
}
