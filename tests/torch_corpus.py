"""An acceptance corpus of PyTorch code as people write it: norms, rotary embeddings, attention,
MLPs, losses, optimizer steps, routing, sampling, quantisation, pooling and everyday tensor idioms,
in the style of nanoGPT, Llama, Mistral/Mixtral, HF transformers, timm, torchtune and torch.optim's
functional (single-tensor) optimizers.

Every function here is plain PyTorch (no decorator, nothing babytriton-specific): parameters are
passed as tensors (no nn.Module), helpers are ordinary undecorated functions, config values are
module-level constants, default arguments or Python numbers passed in. tests/codegen/pytorch/test_torch_corpus.py
runs each one under torch and under `bt.jit`.

CORPUS is the registry: one `Case` per function with
- `make_inputs(device)`: a tuple of fresh tensors / Python numbers, from a fixed torch.Generator seed
  (made on the CPU, then moved, so CPU and CUDA inputs hold the same values);
- `grad`: False, True (every floating-point tensor argument) or a tuple of argument names to
  differentiate;
- `tol`: (rtol, atol) for floating-point results (None: by dtype, see DEFAULT_TOL), `grad_tol` the
  same for gradients;
- `inplace`: names of the arguments the function updates in place (every other argument must come
  back untouched);
- `kernels`: where set, the most compiled kernels the function may take.
"""
import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Case:
    name: str
    fn: object
    make_inputs: object
    grad: object = False
    tol: tuple = None
    grad_tol: tuple = None
    inplace: tuple = ()
    kernels: int = None
    category: str = ""


# (rtol, atol) by result dtype, forward and backward
DEFAULT_TOL = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-5, 1e-5),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1.6e-2, 1e-2),
}
DEFAULT_GRAD_TOL = {
    torch.float64: (1e-7, 1e-7),
    torch.float32: (1e-4, 1e-5),
    torch.float16: (4e-3, 4e-3),
    torch.bfloat16: (3.2e-2, 3e-2),
}
# optimizer steps: the caller's state must be what torch's in-place ops write, to an ulp or two
STEP_TOL = (2e-6, 1e-8)


class Maker:
    """Deterministic inputs: values drawn on the CPU from one seeded generator, then moved."""

    def __init__(self, device, seed=0):
        self.g = torch.Generator().manual_seed(seed)
        self.device = device

    def randn(self, *shape, dtype=torch.float32, scale=1.0):
        return (torch.randn(*shape, generator=self.g) * scale).to(dtype).to(self.device)

    def rand(self, *shape, dtype=torch.float32, low=0.0, high=1.0):
        x = torch.rand(*shape, generator=self.g) * (high - low) + low
        return x.to(dtype).to(self.device)

    def randint(self, low, high, *shape, dtype=torch.int64):
        return torch.randint(low, high, shape, generator=self.g).to(dtype).to(self.device)

    def mask(self, *shape, p=0.5):
        return (torch.rand(*shape, generator=self.g) < p).to(self.device)

    def lengths_mask(self, B, T, lengths):
        """A padding mask (B, T) of bools, True on the first lengths[b] positions of each row."""
        return (torch.arange(T)[None, :] < torch.tensor(lengths)[:, None]).to(self.device)


CORPUS = []


def case(category, make_inputs, **kw):
    def register(fn):
        CORPUS.append(Case(fn.__name__, fn, make_inputs, category=category, **kw))
        return fn
    return register


B, T, H, D = 2, 8, 4, 16
C = H * D
VOCAB = 50


# ------------------------------------------------------------------------------------------------
# Norms
# ------------------------------------------------------------------------------------------------

def _norm(x, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


@case("norm", lambda d: (Maker(d).randn(B, T, C, dtype=torch.bfloat16),
                         Maker(d, 1).randn(C, dtype=torch.bfloat16, scale=0.1) + 1),
      grad=True, kernels=2)
def rmsnorm_llama(x, weight, eps=1e-6):
    # Meta Llama's RMSNorm.forward
    output = _norm(x.float(), eps).type_as(x)
    return output * weight


@case("norm", lambda d: (Maker(d).randn(B, T, C), Maker(d, 1).randn(C)), grad=True, kernels=2)
def rmsnorm_fp32(x, w):
    eps = 1e-5
    return x / torch.sqrt(torch.mean(x * x, dim=-1, keepdim=True) + eps) * w


@case("norm", lambda d: (Maker(d).randn(B, T, C, dtype=torch.float16),
                         Maker(d, 1).randn(C, dtype=torch.float16, scale=0.1)),
      grad=True, kernels=2)
def rmsnorm_gemma(hidden_states, weight):
    # HF Gemma: computes in float32, scales by (1 + weight), casts back
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + 1e-6)
    output = hidden_states * (1.0 + weight.float())
    return output.to(input_dtype)


@case("norm", lambda d: (Maker(d).randn(B, T, C), Maker(d, 1).randn(C), Maker(d, 2).randn(C)),
      grad=True)
def layernorm_functional(x, weight, bias):
    return F.layer_norm(x, (x.size(-1),), weight, bias, eps=1e-5)


@case("norm", lambda d: (Maker(d).randn(B, T, C), Maker(d, 1).randn(C)), grad=True)
def layernorm_nanogpt_nobias(x, weight, bias=None):
    # nanoGPT's LayerNorm with an optional bias
    return F.layer_norm(x, weight.shape, weight, bias, 1e-5)


@case("norm", lambda d: (Maker(d).randn(B, T, C, scale=3.0), Maker(d, 1).randn(C), Maker(d, 2).randn(C)),
      grad=True, kernels=2)
def layernorm_by_hand(x, gamma, beta):
    eps = 1e-5
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    x_hat = (x - mean) / torch.sqrt(var + eps)
    return x_hat * gamma + beta


@case("norm", lambda d: (Maker(d).randn(B, T, C), Maker(d, 1).randn(C), Maker(d, 2).randn(C)),
      grad=True)
def layernorm_var_unbiased_false(x, w, b):
    mu = x.mean(dim=-1, keepdim=True)
    sigma2 = x.var(dim=-1, keepdim=True, unbiased=False)
    return w * (x - mu) / (sigma2 + 1e-6).sqrt() + b


@case("norm", lambda d: (Maker(d).randn(2, 16, 4, 4), Maker(d, 1).randn(16), Maker(d, 2).randn(16)),
      grad=True)
def groupnorm_functional(x, weight, bias):
    return F.group_norm(x, 4, weight, bias, eps=1e-5)


