"""The programs of issue 28 written outside the project: PyTorch code as its users write it, at the
sizes they run it (8192x4096 activations, 64 experts x 32768 tokens, 16x256x64x64 images).

A second program set for the performance fuzzer (`python benchmarks/perf_fuzz.py --set outside`):
each function is plain PyTorch (the runner compiles it with babytriton and with torch.compile, and
runs it eagerly as the reference), registered with the `Arg` specs of its inputs at full size and at
a small size (`--small`, CI). The issue's 28: group norm, instance norm, batch-norm inference, L2
normalisation, cosine similarity, residual + RMSNorm, GEGLU, Mish, hardswish, soft-capped softmax,
masked softmax, an MoE router, KL divergence, label-smoothed cross-entropy, MSE, int8 quantisation,
mean/max pooling over a sequence, `a + b.T`, an outer product, cumsum, SGD with momentum, ALiBi
attention, `erf(x) * s`, `round(x / s)`, `x * rsqrt(s)`, `h * erf(g)` of two split halves, max over a
middle axis, and half-precision element-wise chains (here two: a float16 clamp polynomial and a
bfloat16 gated chain).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from perf_programs import Arg


@dataclass(frozen=True)
class Outside:
    name: str
    fn: object
    full: tuple
    small: tuple
    tags: tuple = ()


PROGRAMS: list[Outside] = []


def program(full: list[Arg], small: list[Arg], *tags: str):
    def register(fn):
        PROGRAMS.append(Outside(fn.__name__, fn, tuple(full), tuple(small), tags))
        return fn
    return register


def A(name: str, shape: tuple, dtype: str = "float32", fill: str = "randn", view=None, high: int = 0) -> Arg:
    return Arg(name, shape, dtype, fill, view, high)


def by_name(name: str) -> Outside:
    return next(p for p in PROGRAMS if p.name == name)


ACT, ACT_SMALL = (8192, 4096), (64, 96)     # activations: tokens x hidden
IMG, IMG_SMALL = (16, 256, 64, 64), (2, 64, 4, 4)


# --------------------------------------------------------------------------------------------------
# norms
# --------------------------------------------------------------------------------------------------

@program([A("x", IMG), A("weight", (256,)), A("bias", (256,))],
         [A("x", IMG_SMALL), A("weight", (64,)), A("bias", (64,))], "norm")
def group_norm(x, weight, bias):
    n, c, h, w = x.shape
    g = x.reshape(n, 32, -1)
    mean = g.mean(-1, keepdim=True)
    var = g.var(-1, keepdim=True, unbiased=False)
    g = (g - mean) / torch.sqrt(var + 1e-5)
    return g.reshape(n, c, h, w) * weight[None, :, None, None] + bias[None, :, None, None]


@program([A("x", IMG)], [A("x", IMG_SMALL)], "norm")
def instance_norm(x):
    mean = x.mean(dim=(2, 3), keepdim=True)
    var = x.var(dim=(2, 3), keepdim=True, unbiased=False)
    return (x - mean) * torch.rsqrt(var + 1e-5)


@program([A("x", (64, 256, 28, 28)), A("running_mean", (256,)), A("running_var", (256,), fill="positive"),
          A("weight", (256,)), A("bias", (256,))],
         [A("x", (4, 16, 5, 5)), A("running_mean", (16,)), A("running_var", (16,), fill="positive"),
          A("weight", (16,)), A("bias", (16,))], "norm")
def batch_norm_inference(x, running_mean, running_var, weight, bias):
    return F.batch_norm(x, running_mean, running_var, weight, bias, training=False, eps=1e-5)


@program([A("x", ACT)], [A("x", ACT_SMALL)], "norm")
def l2_normalise(x):
    return F.normalize(x, p=2.0, dim=-1)


@program([A("a", ACT), A("b", ACT)], [A("a", ACT_SMALL), A("b", ACT_SMALL)], "norm")
def cosine_similarity(a, b):
    return F.cosine_similarity(a, b, dim=-1)


@program([A("x", ACT, "bfloat16"), A("residual", ACT, "bfloat16"), A("weight", ACT[-1:], "bfloat16")],
         [A("x", ACT_SMALL, "bfloat16"), A("residual", ACT_SMALL, "bfloat16"), A("weight", ACT_SMALL[-1:], "bfloat16")],
         "norm", "bfloat16")
def residual_rmsnorm(x, residual, weight):
    h = x + residual
    hf = h.float()
    out = hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + 1e-6)
    return out.to(x.dtype) * weight, h


# --------------------------------------------------------------------------------------------------
# activations
# --------------------------------------------------------------------------------------------------

@program([A("x", (8192, 8192), "bfloat16")], [A("x", (64, 192), "bfloat16")], "pointwise", "bfloat16")
def geglu(x):
    a, gate = x.chunk(2, dim=-1)
    return a * F.gelu(gate)


@program([A("x", ACT)], [A("x", ACT_SMALL)], "pointwise")
def mish(x):
    return x * torch.tanh(F.softplus(x))


@program([A("x", ACT)], [A("x", ACT_SMALL)], "pointwise")
def hardswish(x):
    return x * F.relu6(x + 3.0) / 6.0


# --------------------------------------------------------------------------------------------------
# softmaxes and losses
# --------------------------------------------------------------------------------------------------

@program([A("scores", (8, 16, 512, 512))], [A("scores", (2, 2, 8, 33))], "softmax")
def softcap_softmax(scores, cap=50.0):
    return torch.softmax(cap * torch.tanh(scores / cap), dim=-1)


@program([A("scores", (8, 16, 512, 512)), A("padding", (8, 1, 1, 512), "bool", "mask")],
         [A("scores", (2, 2, 8, 33)), A("padding", (2, 1, 1, 33), "bool", "mask")], "softmax")
def masked_softmax(scores, padding):
    return scores.masked_fill(padding, float("-inf")).softmax(dim=-1)


@program([A("logits", (32768, 64))], [A("logits", (100, 64))], "softmax", "max-argmax")
def moe_router(logits):
    probs = torch.softmax(logits, dim=-1)
    return probs, probs.max(dim=-1).values, probs.argmax(dim=-1)


@program([A("student", ACT), A("teacher", ACT)], [A("student", ACT_SMALL), A("teacher", ACT_SMALL)], "loss")
def kl_divergence(student, teacher, temperature=2.0):
    log_p = F.log_softmax(student / temperature, dim=-1)
    q = F.softmax(teacher / temperature, dim=-1)
    return F.kl_div(log_p, q, reduction="batchmean") * temperature ** 2


@program([A("logits", (2048, 32000)), A("target", (2048,), "int64", "index", high=32000)],
         [A("logits", (16, 1000)), A("target", (16,), "int64", "index", high=1000)], "loss")
def label_smoothed_cross_entropy(logits, target):
    return F.cross_entropy(logits, target, label_smoothing=0.1)


@program([A("pred", ACT), A("target", ACT)], [A("pred", ACT_SMALL), A("target", ACT_SMALL)], "loss")
def mse(pred, target):
    return ((pred - target) ** 2).mean()


# --------------------------------------------------------------------------------------------------
# quantisation, pooling, layouts
# --------------------------------------------------------------------------------------------------

@program([A("x", ACT)], [A("x", ACT_SMALL)], "quantise")
def int8_quantise(x):
    scale = x.abs().amax(dim=-1, keepdim=True) / 127.0
    q = torch.clamp(torch.round(x / scale), -128, 127).to(torch.int8)
    return q, scale


@program([A("x", (64, 512, 1024))], [A("x", (2, 16, 24))], "reduce")
def sequence_pooling(x):
    return x.mean(dim=1), x.amax(dim=1)


@program([A("a", ACT), A("b", ACT[::-1])], [A("a", ACT_SMALL), A("b", ACT_SMALL[::-1])], "transpose")
def add_transposed(a, b):
    return a + b.T


@program([A("a", (8192,)), A("b", (4096,))], [A("a", (64,)), A("b", (96,))], "outer")
def outer_product(a, b):
    return a[:, None] * b[None, :]


@program([A("x", ACT)], [A("x", ACT_SMALL)], "scan")
def cumsum(x):
    return torch.cumsum(x, dim=-1)


@program([A("param", (1 << 24,)), A("grad", (1 << 24,)), A("buf", (1 << 24,))],
         [A("param", (1000,)), A("grad", (1000,)), A("buf", (1000,))], "optimizer")
def sgd_momentum(param, grad, buf, lr=0.01, momentum=0.9, weight_decay=1e-4):
    d_p = grad.add(param, alpha=weight_decay)
    buf.mul_(momentum).add_(d_p)
    param.add_(buf, alpha=-lr)


@program([A("q", (4, 16, 1024, 64)), A("k", (4, 16, 1024, 64)), A("v", (4, 16, 1024, 64)), A("slopes", (16,), fill="positive")],
         [A("q", (1, 2, 16, 8)), A("k", (1, 2, 16, 8)), A("v", (1, 2, 16, 8)), A("slopes", (2,), fill="positive")],
         "attention")
def alibi_attention(q, k, v, slopes):
    T = q.shape[-2]
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    pos = torch.arange(T, device=q.device)
    bias = slopes[:, None, None] * (pos[None, :] - pos[:, None])
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    scores = (scores + bias).masked_fill(~causal, float("-inf"))
    return scores.softmax(dim=-1) @ v


# --------------------------------------------------------------------------------------------------
# broadcasts along the last axis, split halves, a middle axis, half precision
# --------------------------------------------------------------------------------------------------

@program([A("x", ACT), A("s", (ACT[0], 1))], [A("x", ACT_SMALL), A("s", (ACT_SMALL[0], 1))], "pointwise")
def erf_scaled(x, s):
    return torch.erf(x) * s


@program([A("x", ACT), A("s", (ACT[0], 1), fill="positive")],
         [A("x", ACT_SMALL), A("s", (ACT_SMALL[0], 1), fill="positive")], "pointwise")
def round_divided(x, s):
    return torch.round(x / s)


@program([A("x", ACT), A("s", (ACT[0], 1), fill="positive")],
         [A("x", ACT_SMALL), A("s", (ACT_SMALL[0], 1), fill="positive")], "pointwise")
def rsqrt_scaled(x, s):
    return x * torch.rsqrt(s)


@program([A("x", (8192, 8192))], [A("x", (64, 192))], "halves")
def split_erf(x):
    h, g = torch.split(x, x.shape[-1] // 2, dim=-1)
    return h * torch.erf(g)


@program([A("x", (256, 1024, 256))], [A("x", (4, 33, 24))], "reduce")
def max_middle_axis(x):
    return x.amax(dim=1)


@program([A("x", ACT, "float16"), A("y", ACT, "float16")], [A("x", ACT_SMALL, "float16"), A("y", ACT_SMALL, "float16")],
         "pointwise", "float16")
def clamp_polynomial_fp16(x, y):
    t = torch.clamp(x, -2.0, 2.0)
    return 0.5 * t * t * t - 1.5 * t + y


@program([A("x", ACT, "bfloat16"), A("y", ACT, "bfloat16")], [A("x", ACT_SMALL, "bfloat16"), A("y", ACT_SMALL, "bfloat16")],
         "pointwise", "bfloat16")
def gated_chain_bf16(x, y):
    return torch.sigmoid(x) * y + torch.tanh(x * 0.5) - 0.25 * y
