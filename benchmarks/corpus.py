"""The benchmark corpus: workloads written the way users write them, once for babytriton and once in
plain torch (the oracle and the baseline).

Each `Workload` has a babytriton function (a plain Python function; the runner applies
`bt.jit(target=...)`), the same computation in torch, an input maker for the sizes "small" (CPU smoke
runs and tests), "medium" (CPU measurements: 2^22-element chains, 1024x4096 rows, large enough that a
fraction of a memory copy means something) and "full" (GPU measurements), and the bytes an ideal kernel moves (every input read
once, every output written once). Most are compositions of primitives (layer norm from mean, subtract,
square, rsqrt), not library calls; the torch side is the same composition, so eager and torch.compile
run the code a torch user would have written. Half-precision variants reuse the float32 functions on
float16 / bfloat16 inputs; "_sym" variants annotate a symbolic row count (`bt.Tensor(("n", 4096))`).

    from corpus import WORKLOADS, by_name
    w = by_name("rmsnorm"); args = w.make("small", "cpu"); w.torch_fn(*args)
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch

import babytriton as bt
from tvm.relax.op import gather_elements, split

EPS = 1e-5
BETA1, BETA2, ADAM_EPS, WEIGHT_DECAY = 0.9, 0.999, 1e-8, 0.01
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
INV_SQRT_2 = 1.0 / math.sqrt(2.0)
WIDTH = 4096  # the row length of the symbolic-size variants


# --------------------------------------------------------------------------------------------------
# the functions: bt_* for babytriton, torch_* for torch, the same computation in the same words
# --------------------------------------------------------------------------------------------------

def bt_elementwise(a, b):
    return bt.sigmoid((a + b) * a - b)


def torch_elementwise(a, b):
    return torch.sigmoid((a + b) * a - b)


def bt_elementwise_long(a, b, c):
    return bt.tanh(a * 0.5 + b) * bt.exp(-a * a) + c / (1.0 + b * b) - 2.0 * c


def torch_elementwise_long(a, b, c):
    return torch.tanh(a * 0.5 + b) * torch.exp(-a * a) + c / (1.0 + b * b) - 2.0 * c


def bt_softmax_lib(x):
    return bt.softmax(x, axis=-1)


def torch_softmax_lib(x):
    return torch.softmax(x, dim=-1)


def bt_layer_norm_lib(x, gamma, beta):
    return bt.layer_norm(x, gamma, beta, axes=[-1], epsilon=EPS)


def torch_layer_norm_lib(x, gamma, beta):
    return torch.nn.functional.layer_norm(x, x.shape[-1:], gamma, beta, eps=EPS)


def bt_row_sum(x):
    return x.sum(axis=-1)


def torch_row_sum(x):
    return x.sum(dim=-1)


def bt_matmul(a, b):
    return a @ b


def torch_matmul(a, b):
    return a @ b


def bt_softmax(x):
    e = bt.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def torch_softmax(x):
    e = torch.exp(x - x.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


def bt_log_softmax(x):
    shifted = x - x.max(axis=-1, keepdims=True)
    return shifted - bt.log(bt.exp(shifted).sum(axis=-1, keepdims=True))


def torch_log_softmax(x):
    shifted = x - x.amax(dim=-1, keepdim=True)
    return shifted - torch.log(torch.exp(shifted).sum(dim=-1, keepdim=True))


def bt_logsumexp(x):
    m = x.max(axis=-1, keepdims=True)
    return (m + bt.log(bt.exp(x - m).sum(axis=-1, keepdims=True))).sum(axis=-1)


def torch_logsumexp(x):
    m = x.amax(dim=-1, keepdim=True)
    return (m + torch.log(torch.exp(x - m).sum(dim=-1, keepdim=True))).sum(dim=-1)


def bt_cross_entropy(logits, target):
    m = logits.max(axis=-1, keepdims=True)
    lse = m + bt.log(bt.exp(logits - m).sum(axis=-1, keepdims=True))
    picked = gather_elements(logits, bt.expand_dims(target, 1), axis=1)
    return (lse - picked).mean()


def torch_cross_entropy(logits, target):
    m = logits.amax(dim=-1, keepdim=True)
    lse = m + torch.log(torch.exp(logits - m).sum(dim=-1, keepdim=True))
    picked = torch.take_along_dim(logits, target[:, None], dim=1)
    return (lse - picked).mean()


def bt_layernorm(x, w, b):
    mu = x.mean(axis=-1, keepdims=True)
    xc = x - mu
    var = (xc * xc).mean(axis=-1, keepdims=True)
    return xc * bt.rsqrt(var + EPS) * w + b


def torch_layernorm(x, w, b):
    mu = x.mean(dim=-1, keepdim=True)
    xc = x - mu
    var = (xc * xc).mean(dim=-1, keepdim=True)
    return xc * torch.rsqrt(var + EPS) * w + b


def bt_rmsnorm(x, w):
    return x * bt.rsqrt((x * x).mean(-1, keepdims=True) + EPS) * w


def torch_rmsnorm(x, w):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + EPS) * w


def bt_layernorm_sym(x: bt.Tensor(("n", WIDTH)), w: bt.Tensor((WIDTH,)), b: bt.Tensor((WIDTH,))):
    mu = x.mean(axis=-1, keepdims=True)
    xc = x - mu
    var = (xc * xc).mean(axis=-1, keepdims=True)
    return xc * bt.rsqrt(var + EPS) * w + b


def bt_rmsnorm_sym(x: bt.Tensor(("n", WIDTH)), w: bt.Tensor((WIDTH,))):
    return x * bt.rsqrt((x * x).mean(-1, keepdims=True) + EPS) * w


def bt_softmax_sym(x: bt.Tensor(("n", WIDTH))):
    e = bt.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def bt_variance(x):
    mu = x.mean(axis=-1, keepdims=True)
    return ((x - mu) ** 2).mean(axis=-1)


def torch_variance(x):
    mu = x.mean(dim=-1, keepdim=True)
    return ((x - mu) ** 2).mean(dim=-1)


def bt_std(x):
    mu = x.mean(axis=-1, keepdims=True)
    return bt.sqrt(((x - mu) ** 2).sum(axis=-1) / (x.shape[-1] - 1))


def torch_std(x):
    mu = x.mean(dim=-1, keepdim=True)
    return torch.sqrt(((x - mu) ** 2).sum(dim=-1) / (x.shape[-1] - 1))


def bt_mean_all(x):
    return x.mean()


def torch_mean_all(x):
    return x.mean()


def bt_sum_all(x):
    return x.sum()


def torch_sum_all(x):
    return x.sum()


def bt_col_sum(x):
    return x.sum(axis=0)


def torch_col_sum(x):
    return x.sum(dim=0)


def bt_mid_sum(x):
    return x.sum(axis=1)


def torch_mid_sum(x):
    return x.sum(dim=1)


def bt_gelu_tanh(x):
    return 0.5 * x * (1.0 + bt.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))


def torch_gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(SQRT_2_OVER_PI * (x + 0.044715 * x * x * x)))


def bt_gelu_erf(x):
    return 0.5 * x * (1.0 + bt.erf(x * INV_SQRT_2))


def torch_gelu_erf(x):
    return 0.5 * x * (1.0 + torch.erf(x * INV_SQRT_2))


def bt_swiglu(gate, up):
    return gate * bt.sigmoid(gate) * up


def torch_swiglu(gate, up):
    return gate * torch.sigmoid(gate) * up


def bt_bias_residual_layernorm(x, bias, residual, w, b):
    h = x + bias + residual
    mu = h.mean(axis=-1, keepdims=True)
    hc = h - mu
    var = (hc * hc).mean(axis=-1, keepdims=True)
    return hc * bt.rsqrt(var + EPS) * w + b


def torch_bias_residual_layernorm(x, bias, residual, w, b):
    h = x + bias + residual
    mu = h.mean(dim=-1, keepdim=True)
    hc = h - mu
    var = (hc * hc).mean(dim=-1, keepdim=True)
    return hc * torch.rsqrt(var + EPS) * w + b


def bt_rotary(x, cos, sin):
    x1, x2 = split(x, 2, axis=-1)
    rotated = bt.concat((-x2, x1), axis=-1)
    return x * cos + rotated * sin


def torch_rotary(x, cos, sin):
    x1, x2 = torch.chunk(x, 2, dim=-1)
    rotated = torch.cat((-x2, x1), dim=-1)
    return x * cos + rotated * sin


def bt_adamw(p, g, m, v, lr: float, step: int):
    m = BETA1 * m + (1.0 - BETA1) * g
    v = BETA2 * v + (1.0 - BETA2) * g * g
    m_hat = m / (1.0 - BETA1 ** step)
    v_hat = v / (1.0 - BETA2 ** step)
    p = p - lr * (m_hat / (bt.sqrt(v_hat) + ADAM_EPS) + WEIGHT_DECAY * p)
    return p, m, v


def torch_adamw(p, g, m, v, lr: float, step: int):
    m = BETA1 * m + (1.0 - BETA1) * g
    v = BETA2 * v + (1.0 - BETA2) * g * g
    m_hat = m / (1.0 - BETA1 ** step)
    v_hat = v / (1.0 - BETA2 ** step)
    p = p - lr * (m_hat / (torch.sqrt(v_hat) + ADAM_EPS) + WEIGHT_DECAY * p)
    return p, m, v


def bt_causal_softmax(x):
    masked = bt.where(bt.tril(bt.ones_like(x)) == 0, -math.inf, x)
    e = bt.exp(masked - masked.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def torch_causal_softmax(x):
    masked = torch.where(torch.tril(torch.ones_like(x)) == 0, -math.inf, x)
    e = torch.exp(masked - masked.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


def bt_causal_softmax_additive(x):
    masked = x + bt.triu(bt.full_like(x, -math.inf), 1)
    e = bt.exp(masked - masked.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def torch_causal_softmax_additive(x):
    masked = x + torch.triu(torch.full_like(x, -math.inf), 1)
    e = torch.exp(masked - masked.amax(dim=-1, keepdim=True))
    return e / e.sum(dim=-1, keepdim=True)


def bt_attention(q, k, v):
    scale = 1.0 / math.sqrt(q.shape[-1])
    return bt.softmax(q @ bt.permute_dims(k, (0, 1, 3, 2)) * scale, axis=-1) @ v


def torch_attention(q, k, v):
    scale = 1.0 / math.sqrt(q.shape[-1])
    return torch.softmax(q @ k.permute(0, 1, 3, 2) * scale, dim=-1) @ v


def bt_mlp(x, w1, b1, w2, b2):
    return bt.gelu(x @ w1 + b1) @ w2 + b2


def torch_mlp(x, w1, b1, w2, b2):
    return torch.nn.functional.gelu(x @ w1 + b1) @ w2 + b2


# --------------------------------------------------------------------------------------------------
# the corpus
# --------------------------------------------------------------------------------------------------

def nbytes(value) -> int:
    """Bytes of a tensor, or of every tensor in a tuple (numbers count nothing)."""
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, (tuple, list)):
        return sum(nbytes(v) for v in value)
    return 0


@dataclass(frozen=True)
class Workload:
    """One benchmark: the babytriton and torch functions, inputs per size, the ideal traffic."""
    name: str
    bt_fn: Callable
    torch_fn: Callable
    shapes: dict                  # size ("small" | "medium" | "full") -> the shapes `inputs` takes
    inputs: Callable              # (shapes, dtype, device) -> the arguments
    dtype: torch.dtype = torch.float32
    flops: Callable | None = None  # (args) -> floating-point operations, for matrix products

    def make(self, size: str, device: str = "cpu") -> tuple:
        """The arguments at `size`, from a fixed seed (the same inputs every run)."""
        torch.manual_seed(0)
        return self.inputs(self.shapes[size], self.dtype, device)

    def tolerance(self) -> float:
        """rtol = atol for comparing with torch on the same inputs: float32 1e-4, float16 1e-2,
        bfloat16 3e-2 (its 8-bit mantissa; intermediates round at different points than torch's)."""
        return {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 3e-2}[self.dtype]

    def bytes_moved(self, args: tuple, out) -> int:
        """What an ideal kernel reads and writes: every input once, every output once."""
        return nbytes(args) + nbytes(out)


def _randn(shapes, dtype, device):
    return tuple(torch.randn(*s, dtype=torch.float32).to(device=device, dtype=dtype) for s in shapes)


def _positive(shapes, dtype, device):
    """Like _randn, with a last tensor of non-negative values (AdamW's second moment)."""
    *rest, last = _randn(shapes, dtype, device)
    return (*rest, last.abs())


def _adamw_inputs(shapes, dtype, device):
    p, g, m, v = _positive(shapes, dtype, device)
    return p, g, m, v, 1e-3, 10


def _mlp_inputs(shapes, dtype, device):
    """Weights scaled by 1/sqrt(fan-in), as initialisers do (keeps activations near 1 in bfloat16)."""
    torch_args = [torch.randn(*s, dtype=torch.float32) for s in shapes]
    x, w1, b1, w2, b2 = torch_args
    w1, w2 = w1 / math.sqrt(w1.shape[0]), w2 / math.sqrt(w2.shape[0])
    return tuple(t.to(device=device, dtype=dtype) for t in (x, w1, b1, w2, b2))


def _cross_entropy_inputs(shapes, dtype, device):
    (rows, classes), = shapes
    logits, = _randn(shapes, dtype, device)
    return logits, torch.randint(0, classes, (rows,), dtype=torch.int64).to(device)


def _same(count, small, full, medium=None):
    """`count` tensors of one shape (`medium` defaults to `full`)."""
    return {"small": [small] * count, "medium": [medium or full] * count, "full": [full] * count}


ROWS_SMALL, ROWS_MEDIUM, ROWS_FULL = (32, 256), (1024, 4096), (4096, 4096)
SYM_SMALL, SYM_MEDIUM, SYM_FULL = (8, WIDTH), (1024, WIDTH), (4096, WIDTH)
N_SMALL, N_MEDIUM, N_FULL = (1 << 14,), (1 << 22,), (1 << 26,)


def _layernorm_shapes(rows):
    return {size: [shape, (shape[1],), (shape[1],)] for size, shape in rows.items()}


def _rmsnorm_shapes(rows):
    return {size: [shape, (shape[1],)] for size, shape in rows.items()}


ROWS = {"small": ROWS_SMALL, "medium": ROWS_MEDIUM, "full": ROWS_FULL}
SYM_ROWS = {"small": SYM_SMALL, "medium": SYM_MEDIUM, "full": SYM_FULL}
F16, BF16 = torch.float16, torch.bfloat16


def _w(name, bt_fn, torch_fn, shapes, inputs=_randn, **kw):
    return Workload(name, bt_fn, torch_fn, shapes, inputs, **kw)


def _mm_flops(args):
    a, b = args
    return 2 * a.shape[0] * a.shape[1] * b.shape[1]


def _attention_flops(args):
    q, k, v = args
    b, h, s, d = q.shape
    return 4 * b * h * s * s * d


def _mlp_flops(args):
    x, w1, _, w2, _ = args
    return 2 * x.shape[0] * w1.shape[0] * w1.shape[1] + 2 * x.shape[0] * w2.shape[0] * w2.shape[1]


_ROW = {size: [shape] for size, shape in ROWS.items()}
_LN = _layernorm_shapes(ROWS)
_RMS = _rmsnorm_shapes(ROWS)
_ATTN = {"small": [(2, 2, 16, 16)] * 3, "medium": [(1, 8, 512, 64)] * 3, "full": [(4, 16, 1024, 64)] * 3}
_MLP = {"small": [(16, 32), (32, 128), (128,), (128, 32), (32,)],
        "medium": [(512, 512), (512, 2048), (2048,), (2048, 512), (512,)],
        "full": [(4096, 1024), (1024, 4096), (4096,), (4096, 1024), (1024,)]}
_MM = {"small": [(64, 64), (64, 64)], "medium": [(512, 512), (512, 512)], "full": [(2048, 2048), (2048, 2048)]}
_BRLN = {size: [shape, (shape[1],), shape, (shape[1],), (shape[1],)] for size, shape in ROWS.items()}
_CAUSAL = {"small": [(2, 4, 32, 32)], "medium": [(1, 4, 1024, 1024)], "full": [(4, 16, 1024, 1024)]}
_ROTARY = {"small": [(2, 8, 4, 32), (8, 1, 32), (8, 1, 32)],  # (batch, seq, heads, dim), cos, sin
           "medium": [(2, 512, 16, 128), (512, 1, 128), (512, 1, 128)],
           "full": [(8, 2048, 16, 128), (2048, 1, 128), (2048, 1, 128)]}

WORKLOADS: list[Workload] = [
    # element-wise chains
    _w("elementwise", bt_elementwise, torch_elementwise, _same(2, N_SMALL, N_FULL, N_MEDIUM)),
    _w("elementwise_fp16", bt_elementwise, torch_elementwise, _same(2, N_SMALL, N_FULL, N_MEDIUM), dtype=F16),
    _w("elementwise_long", bt_elementwise_long, torch_elementwise_long, _same(3, N_SMALL, N_FULL, N_MEDIUM)),
    _w("gelu_tanh", bt_gelu_tanh, torch_gelu_tanh, _same(1, N_SMALL, N_FULL, N_MEDIUM)),
    _w("gelu_tanh_fp16", bt_gelu_tanh, torch_gelu_tanh, _same(1, N_SMALL, N_FULL, N_MEDIUM), dtype=F16),
    _w("gelu_erf", bt_gelu_erf, torch_gelu_erf, _same(1, N_SMALL, N_FULL, N_MEDIUM)),
    _w("swiglu", bt_swiglu, torch_swiglu, _same(2, N_SMALL, N_FULL, N_MEDIUM)),
    _w("swiglu_bf16", bt_swiglu, torch_swiglu, _same(2, N_SMALL, N_FULL, N_MEDIUM), dtype=BF16),
    _w("rotary", bt_rotary, torch_rotary, _ROTARY),
    _w("adamw", bt_adamw, torch_adamw, _same(4, N_SMALL, (1 << 24,), N_MEDIUM), inputs=_adamw_inputs),
    # row-wise normalisations and softmaxes
    _w("softmax", bt_softmax, torch_softmax, _ROW),
    _w("softmax_fp16", bt_softmax, torch_softmax, _ROW, dtype=F16),
    _w("softmax_bf16", bt_softmax, torch_softmax, _ROW, dtype=BF16),
    _w("softmax_sym", bt_softmax_sym, torch_softmax, {s: [shape] for s, shape in SYM_ROWS.items()}),
    _w("softmax_lib", bt_softmax_lib, torch_softmax_lib, _ROW),
    _w("log_softmax", bt_log_softmax, torch_log_softmax, _ROW),
    _w("causal_softmax", bt_causal_softmax, torch_causal_softmax, _CAUSAL),
    _w("causal_softmax_additive", bt_causal_softmax_additive, torch_causal_softmax_additive, _CAUSAL),
    _w("logsumexp", bt_logsumexp, torch_logsumexp, _ROW),
    _w("cross_entropy", bt_cross_entropy, torch_cross_entropy,
       {"small": [(32, 100)], "medium": [(256, 32000)], "full": [(8192, 32000)]}, inputs=_cross_entropy_inputs),
    _w("layernorm", bt_layernorm, torch_layernorm, _LN),
    _w("layernorm_fp16", bt_layernorm, torch_layernorm, _LN, dtype=F16),
    _w("layernorm_sym", bt_layernorm_sym, torch_layernorm, _layernorm_shapes(SYM_ROWS)),
    _w("layer_norm_lib", bt_layer_norm_lib, torch_layer_norm_lib, _LN),
    _w("rmsnorm", bt_rmsnorm, torch_rmsnorm, _RMS),
    _w("rmsnorm_fp16", bt_rmsnorm, torch_rmsnorm, _RMS, dtype=F16),
    _w("rmsnorm_bf16", bt_rmsnorm, torch_rmsnorm, _RMS, dtype=BF16),
    _w("rmsnorm_sym", bt_rmsnorm_sym, torch_rmsnorm, _rmsnorm_shapes(SYM_ROWS)),
    _w("bias_residual_layernorm", bt_bias_residual_layernorm, torch_bias_residual_layernorm, _BRLN),
    # reductions
    _w("variance", bt_variance, torch_variance, _ROW),
    _w("std", bt_std, torch_std, _ROW),
    _w("row_sum", bt_row_sum, torch_row_sum, _ROW),
    _w("mean_4096", bt_mean_all, torch_mean_all, _same(1, (4096,), (4096,))),
    _w("sum_all", bt_sum_all, torch_sum_all, _same(1, (256, 256), (4096, 4096), (2048, 2048))),
    _w("col_sum", bt_col_sum, torch_col_sum, _ROW),
    _w("mid_axis_sum", bt_mid_sum, torch_mid_sum, _same(1, (4, 32, 8), (64, 512, 64), (32, 512, 64))),
    # matrix products
    _w("attention", bt_attention, torch_attention, _ATTN, flops=_attention_flops),
    _w("attention_fp16", bt_attention, torch_attention, _ATTN, dtype=F16, flops=_attention_flops),
    _w("mlp", bt_mlp, torch_mlp, _MLP, inputs=_mlp_inputs, flops=_mlp_flops),
    _w("mlp_bf16", bt_mlp, torch_mlp, _MLP, inputs=_mlp_inputs, dtype=BF16, flops=_mlp_flops),
    _w("matmul_fp32", bt_matmul, torch_matmul, _MM, flops=_mm_flops),
    _w("matmul_fp16", bt_matmul, torch_matmul, _MM, dtype=F16, flops=_mm_flops),
]


# Forward+backward: these workloads are also timed as `out = f(*args); out.backward(g)` (a loss's
# `loss.backward()`) with every floating-point tensor argument requiring grad; bench.py's second table.
BACKWARD: tuple[str, ...] = ("gelu_tanh", "gelu_erf", "softmax", "log_softmax", "cross_entropy", "layernorm",
                             "rmsnorm")


def by_name(name: str) -> Workload:
    for w in WORKLOADS:
        if w.name == name:
            return w
    raise KeyError(f"no workload {name!r}; known: {', '.join(w.name for w in WORKLOADS)}")