# ------------------------------------------------------------------------------------------------
# Rotary embeddings
# ------------------------------------------------------------------------------------------------

def rotate_half(x):
    """Rotates half the hidden dims of the input."""
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
    # HF transformers (Llama, Mistral, Qwen2)
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def _cos_sin(d, shape, seed=5):
    angles = Maker(d, seed).rand(*shape, high=6.0)
    return angles.cos(), angles.sin()


@case("rotary", lambda d: (Maker(d).randn(B, H, T, D), Maker(d, 1).randn(B, H, T, D),
                           *_cos_sin(d, (B, T, D))),
      grad=True, kernels=2)
def rope_hf_qk(q, k, cos, sin):
    return apply_rotary_pos_emb(q, k, cos, sin)


@case("rotary", lambda d: (Maker(d).randn(B, T, H, D), *_cos_sin(d, (T, D))), grad=True, kernels=1)
def rope_single(x, cos, sin):
    # x: (B, T, H, D) as after q.view(B, T, H, D); cos, sin: (T, D)
    return x * cos[:, None, :] + rotate_half(x) * sin[:, None, :]


@case("rotary", lambda d: (Maker(d).randn(B, H, T, D, dtype=torch.float16),
                           *[t.to(torch.float16) for t in _cos_sin(d, (B, T, D))]),
      grad=True, kernels=1)
def rope_half_unsqueeze(x, cos, sin):
    return (x * cos.unsqueeze(1)) + (rotate_half(x) * sin.unsqueeze(1))


