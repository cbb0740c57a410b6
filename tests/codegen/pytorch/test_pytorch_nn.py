"""torch.nn.functional's layers and losses under @jit (babytriton/codegen/pytorch/nn.py): compiled and
eager results against plain torch on the same inputs, gradients, half dtypes, and the errors."""
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings, strategies as st

import babytriton as bt
from babytriton import CompilationError


def layers(x, w, bias, g0, g1):
    return (F.linear(x, w, bias), F.linear(x, w), F.layer_norm(x, (x.shape[-1],), g0, g1, 1e-5),
            F.layer_norm(x, [x.shape[-1]]), F.rms_norm(x, (x.shape[-1],), g0), F.rms_norm(x, [x.shape[-1]], eps=1e-6),
            F.normalize(x, dim=-1), F.normalize(x, p=1.0, dim=0), F.glu(x, -1), F.dropout(x, 0.1, training=False))


def class_losses(x, target, weight):
    return (F.cross_entropy(x, target), F.cross_entropy(x, target, reduction="none"),
            F.cross_entropy(x, target, label_smoothing=0.1), F.cross_entropy(x, target, reduction="sum"),
            F.cross_entropy(x, target, weight=weight), F.cross_entropy(x, target, weight=weight, label_smoothing=0.2),
            F.nll_loss(x, target), F.nll_loss(x, target, weight=weight, reduction="none"))


def soft_losses(a, c, p):
    return (F.cross_entropy(a, p), F.cross_entropy(a, p, label_smoothing=0.1, reduction="none"),
            F.mse_loss(a, c), F.l1_loss(a, c, reduction="sum"), F.smooth_l1_loss(a, c), F.huber_loss(a, c, delta=0.5),
            F.kl_div(a, p, reduction="batchmean"), F.kl_div(a, c, reduction="sum", log_target=True),
            F.binary_cross_entropy_with_logits(a, p), F.binary_cross_entropy_with_logits(a, p, pos_weight=p[0]),
            F.binary_cross_entropy(p, p.flip(0)), F.cosine_similarity(a, c, dim=-1), F.cosine_similarity(a, c))


def attention(q, k, v, mask, bias):
    return (F.scaled_dot_product_attention(q, k, v, is_causal=True), F.scaled_dot_product_attention(q, k, v),
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
            F.scaled_dot_product_attention(q, k, v, attn_mask=bias, scale=0.3))


def norms4d(x, w, b, rm, rv, idx, emb):
    return (F.group_norm(x, 2, w, b), F.group_norm(x, 4), F.batch_norm(x, rm, rv, w, b, False, 0.1, 1e-5),
            F.embedding(idx, emb), F.one_hot(idx, 7))


COMPILED = {fn: bt.jit(fn) for fn in (layers, class_losses, soft_losses, attention, norms4d)}


def same(fn, args, tol=1e-5):
    """Compiled and eager results equal plain torch's (values and dtypes)."""
    want = fn(*args)
    for got in (COMPILED[fn](*args), COMPILED[fn].eager(*args)):
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype
            torch.testing.assert_close(g, w, atol=tol, rtol=tol, equal_nan=True)


def _inputs(rows: int, cols: int, seed: int):
    gen = torch.Generator().manual_seed(seed)
    return lambda *shape: torch.randn(*shape, generator=gen)


@settings(max_examples=6, deadline=None)
@given(rows=st.sampled_from([1, 4]), seed=st.integers(0, 99))
def test_layers_match_torch(rows, seed):
    r = _inputs(rows, 10, seed)
    same(layers, (r(rows, 10), r(6, 10), r(6), r(10), r(10)))


@settings(max_examples=6, deadline=None)
@given(rows=st.sampled_from([1, 5]), seed=st.integers(0, 99))
def test_class_losses_match_torch_with_ignored_targets(rows, seed):
    r = _inputs(rows, 10, seed)
    target = torch.randint(0, 10, (rows,), generator=torch.Generator().manual_seed(seed))
    target[0] = -100   # ignore_index
    same(class_losses, (r(rows, 10), target, torch.rand(10) + 0.1))


def test_soft_losses_match_torch():
    r = _inputs(4, 10, 0)
    a, c = r(4, 10), r(4, 10)
    same(soft_losses, (a, c, torch.softmax(r(4, 10), -1)))


def test_attention_matches_torch_causal_and_masked():
    r = _inputs(0, 0, 1)
    q, k, v = r(2, 3, 5, 8), r(2, 3, 5, 8), r(2, 3, 5, 8)
    mask = torch.rand(5, 5, generator=torch.Generator().manual_seed(2)) > 0.3
    mask[:, 0] = True
    same(attention, (q, k, v, mask, r(5, 5)), tol=1e-4)


def test_group_batch_norm_embedding_one_hot_match_torch():
    r = _inputs(0, 0, 3)
    idx = torch.tensor([[1, 2], [6, 0]])
    same(norms4d, (r(2, 4, 3, 5), r(4), r(4), r(4), torch.rand(4) + 0.5, idx, r(7, 3)))


def test_losses_gradients_match_torch():
    r = _inputs(0, 0, 4)
    x, target = r(5, 10).requires_grad_(), torch.tensor([1, 9, -100, 3, 0])
    weight = torch.rand(10) + 0.1

    def loss(x, target, weight):
        return F.cross_entropy(x, target, weight=weight, label_smoothing=0.1) + F.normalize(x, dim=-1).sum() \
            + F.layer_norm(x, (10,)).square().mean()
    got = torch.autograd.grad(bt.jit(loss)(x, target, weight), x)[0]
    want = torch.autograd.grad(loss(x, target, weight), x)[0]
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_layers_follow_torch(dtype):
    r = _inputs(0, 0, 5)

    def f(x, w, g):
        return F.rms_norm(x, (x.shape[-1],), g), F.linear(x, w), F.layer_norm(x, (x.shape[-1],))
    args = (r(3, 512).to(dtype), r(16, 512).to(dtype), r(512).to(dtype))
    for got, want in zip(bt.jit(f)(*args), f(*args)):
        assert got.dtype == dtype
        torch.testing.assert_close(got.float(), want.float(), atol=2e-2, rtol=2e-2)


def test_rms_norm_default_eps_is_the_dtypes():
    def f(x):
        return F.rms_norm(x, (4,))
    x = torch.full((2, 4), 1e-4)
    torch.testing.assert_close(bt.jit(f)(x), f(x))


@pytest.mark.parametrize("body, words", [
    ("F.dropout(x, 0.2)", "training=False"),
    ("F.cross_entropy(x, x, reduction='avg')", "reduction must be one of"),
    ("F.one_hot(x.long())", "num_classes"),
    ("F.layer_norm(x, (5,))", "normalized_shape (5,)"),
    ("F.scaled_dot_product_attention(x, x, x, dropout_p=0.1)", "dropout_p"),
])
def test_errors_are_located_and_say_why(tmp_path, body, words):
    path = tmp_path / "user.py"
    path.write_text(f"import torch.nn.functional as F\n\ndef f(x):\n    return {body}\n")
    namespace = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    with pytest.raises(CompilationError) as info:
        bt.jit(namespace["f"])(torch.randn(3, 4))
    text = str(info.value)
    assert f"{path}:4:" in text and words in text and "tvm" not in text.lower()


def test_scale_defaults_to_the_head_size():
    def f(q):
        return F.scaled_dot_product_attention(q, q, q)
    q = torch.randn(1, 4, 6)
    torch.testing.assert_close(bt.jit(f)(q), torch.softmax(q @ q.transpose(1, 2) / math.sqrt(6), -1) @ q)