@case("rotary", lambda d: (Maker(d).randn(B, T, H, D), *_cos_sin(d, (T, D // 2))), grad=True)
def rope_interleaved(x, cos, sin):
    # GPT-J / Meta-Llama style pairs (x[2i], x[2i+1]), without complex numbers
    x1 = x[..., ::2]
    x2 = x[..., 1::2]
    cos = cos[None, :, None, :]
    sin = sin[None, :, None, :]
    out1 = x1 * cos - x2 * sin
    out2 = x1 * sin + x2 * cos
    return torch.stack((out1, out2), dim=-1).flatten(-2)


ROTARY_DIM = 8


@case("rotary", lambda d: (Maker(d).randn(B, H, T, D), Maker(d, 1).randn(B, H, T, D),
                           *_cos_sin(d, (B, T, ROTARY_DIM))),
      grad=True)
def rope_partial_neox(query, key, cos, sin):
    # GPT-NeoX / Phi: rotate only the first rotary_ndims channels
    query_rot = query[..., :ROTARY_DIM]
    query_pass = query[..., ROTARY_DIM:]
    key_rot = key[..., :ROTARY_DIM]
    key_pass = key[..., ROTARY_DIM:]
    query, key = apply_rotary_pos_emb(query_rot, key_rot, cos, sin)
    query = torch.cat((query, query_pass), dim=-1)
    key = torch.cat((key, key_pass), dim=-1)
    return query, key


@case("rotary", lambda d: (Maker(d).randn(B, H, T, D),), grad=True)
def rope_compute_freqs(x, base=10000.0):
    # the rotary embedding module's forward: inv_freq, positions, outer product, cos/sin
    dim = x.shape[-1]
    seq_len = x.shape[-2]
    inv_freq = 1.0 / (base ** (torch.arange(0, dim, 2, device=x.device).float() / dim))
    t = torch.arange(seq_len, device=x.device, dtype=inv_freq.dtype)
    freqs = torch.outer(t, inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
    return x * cos + rotate_half(x) * sin


# ------------------------------------------------------------------------------------------------
# Attention
# ------------------------------------------------------------------------------------------------

N_HEAD = H


def _nanogpt_inputs(d):
    m = Maker(d)
    return (m.randn(B, T, C), m.randn(3 * C, C, scale=0.1), m.randn(3 * C, scale=0.1),
            m.randn(C, C, scale=0.1), m.randn(C, scale=0.1))


@case("attention", _nanogpt_inputs, grad=True, tol=(1e-4, 1e-5))
def attention_nanogpt(x, c_attn_w, c_attn_b, c_proj_w, c_proj_b):
    B, T, C = x.size()
    q, k, v = F.linear(x, c_attn_w, c_attn_b).split(C, dim=2)
    k = k.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)
    q = q.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)
    v = v.view(B, T, N_HEAD, C // N_HEAD).transpose(1, 2)
    mask = torch.tril(torch.ones(T, T, device=x.device)).view(1, 1, T, T)
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
    att = att.masked_fill(mask[:, :, :T, :T] == 0, float('-inf'))
    att = F.softmax(att, dim=-1)
    y = att @ v
    y = y.transpose(1, 2).contiguous().view(B, T, C)
    return F.linear(y, c_proj_w, c_proj_b)


@case("attention", lambda d: (Maker(d).randn(B, H, T, D), Maker(d, 1).randn(B, H, T, D),
                              Maker(d, 2).randn(B, H, T, D)),
      grad=True, tol=(1e-4, 1e-5))
def attention_sdpa_causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=True)


@case("attention", lambda d: (Maker(d).randn(B, T, C), Maker(d, 1).randn(B, T, C),
                              Maker(d, 2).randn(B, T, C), Maker(d).lengths_mask(B, T, [T, 5])),
      grad=("q", "k", "v"), tol=(1e-4, 1e-5))
def attention_sdpa_padding_mask(q, k, v, key_padding_mask):
    # heads split with reshape/permute, a (B, 1, 1, T) boolean mask, heads merged back
    B, T, _ = q.shape
    q = q.reshape(B, T, N_HEAD, -1).permute(0, 2, 1, 3)
    k = k.reshape(B, T, N_HEAD, -1).permute(0, 2, 1, 3)
    v = v.reshape(B, T, N_HEAD, -1).permute(0, 2, 1, 3)
    attn_mask = key_padding_mask[:, None, None, :]
    out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
    return out.permute(0, 2, 1, 3).reshape(B, T, -1)


def repeat_kv(x, n_rep: int):
    """torch.repeat_interleave(x, dim=2, repeats=n_rep)"""
    bs, slen, n_kv_heads, head_dim = x.shape
    if n_rep == 1:
        return x
    return (
        x[:, :, :, None, :]
        .expand(bs, slen, n_kv_heads, n_rep, head_dim)
        .reshape(bs, slen, n_kv_heads * n_rep, head_dim)
    )


@case("attention", lambda d: (Maker(d).randn(B, T, H, D), Maker(d, 1).randn(B, T, 2, D),
                              Maker(d, 2).randn(B, T, 2, D)),
      grad=True, tol=(1e-4, 1e-5))
def attention_llama_gqa(xq, keys, values):
    # Meta Llama's Attention.forward after the projections: GQA via repeat_kv, additive causal mask,
    # softmax in float32
    bsz, seqlen, n_heads, head_dim = xq.shape
    n_rep = n_heads // keys.shape[2]
    keys = repeat_kv(keys, n_rep)
    values = repeat_kv(values, n_rep)
    mask = torch.full((seqlen, seqlen), float("-inf"), device=xq.device)
    mask = torch.triu(mask, diagonal=1)
    xq = xq.transpose(1, 2)
    keys = keys.transpose(1, 2)
    values = values.transpose(1, 2)
    scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(head_dim)
    scores = scores + mask
    scores = F.softmax(scores.float(), dim=-1).type_as(xq)
    output = torch.matmul(scores, values)
    return output.transpose(1, 2).contiguous().view(bsz, seqlen, -1)


@case("attention", lambda d: (Maker(d).randn(B, H, T, D), Maker(d, 1).randn(B, H, T, D),
                              Maker(d, 2).randn(B, H, T, D), Maker(d).lengths_mask(B, T, [6, T]).long()),
      grad=("query", "key", "value"), tol=(1e-4, 1e-5))
def attention_bert_extended_mask(query, key, value, attention_mask):
    # HF BERT: (1 - mask) * finfo.min added to the scores
    dtype = query.dtype
    extended = attention_mask[:, None, None, :].to(dtype=dtype)
    extended = (1.0 - extended) * torch.finfo(dtype).min
    scores = torch.matmul(query, key.transpose(-1, -2))
    scores = scores / math.sqrt(query.size(-1))
    scores = scores + extended
    probs = nn_softmax(scores)
    return torch.matmul(probs, value)


def nn_softmax(x):
    return torch.softmax(x, dim=-1)


@case("attention", lambda d: (Maker(d).randn(B, H, T, D), Maker(d, 1).randn(B, H, T, D),
                              Maker(d, 2).randn(B, H, T, D)),
      grad=True, tol=(1e-4, 1e-5))
def attention_alibi_einsum(q, k, v):
    B, H, T, D = q.shape
    slopes = torch.pow(2.0, -8.0 * torch.arange(1, H + 1, device=q.device) / H)
    pos = torch.arange(T, device=q.device)
    rel = pos[None, :] - pos[:, None]
    bias = slopes[:, None, None] * rel[None, :, :]
    scores = torch.einsum('bhqd,bhkd->bhqk', q, k) / math.sqrt(D) + bias
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    scores = scores.masked_fill(~causal, float('-inf'))
    return torch.einsum('bhqk,bhkd->bhqd', scores.softmax(dim=-1), v)


def _kv_cache_inputs(d):
    m = Maker(d)
    return (m.randn(B, 1, H, D), m.randn(B, T, H, D), m.randn(B, T, H, D),
            m.randn(B, 1, H, D), m.randn(B, 1, H, D), 5)


@case("attention", _kv_cache_inputs, inplace=("cache_k", "cache_v"), tol=(1e-4, 1e-5))
def attention_kv_cache_decode(xq, cache_k, cache_v, xk, xv, start_pos: int):
    # Meta Llama's decode step: write the new key/value into the caller's cache, attend over it
    bsz, seqlen, _, head_dim = xq.shape
    cache_k[:bsz, start_pos : start_pos + seqlen] = xk
    cache_v[:bsz, start_pos : start_pos + seqlen] = xv
    keys = cache_k[:bsz, : start_pos + seqlen]
    values = cache_v[:bsz, : start_pos + seqlen]
    xq = xq.transpose(1, 2)
    keys = keys.transpose(1, 2)
    values = values.transpose(1, 2)
    scores = torch.matmul(xq, keys.transpose(2, 3)) / math.sqrt(head_dim)
    scores = F.softmax(scores.float(), dim=-1).type_as(xq)
    output = torch.matmul(scores, values)
    return output.transpose(1, 2).contiguous().view(bsz, seqlen, -1)


# ------------------------------------------------------------------------------------------------
# MLPs and activations
# ------------------------------------------------------------------------------------------------

HIDDEN = 96


@case("mlp", lambda d: (Maker(d).randn(B, T, C), Maker(d, 1).randn(HIDDEN, C, scale=0.1),
                        Maker(d, 2).randn(C, HIDDEN, scale=0.1), Maker(d, 3).randn(HIDDEN, C, scale=0.1)),
      grad=True, tol=(1e-4, 1e-5))
def swiglu_llama(x, w1, w2, w3):
    # Llama FeedForward: w2(F.silu(w1(x)) * w3(x))
    return F.linear(F.silu(F.linear(x, w1)) * F.linear(x, w3), w2)


@case("mlp", lambda d: (Maker(d).randn(B, T, C), Maker(d, 1).randn(2 * HIDDEN, C, scale=0.1),
                        Maker(d, 2).randn(2 * HIDDEN, scale=0.1)),
      grad=True, tol=(1e-4, 1e-5))
def geglu_chunk(x, proj_w, proj_b):
    # diffusers GEGLU
    hidden_states, gate = F.linear(x, proj_w, proj_b).chunk(2, dim=-1)
    return hidden_states * F.gelu(gate)


@case("mlp", lambda d: (Maker(d).randn(B, T, C), Maker(d, 1).randn(4 * C, C, scale=0.1),
                        Maker(d, 2).randn(4 * C, scale=0.1), Maker(d, 3).randn(C, 4 * C, scale=0.1),
                        Maker(d, 4).randn(C, scale=0.1)),
      grad=True, tol=(1e-4, 1e-5))
def mlp_nanogpt_residual(x, c_fc_w, c_fc_b, c_proj_w, c_proj_b):
    h = F.linear(x, c_fc_w, c_fc_b)
    h = F.gelu(h, approximate='tanh')
    h = F.linear(h, c_proj_w, c_proj_b)
    h = F.dropout(h, p=0.1, training=False)
    return x + h


# grad_tol: CUDA code is built with fast math (tanh within a few ulp), as torch.compile's Triton is
@case("mlp", lambda d: (Maker(d).randn(B, T, C, scale=2.0),), grad=True, kernels=1, grad_tol=(1e-3, 5e-5))
def gelu_new_by_hand(x):
    # HF NewGELUActivation
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


@case("mlp", lambda d: (Maker(d).randn(B, T, C, scale=3.0),), grad=True)
def quick_gelu_and_erf_gelu(x):
    quick = x * torch.sigmoid(1.702 * x)
    exact = x * 0.5 * (1.0 + torch.erf(x / math.sqrt(2.0)))
    return quick, exact


@case("mlp", lambda d: (Maker(d).randn(B, T, C, scale=4.0),), grad=True)
def act_mish_softplus(x):
    return F.mish(x) + F.softplus(x, beta=2.0, threshold=10.0)


@case("mlp", lambda d: (Maker(d).randn(B, T, C, scale=4.0),), grad=True)
def act_hard(x):
    return F.hardswish(x), F.hardsigmoid(x), F.relu6(x), F.hardtanh(x, -2.0, 2.0)


@case("mlp", lambda d: (Maker(d).randn(B, T, C, scale=3.0),), grad=True)
def act_misc(x):
    return F.leaky_relu(x, negative_slope=0.1), F.elu(x), F.silu(x), torch.tanh(x) * x.sigmoid()


@case("mlp", lambda d: (Maker(d).randn(B, T, C), Maker(d, 1).randn(HIDDEN, C, scale=0.1),
                        Maker(d, 2).randn(C, HIDDEN, scale=0.1)),
      grad=True, tol=(1e-4, 1e-5))
def squared_relu_mlp(x, w_in, w_out):
    # Primer / nanoGPT speedrun MLP
    h = F.relu(x @ w_in.T).square()
    return h @ w_out.T


# ------------------------------------------------------------------------------------------------
# Losses
# ------------------------------------------------------------------------------------------------

def _ce_inputs(d):
    m = Maker(d)
    targets = m.randint(0, VOCAB, B, T)
    targets[0, :3] = -1
    return m.randn(B, T, VOCAB, scale=2.0), targets


@case("loss", _ce_inputs, grad=("logits",))
def ce_ignore_index_nanogpt(logits, targets):
    return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)


@case("loss", lambda d: (Maker(d).randn(16, VOCAB, scale=2.0), Maker(d, 1).randint(0, VOCAB, 16)),
      grad=("logits",))
def ce_label_smoothing(logits, targets):
    return F.cross_entropy(logits, targets, label_smoothing=0.1)


@case("loss", lambda d: (Maker(d).randn(B, T, VOCAB, scale=2.0), Maker(d, 1).randint(0, VOCAB, B, T)),
      grad=("logits",))
def ce_shifted_causal_lm(logits, labels):
    # HF causal-LM loss: predict token t+1 from position t
    shift_logits = logits[..., :-1, :].contiguous()
    shift_labels = labels[..., 1:].contiguous()
    return F.cross_entropy(shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1))


@case("loss", lambda d: (Maker(d).randn(B, T, VOCAB, scale=2.0), Maker(d, 1).randint(0, VOCAB, B, T),
                         Maker(d).lengths_mask(B, T, [T, 5])),
      grad=("logits",))
def logprobs_gather_masked(logits, labels, loss_mask):
    # per-token log-probabilities (DPO / PPO), averaged over the unmasked tokens of each sequence
    logps = logits.log_softmax(-1).gather(-1, labels.unsqueeze(-1)).squeeze(-1)
    return logps, (logps * loss_mask).sum(-1) / loss_mask.sum(-1)


@case("loss", lambda d: (Maker(d).randn(16, 10), Maker(d, 1).randint(0, 10, 16)), grad=("x",))
def nll_loss_log_softmax(x, t):
    return F.nll_loss(F.log_softmax(x, dim=1), t, reduction='sum'), F.nll_loss(F.log_softmax(x, 1), t)


@case("loss", lambda d: (Maker(d).randn(8, 32), Maker(d, 1).randn(8, 32)), grad=True)
def regression_losses(pred, target):
    mse = ((pred - target) ** 2).mean()
    return mse, F.mse_loss(pred, target), F.l1_loss(pred, target), F.smooth_l1_loss(pred, target, beta=0.5)


@case("loss", lambda d: (Maker(d).randn(16, 10, scale=2.0), Maker(d, 1).randn(16, 10, scale=2.0)),
      grad=("student_logits",))
def kl_div_distillation(student_logits, teacher_logits, temperature=2.0):
    soft_targets = F.softmax(teacher_logits / temperature, dim=-1)
    soft_prob = F.log_softmax(student_logits / temperature, dim=-1)
    return F.kl_div(soft_prob, soft_targets, reduction='batchmean') * temperature ** 2


@case("loss", lambda d: (Maker(d).randn(16, 10), Maker(d, 1).randn(16, 10)), grad=True)
def kl_by_hand(p_logits, q_logits):
    p = p_logits.softmax(-1)
    q = q_logits.softmax(-1)
    return (p * (p.log() - q.log())).sum(-1).mean()


@case("loss", lambda d: (Maker(d).randn(8, 32, scale=4.0), Maker(d, 1).mask(8, 32).float()),
      grad=("x",))
def bce_with_logits_by_hand(x, y):
    # the numerically stable form: max(x, 0) - x * y + log(1 + exp(-|x|))
    loss = torch.clamp(x, min=0) - x * y + torch.log1p(torch.exp(-torch.abs(x)))
    return loss.mean(), F.binary_cross_entropy_with_logits(x, y)


@case("loss", lambda d: (Maker(d).randn(8, 5, scale=3.0), Maker(d, 1).mask(8, 5).float()),
      grad=("inputs",))
def sigmoid_focal_loss(inputs, targets, alpha: float = 0.25, gamma: float = 2.0):
    # torchvision.ops.sigmoid_focal_loss
    p = torch.sigmoid(inputs)
    ce_loss = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce_loss * ((1 - p_t) ** gamma)
    if alpha >= 0:
        alpha_t = alpha * targets + (1 - alpha) * (1 - targets)
        loss = alpha_t * loss
    return loss.mean()


@case("loss", lambda d: (Maker(d).randn(8, 32), Maker(d, 1).randn(8, 32)), grad=True,
      tol=(1e-4, 1e-5))
def clip_contrastive_loss(image_features, text_features, logit_scale=14.285714):
    # CLIP / InfoNCE: normalised features, cosine logits, symmetric cross-entropy over the diagonal
    image_features = F.normalize(image_features, dim=-1)
    text_features = F.normalize(text_features, dim=-1)
    logits_per_image = logit_scale * image_features @ text_features.T
    logits_per_text = logits_per_image.T
    labels = torch.arange(logits_per_image.shape[0], device=image_features.device, dtype=torch.long)
    return (F.cross_entropy(logits_per_image, labels) + F.cross_entropy(logits_per_text, labels)) / 2


@case("loss", lambda d: (Maker(d).randn(8, 32), Maker(d, 1).randn(8, 32)), grad=True)
def cosine_similarity(a, b):
    by_hand = (a * b).sum(-1) / (a.norm(dim=-1) * b.norm(dim=-1)).clamp_min(1e-8)
    return F.cosine_similarity(a, b, dim=-1), by_hand


@case("loss", lambda d: (Maker(d).randn(B, T, VOCAB, scale=2.0),), grad=True)
def z_loss_logsumexp(logits):
    # PaLM's auxiliary z-loss
    return 1e-4 * torch.logsumexp(logits, dim=-1).pow(2).mean()


# ------------------------------------------------------------------------------------------------
# Optimizer steps (torch.optim's single-tensor code, written functionally; state updated in place)
# ------------------------------------------------------------------------------------------------

def _step_inputs(n_state, seed=0, nonnegative=False):
    def make(d):
        m = Maker(d, seed)
        p, g = m.randn(16, 24), m.randn(16, 24, scale=0.1)
        state = [m.randn(16, 24, scale=0.05) for _ in range(n_state)]
        if nonnegative:
            state = [s.abs() for s in state]
        return (p, g, *state)
    return make


@case("optimizer", lambda d: (*_step_inputs(1)(d), 0.1, 0.9, 1e-2), inplace=("p", "buf"), tol=STEP_TOL)
def sgd_momentum_step(p, g, buf, lr: float, momentum: float, weight_decay: float):
    g = g.add(p, alpha=weight_decay)
    buf.mul_(momentum).add_(g)
    p.add_(buf, alpha=-lr)


@case("optimizer", lambda d: (*_step_inputs(1)(d), 0.05, 0.9), inplace=("param", "momentum_buffer"),
      tol=STEP_TOL)
def sgd_nesterov_step(param, grad, momentum_buffer, lr: float, momentum: float, dampening=0.0):
    momentum_buffer.mul_(momentum).add_(grad, alpha=1 - dampening)
    grad = grad.add(momentum_buffer, alpha=momentum)
    param.add_(grad, alpha=-lr)
    return param


def _adam_inputs(d):
    p, g, m, v = _step_inputs(2, nonnegative=True)(d)
    return p, g, m, v, 1e-3, 0.9, 0.999, 1e-8, 0.1, 3


@case("optimizer", _adam_inputs, inplace=("p", "m", "v"), tol=STEP_TOL)
def adamw_step(p, g, m, v, lr: float, beta1: float, beta2: float, eps: float, wd: float, step: int):
    p.mul_(1 - lr * wd)
    m.mul_(beta1).add_(g, alpha=1 - beta1)
    v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
    bias_correction1 = 1 - beta1 ** step
    bias_correction2 = 1 - beta2 ** step
    m_hat = m / bias_correction1
    v_hat = v / bias_correction2
    p.addcdiv_(m_hat, v_hat.sqrt().add_(eps), value=-lr)


@case("optimizer", _adam_inputs, inplace=("param", "exp_avg", "exp_avg_sq"), tol=STEP_TOL)
def adam_step_torch_optim(param, grad, exp_avg, exp_avg_sq, lr: float, beta1: float, beta2: float,
                          eps: float, weight_decay: float, step: int):
    # torch.optim.adam._single_tensor_adam (L2 weight decay, lerp for the first moment)
    grad = grad.add(param, alpha=weight_decay)
    exp_avg.lerp_(grad, 1 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad.conj(), value=1 - beta2)
    bias_correction1 = 1 - beta1 ** step
    bias_correction2 = 1 - beta2 ** step
    step_size = lr / bias_correction1
    bias_correction2_sqrt = math.sqrt(bias_correction2)
    denom = (exp_avg_sq.sqrt() / bias_correction2_sqrt).add_(eps)
    param.addcdiv_(exp_avg, denom, value=-step_size)


@case("optimizer", lambda d: (*_step_inputs(1)(d), 1e-4, 0.9, 0.99, 0.1),
      inplace=("p", "exp_avg"), tol=STEP_TOL)
def lion_step(p, grad, exp_avg, lr: float, beta1: float, beta2: float, wd: float):
    # lion-pytorch's update_fn
    p.mul_(1 - lr * wd)
    update = exp_avg.clone().mul_(beta1).add(grad, alpha=1 - beta1).sign_()
    p.add_(update, alpha=-lr)
    exp_avg.mul_(beta2).add_(grad, alpha=1 - beta2)


@case("optimizer", lambda d: (*_step_inputs(1, nonnegative=True)(d), 1e-2, 1e-10),
      inplace=("param", "state_sum"), tol=STEP_TOL)
def adagrad_step(param, grad, state_sum, clr: float, eps: float):
    state_sum.addcmul_(grad, grad, value=1)
    std = state_sum.sqrt().add_(eps)
    param.addcdiv_(grad, std, value=-clr)


@case("optimizer", lambda d: (*_step_inputs(1, nonnegative=True)(d), 1e-2, 0.99, 1e-8),
      inplace=("param", "square_avg"), tol=STEP_TOL)
def rmsprop_step(param, grad, square_avg, lr: float, alpha: float, eps: float):
    square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
    avg = square_avg.sqrt().add_(eps)
    param.addcdiv_(grad, avg, value=-lr)


@case("optimizer", lambda d: (Maker(d).randn(16, 24), Maker(d, 1).randn(24), Maker(d, 2).randn(16, 24),
                              Maker(d, 3).randn(24), 0.999),
      inplace=("ema_w", "ema_b"), tol=STEP_TOL)
def ema_update(ema_w, ema_b, w, b, decay: float):
    ema_w.mul_(decay).add_(w, alpha=1 - decay)
    ema_b.lerp_(b, 1.0 - decay)


@case("optimizer", lambda d: (Maker(d).randn(16, 24), Maker(d, 1).randn(24, scale=3.0), 1.0),
      inplace=("g1", "g2"), tol=STEP_TOL)
def clip_grad_norm(g1, g2, max_norm: float):
    # torch.nn.utils.clip_grad_norm_ over two gradients
    grads = [g1, g2]
    norms = [torch.linalg.vector_norm(g, 2.0) for g in grads]
    total_norm = torch.linalg.vector_norm(torch.stack(norms), 2.0)
    clip_coef = max_norm / (total_norm + 1e-6)
    clip_coef_clamped = torch.clamp(clip_coef, max=1.0)
    for g in grads:
        g.mul_(clip_coef_clamped)
    return total_norm


# ------------------------------------------------------------------------------------------------
# Routing
# ------------------------------------------------------------------------------------------------

N_EXPERTS = 8


@case("routing", lambda d: (Maker(d).randn(16, C), Maker(d, 1).randn(N_EXPERTS, C, scale=0.2), 2),
      grad=("hidden_states", "gate_w"), tol=(1e-4, 1e-5))
def moe_router_mixtral(hidden_states, gate_w, top_k: int):
    router_logits = F.linear(hidden_states, gate_w)
    routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
    routing_weights, selected_experts = torch.topk(routing_weights, top_k, dim=-1)
    routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
    routing_weights = routing_weights.to(hidden_states.dtype)
    return routing_weights, selected_experts


TOP_K = 2


@case("routing", lambda d: (Maker(d).randn(16, N_EXPERTS),), grad=True)
def topk_router_sigmoid(logits):
    # DeepSeek-V3-style: sigmoid scores, top-k experts, weights renormalised over the chosen ones
    scores = logits.sigmoid()
    _, topk_idx = scores.topk(TOP_K, dim=-1, sorted=True)
    weights = scores.gather(1, topk_idx)
    weights = weights / weights.sum(-1, keepdim=True)
    return weights, topk_idx


@case("routing", lambda d: (Maker(d).randn(4, 6, 10),), grad=True)
def max_min_with_indices(x):
    values, indices = x.max(dim=-1)
    m = x.min(dim=1)
    return values, indices, m.values, m.indices, torch.argmax(x, dim=1)


@case("routing", lambda d: (Maker(d).randn(32, 10), Maker(d, 1).randint(0, 10, 32)))
def argmax_accuracy(logits, targets):
    preds = logits.argmax(dim=-1)
    return (preds == targets).float().mean(), preds


@case("routing", lambda d: (Maker(d).randn(32, N_EXPERTS),), grad=True)
def switch_load_balancing_loss(router_logits):
    # Switch Transformer's auxiliary loss
    router_probs = torch.softmax(router_logits, dim=-1)
    expert_index = torch.argmax(router_probs, dim=-1)
    expert_mask = F.one_hot(expert_index, num_classes=N_EXPERTS)
    tokens_per_expert = torch.mean(expert_mask.float(), dim=0)
    router_prob_per_expert = torch.mean(router_probs, dim=0)
    return torch.sum(tokens_per_expert * router_prob_per_expert) * N_EXPERTS


@case("routing", lambda d: (Maker(d).randn(16, C), Maker(d, 1).randint(0, 4, 16)), grad=("x",))
def moe_combine_index_add(x, expert_idx):
    # tokens summed per expert into a fresh buffer
    out = x.new_zeros(4, x.shape[-1])
    out.index_add_(0, expert_idx, x)
    counts = torch.bincount(expert_idx, minlength=4)
    return out, counts


# ------------------------------------------------------------------------------------------------
# Sampling
# ------------------------------------------------------------------------------------------------

@case("sampling", lambda d: (Maker(d).randn(B, T, VOCAB, scale=2.0), 0.8, 10))
def sample_topk_nanogpt(logits, temperature: float, top_k: int):
    # nanoGPT's generate(): last position, temperature, top-k filtering, softmax
    logits = logits[:, -1, :] / temperature
    v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
    logits[logits < v[:, [-1]]] = -float('Inf')
    probs = F.softmax(logits, dim=-1)
    return probs


@case("sampling", lambda d: (Maker(d).randn(4, VOCAB, scale=2.0), 0.9))
def top_p_filter_hf(scores, top_p: float):
    # HF TopPLogitsWarper (nucleus filtering), descending variant
    sorted_logits, sorted_indices = torch.sort(scores, descending=True)
    cumulative_probs = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
    sorted_indices_to_remove = cumulative_probs > top_p
    sorted_indices_to_remove[..., 1:] = sorted_indices_to_remove[..., :-1].clone()
    sorted_indices_to_remove[..., 0] = False
    indices_to_remove = sorted_indices_to_remove.scatter(1, sorted_indices, sorted_indices_to_remove)
    return scores.masked_fill(indices_to_remove, -float("Inf"))


@case("sampling", lambda d: (Maker(d).randn(4, VOCAB, scale=2.0), Maker(d, 1).randint(0, VOCAB, 4, 6), 1.3),
      grad=("scores",))
def repetition_penalty_hf(scores, input_ids, penalty: float):
    score = torch.gather(scores, 1, input_ids)
    score = torch.where(score < 0, score * penalty, score / penalty)
    return scores.scatter(1, input_ids, score)


@case("sampling", lambda d: (Maker(d).randn(4, VOCAB), Maker(d, 1).rand(4, VOCAB, low=1e-6, high=1.0), 0.7))
def gumbel_max_sample(logits, u, temperature: float):
    gumbel = -torch.log(-torch.log(u))
    return torch.argmax(logits / temperature + gumbel, dim=-1)


@case("sampling", lambda d: (Maker(d).randn(4, VOCAB), Maker(d, 1).mask(4), 0))
def greedy_or_sample_where(logits, finished, pad_token_id: int):
    # the next token is argmax; finished sequences keep producing the pad token
    next_tokens = torch.argmax(logits, dim=-1)
    probs = torch.softmax(logits, dim=-1)
    next_prob = probs.gather(-1, next_tokens[:, None]).squeeze(-1)
    next_prob = torch.where(finished, torch.zeros_like(next_prob), next_prob)
    next_tokens = next_tokens * ~finished + pad_token_id * finished
    return next_tokens, next_prob


# ------------------------------------------------------------------------------------------------
# Quantisation
# ------------------------------------------------------------------------------------------------

@case("quant", lambda d: (Maker(d).randn(16, 64, scale=2.0),))
def absmax_int8_quant(x):
    scale = x.abs().amax(dim=-1, keepdim=True) / 127
    q = (x / scale).round().clamp(-128, 127).to(torch.int8)
    return q, scale


@case("quant", lambda d: (Maker(d).randn(8, 64), Maker(d, 1).randint(-127, 128, 32, 64, dtype=torch.int8),
                          Maker(d, 2).rand(32, 1, low=0.001, high=0.02)),
      grad=("x",), tol=(1e-4, 1e-5))
def int8_weight_only_linear(x, w_int8, w_scale):
    # dequantise per output channel, then a linear
    w = w_int8.to(x.dtype) * w_scale
    return F.linear(x, w)


@case("quant", lambda d: (Maker(d).randn(16, 64, scale=2.0),), grad=True)
def fake_quant_ste(x):
    # fake quantisation with a straight-through estimator (QAT)
    scale = x.detach().abs().amax(dim=-1, keepdim=True).clamp(min=1e-8) / 127.0
    x_q = (x / scale).round().clamp(-128, 127) * scale
    return x + (x_q - x).detach()


@case("quant", lambda d: (Maker(d).randn(16, 64, scale=2.0) + 0.5,))
def asymmetric_uint8_quant(x):
    xmin = x.amin(dim=-1, keepdim=True)
    xmax = x.amax(dim=-1, keepdim=True)
    scale = (xmax - xmin).clamp(min=1e-8) / 255
    zero_point = (-xmin / scale).round()
    q = (x / scale + zero_point).round().clamp(0, 255).to(torch.uint8)
    deq = (q.float() - zero_point) * scale
    return q, scale, zero_point, deq


@case("quant", lambda d: (Maker(d).randint(0, 16, 8, 32),))
def int4_pack_unpack(q):
    # two 4-bit values per byte, then back
    q = q.to(torch.uint8)
    packed = q[..., ::2] | (q[..., 1::2] << 4)
    low = packed & 0x0F
    high = packed >> 4
    unpacked = torch.stack([low, high], dim=-1).view(*packed.shape[:-1], -1)
    return packed, unpacked


@case("quant", lambda d: (Maker(d).randn(16, 64),))
def int8_absmax_roundtrip_error(x):
    q, scale = absmax_int8_quant(x)
    x_hat = q.float() * scale
    return (x - x_hat).abs().max(), x_hat


# ------------------------------------------------------------------------------------------------
# Pooling
# ------------------------------------------------------------------------------------------------

@case("pooling", lambda d: (Maker(d).randn(B, T, C), Maker(d).lengths_mask(B, T, [T, 3]).long()),
      grad=("token_embeddings",))
def mean_pool_sentence_transformers(token_embeddings, attention_mask):
    input_mask_expanded = attention_mask.unsqueeze(-1).expand(token_embeddings.size()).float()
    return torch.sum(token_embeddings * input_mask_expanded, 1) / torch.clamp(input_mask_expanded.sum(1), min=1e-9)


@case("pooling", lambda d: (Maker(d).randn(B, T, C), Maker(d).lengths_mask(B, T, [5, T])), grad=("x",))
def mean_pool_bool_mask(x, mask):
    return (x * mask.unsqueeze(-1)).sum(1) / mask.sum(1, keepdim=True)


@case("pooling", lambda d: (Maker(d).randn(B, T, C), Maker(d).lengths_mask(B, T, [5, T])), grad=("x",))
def max_pool_bool_mask(x, mask):
    return x.masked_fill(~mask[..., None], -1e9).max(dim=1).values


@case("pooling", lambda d: (Maker(d).randn(B, T, C), Maker(d).lengths_mask(B, T, [5, T]).long()),
      grad=("last_hidden_states",))
def last_token_pool(last_hidden_states, attention_mask):
    sequence_lengths = attention_mask.sum(dim=1) - 1
    batch_size = last_hidden_states.shape[0]
    return last_hidden_states[torch.arange(batch_size, device=last_hidden_states.device), sequence_lengths]


@case("pooling", lambda d: (Maker(d).randn(2, 16, 8, 8),), grad=True)
def global_pool_timm(x):
    avg = F.adaptive_avg_pool2d(x, 1).flatten(1)
    mx = x.amax(dim=(2, 3))
    return torch.cat([avg, x.mean((2, 3)), mx], dim=1)


@case("pooling", lambda d: (Maker(d).randn(2, 3, 8, 8), Maker(d, 1).randn(3 * 4 * 4, 32, scale=0.1)),
      grad=True, tol=(1e-4, 1e-5))
def vit_patchify(imgs, w_embed, p=4):
    # MAE's patchify, then a linear patch embedding
    Bs, Cs, Hs, Ws = imgs.shape
    assert Hs == Ws and Hs % p == 0
    h = w = Hs // p
    x = imgs.reshape(Bs, Cs, h, p, w, p)
    x = torch.einsum('nchpwq->nhwpqc', x)
    x = x.reshape(Bs, h * w, p * p * Cs)
    return x @ w_embed


# ------------------------------------------------------------------------------------------------
# Misc: shapes, indexing, constructors, dtypes, masks
# ------------------------------------------------------------------------------------------------

@case("misc", lambda d: (Maker(d).lengths_mask(B, T, [T, 5]).long(),))
def position_ids_cumsum(attention_mask):
    # HF: position ids from a left/right padded attention mask
    position_ids = attention_mask.long().cumsum(-1) - 1
    position_ids.masked_fill_(attention_mask == 0, 1)
    lengths = torch.cumsum(attention_mask, dim=1)[:, -1]
    return position_ids, lengths


@case("misc", lambda d: (Maker(d).randn(B, H, D), Maker(d, 1).randn(B, H, D)), grad=True)
def einsum_bhd(q, k):
    return torch.einsum('bhd,bhd->bh', q, k), torch.einsum('bhd,bgd->bhg', q, k)


@case("misc", lambda d: (Maker(d).randn(B, T, D), Maker(d, 1).randn(B, T, D)), grad=True)
def stack_flatten_permute(a, b):
    s = torch.stack([a, b, a * b], dim=1)
    return s.flatten(1), a.permute(0, 2, 1), torch.stack((a, b)).sum(0)


@case("misc", lambda d: (Maker(d).randn(B, T, D), 0.5), grad=("x",))
def constructors(x, v: float):
    T_ = x.size(1)
    pos = torch.arange(T_, device=x.device)
    bias = torch.full((T_,), v, device=x.device)
    z = torch.zeros_like(x)
    o = torch.ones_like(x[..., :1])
    extra = x.new_zeros(x.shape[0], 4) + x.sum(-1).sum(-1, keepdim=True)
    return x + (pos * bias)[None, :, None] + z - o, extra, torch.empty_like(x).fill_(2.0) * x


@case("misc", lambda d: (Maker(d).randn(B, T, D),), grad=True)
def shape_introspection(x):
    assert x.dim() == 3
    assert x.shape[-1] % 2 == 0
    n = x.numel()
    batch = len(x)
    d = x.size(-1)
    scale = math.sqrt(d)
    half = x.shape[-1] // 2
    return x.sum() / n * scale + batch, x[..., :half] * x.ndim


HALF_D = D // 2


@case("misc", lambda d: (Maker(d).randn(B, T, D),), grad=True)
def clone_slice_assign(x):
    y = x.clone()
    y[..., :HALF_D] = 0
    y[:, 0] = y[:, 0] * 2.0
    return y


@case("misc", lambda d: (Maker(d).randn(4, 32), Maker(d, 1).mask(4, 32)), grad=("x",))
def bool_mask_assign_clone(x, m):
    y = x.clone()
    y[m] = 0.0
    return y


@case("misc", lambda d: (Maker(d).randn(4, 32), Maker(d, 1).mask(4, 32)), inplace=("x",))
def bool_mask_assign_inplace(x, m):
    x[m] = 0


@case("misc", lambda d: (Maker(d).randn(4, 32), Maker(d, 1).mask(4, 32), 3.0), grad=("x",))
def masked_fill_local(x, m, scale: float):
    x = x * scale
    x.masked_fill_(m, 0.0)
    x.clamp_(min=-4.0, max=4.0)
    return x


@case("misc", lambda d: (Maker(d).randn(4, 10), Maker(d, 1).randint(0, 10, 4, 3)), grad=("x",))
def gather_dim1(x, idx):
    return torch.gather(x, 1, idx), x.gather(-1, idx[:, :1]).squeeze(-1)


@case("misc", lambda d: (Maker(d).randn(VOCAB, C), Maker(d, 1).randint(0, VOCAB, B, T),
                         Maker(d, 2).randn(T, C)),
      grad=("wte", "wpe"))
def embedding_lookup_nanogpt(wte, idx, wpe):
    b, t = idx.size()
    pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
    tok_emb = wte[idx]
    pos_emb = F.embedding(pos, wpe)
    return tok_emb + pos_emb, F.embedding(idx, wte)


@case("misc", lambda d: (Maker(d).randn(5, 6, 7),), grad=True)
def negative_indexing(x):
    return x[-1], x[:, -1], x[..., -2:], x[-2, 1:-1, :-2]


@case("misc", lambda d: (Maker(d).randn(B, T, D),), grad=True)
def diff_shift(x):
    dx = x[:, 1:] - x[:, :-1]
    return dx, torch.diff(x, dim=-1), F.pad(dx, (0, 0, 1, 0))


@case("misc", lambda d: (Maker(d).randn(8, 32, scale=3.0),), grad=True)
def dtype_round_trips(x):
    a = x.half().float()
    c = x.to(torch.float16)
    return a, c, x.double().sum().float(), x.to(dtype=torch.float32), x.to(torch.bfloat16)


# A bfloat16 round trip inside one fused kernel is not rounded, as under torch.compile (inductor
# keeps the float32 value too): the result differs from eager by a bfloat16 rounding (README).
@case("misc", lambda d: (Maker(d).randn(8, 32, scale=3.0),), tol=(1.6e-2, 1e-2))
def bfloat16_round_trip_fused(x):
    return x.to(torch.bfloat16).to(torch.float32) * 2.0


@case("misc", lambda d: (Maker(d).randn(8, 32), Maker(d, 1).randn(8, 32), Maker(d, 2).mask(8, 32)),
      grad=("a", "b"))
def bool_arithmetic(a, b, mask):
    both = (a > 0) & (b > 0)
    either = (a > 0) | ~mask
    frac = both.float().mean()
    return mask * a, both, either, frac, (a * both).sum(-1), mask.sum(), both.any(-1), both.all()


@case("misc", lambda d: (Maker(d).randn(8, 16), Maker(d, 1).randn(6, 16)), grad=True, tol=(1e-4, 1e-5))
def pairwise_distances(x, y):
    by_hand = ((x[:, None, :] - y[None, :, :]) ** 2).sum(-1).sqrt()
    return by_hand, torch.cdist(x, y)


@case("misc", lambda d: (Maker(d).randn(B, T, VOCAB, scale=3.0),), grad=True, kernels=2)
def logsumexp_by_hand(x):
    m = x.max(-1, keepdim=True).values
    return (x - m).exp().sum(-1).log() + m.squeeze(-1)


@case("misc", lambda d: (Maker(d).randn(B, T, VOCAB, dtype=torch.float16, scale=3.0),), grad=True)
def softmax_upcast_half(x):
    a = F.softmax(x, dim=-1, dtype=torch.float32)
    b = torch.softmax(x.float(), -1).to(x.dtype)
    return a, b


@case("misc", lambda d: (Maker(d).randn(B, C, T), Maker(d, 1).randn(C, 1, 4, scale=0.5),
                         Maker(d, 2).randn(C, scale=0.1)),
      grad=True, tol=(1e-4, 1e-5))
def causal_depthwise_conv1d(x, weight, bias):
    # Mamba's short causal convolution: pad left by k - 1, depthwise, cut back to T
    seqlen = x.shape[-1]
    k = weight.shape[-1]
    y = F.conv1d(x, weight, bias, padding=k - 1, groups=x.shape[1])[..., :seqlen]
    return F.silu(y)


@case("misc", lambda d: (Maker(d).randn(4, 32),), grad=True)
def clamp_variants(x):
    return x.clamp(min=-1.0, max=1.0), torch.clamp_min(x, 0.0), x.clip(-0.5, 0.5), torch.clamp(x, max=0.2)


def _block_inputs(d):
    m = Maker(d)
    return (m.randn(B, T, C), m.randn(C) + 1, m.randn(3 * C, C, scale=0.1), m.randn(C, C, scale=0.1),
            m.randn(C) + 1, m.randn(4 * C, C, scale=0.1), m.randn(C, 4 * C, scale=0.1))


def _attn_block(x, w_qkv, w_o):
    Bs, Ts, Cs = x.shape
    q, k, v = (x @ w_qkv.t()).chunk(3, dim=-1)
    q, k, v = [t.view(Bs, Ts, N_HEAD, Cs // N_HEAD).transpose(1, 2) for t in (q, k, v)]
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return y.transpose(1, 2).reshape(Bs, Ts, Cs) @ w_o.t()


@case("misc", _block_inputs, grad=True, tol=(1e-4, 1e-5), grad_tol=(1e-3, 1e-4))
def transformer_block(x, ln1_w, w_qkv, w_o, ln2_w, w_fc, w_proj):
    # a pre-norm block from helpers: x + attn(norm(x)); x + mlp(norm(x))
    x = x + _attn_block(rmsnorm_fp32(x, ln1_w), w_qkv, w_o)
    h = F.gelu(F.linear(rmsnorm_fp32(x, ln2_w), w_fc))
    return x + F.linear(h, w_proj)


CATEGORIES = ("norm", "rotary", "attention", "mlp", "loss", "optimizer", "routing", "sampling",
              "quant", "pooling", "misc")
