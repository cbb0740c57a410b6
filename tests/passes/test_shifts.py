"""Shift maxima (babytriton/passes/shifts.py): a row max that only shifts a softmax-like computation gets no
gradient in the compiled backward (it is zero in exact arithmetic), and every other max keeps torch's
rule. Gradients are compared with torch autograd on inputs with tied maxima and infinities."""
import importlib.util
import math
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tvm.relax.op import gather_elements

import babytriton as bt
from babytriton import GradientFallbackWarning

f64 = torch.float64


@pytest.fixture(autouse=True)
def compiled_backward_only():
    with warnings.catch_warnings():
        warnings.simplefilter("error", GradientFallbackWarning)
        yield


def softmax(x):
    e = bt.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def log_softmax(x):
    shifted = x - bt.max(x, axis=0, keepdims=True)
    return shifted - bt.log(bt.exp(shifted).sum(axis=0, keepdims=True))


def logsumexp_dropped(x):
    m = x.max(axis=1)
    return (m + bt.log(bt.exp(x - bt.expand_dims(m, 1)).mean(axis=1))) * 2.0


def cross_entropy(logits, target):
    m = logits.max(axis=-1, keepdims=True)
    lse = m + bt.log(bt.exp(logits - m).sum(axis=-1, keepdims=True))
    picked = gather_elements(logits, bt.expand_dims(target, 1), axis=1)
    return (lse - picked).mean()


def torch_softmax(x):
    return torch.softmax(x, -1)


def torch_log_softmax(x):
    return torch.log_softmax(x, 0)


def torch_logsumexp_dropped(x):
    return (torch.logsumexp(x, 1) - math.log(x.shape[1])) * 2.0


def torch_cross_entropy(logits, target):
    return torch.nn.functional.cross_entropy(logits, target)


# not shift-invariant: the max's gradient is not zero, and torch's rule (shared among ties) must hold
def shifted_returned(x):
    return x - x.max(axis=-1, keepdims=True)


def unnormalised(x):
    return bt.exp(x - x.max(axis=-1, keepdims=True))


def normalised_across_rows(x):
    e = bt.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=0, keepdims=True)


def max_also_added(x):
    m = x.max(axis=-1, keepdims=True)
    e = bt.exp(x - m)
    return e / e.sum(axis=-1, keepdims=True) + m


def torch_shifted_returned(x):
    return x - x.amax(-1, keepdim=True)


def torch_unnormalised(x):
    return torch.exp(x - x.amax(-1, keepdim=True))


def torch_normalised_across_rows(x):
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(0, keepdim=True)


def torch_max_also_added(x):
    m = x.amax(-1, keepdim=True)
    return torch.softmax(x, -1) + m


def tied(rows=4, cols=6):
    """Rows with their maximum twice (torch splits the max's gradient between the two)."""
    x = torch.rand(rows, cols, dtype=f64) * 4 - 2
    x[:, 1] = x[:, 4] = x.max(dim=1).values + 0.5
    return x


def grads(fn, args, upstream=None):
    leaves = [a.detach().clone().requires_grad_(a.is_floating_point()) for a in args]
    out = fn(*leaves)
    out.backward(torch.ones_like(out) if upstream is None else upstream)
    return [a.grad for a in leaves if a.requires_grad]


def differentiates_max(f, args, line_text: str) -> bool:
    """Whether the compiled backward has the max's rule (`where(x == max, ...)`: an `equal` at the
    max's line) for the source line containing `line_text`."""
    kernel = f.backward(*args)
    return any(op.op == "equal" and line_text in (op.source or "") for k in kernel.fusion for op in k.ops)


SHIFTS = [(softmax, torch_softmax, "x.max("), (log_softmax, torch_log_softmax, "bt.max("),
          (logsumexp_dropped, torch_logsumexp_dropped, "m = x.max")]


@pytest.mark.parametrize("fn, reference, line", SHIFTS, ids=[s[0].__name__ for s in SHIFTS])
def test_a_max_that_only_shifts_gets_no_gradient_and_the_result_is_torchs(fn, reference, line):
    f = bt.jit(fn)
    x = tied()
    assert not differentiates_max(f, (x,), line)
    upstream = torch.rand(f(x).shape, dtype=f64)
    torch.testing.assert_close(grads(f, (x,), upstream), grads(reference, (x,), upstream))


def test_cross_entropy_written_out_has_a_backward_of_one_row_pass_and_torchs_gradient():
    f = bt.jit(cross_entropy)
    logits, target = tied(8, 10), torch.randint(0, 10, (8,))
    assert not differentiates_max(f, (logits, target), "m = logits.max")
    torch.testing.assert_close(grads(f, (logits, target)), grads(torch_cross_entropy, (logits, target)))
    gpu = bt.jit(target="gpu")(cross_entropy)   # CUDA code generation needs no GPU
    meta = (torch.empty(256, 32000, device="meta"), torch.empty(256, dtype=torch.int64, device="meta"))
    rows = [k for k in gpu.backward(*meta).fusion if any(op.op == "exp" for op in k.ops)]
    assert len(rows) == 1 and not any(op.op == "equal" and "logits.max" in (op.source or "") for op in rows[0].ops)


NOT_SHIFTS = [(shifted_returned, torch_shifted_returned), (unnormalised, torch_unnormalised),
              (normalised_across_rows, torch_normalised_across_rows), (max_also_added, torch_max_also_added)]


@pytest.mark.parametrize("fn, reference", NOT_SHIFTS, ids=[s[0].__name__ for s in NOT_SHIFTS])
def test_any_other_max_keeps_torchs_gradient_shared_among_ties(fn, reference):
    f = bt.jit(fn)
    x = tied()
    assert differentiates_max(f, (x,), "max(")
    upstream = torch.rand(f(x).shape, dtype=f64)
    torch.testing.assert_close(grads(f, (x,), upstream), grads(reference, (x,), upstream))


def test_infinities_and_nan_give_torchs_gradient():
    f = bt.jit(softmax)
    x = torch.tensor([[0.0, -math.inf, 1.0, 1.0], [-math.inf] * 4, [math.inf, 0.0, 1.0, 2.0],
                      [math.nan, 0.0, 1.0, 2.0]], dtype=f64)
    upstream = torch.rand(4, 4, dtype=f64)
    torch.testing.assert_close(grads(f, (x,), upstream), grads(torch_softmax, (x,), upstream), equal_nan=True)


@settings(max_examples=5, deadline=None)
@given(rows=st.integers(1, 5), cols=st.integers(1, 9), dtype=st.sampled_from([torch.float32, torch.float64]))
def test_softmax_gradients_match_torch_over_shapes(rows, cols, dtype):
    f = bt.jit(softmax)
    x = torch.randn(rows, cols, dtype=dtype).round()   # rounded: ties are common
    upstream = torch.randn(rows, cols, dtype=dtype)
    torch.testing.assert_close(grads(f, (x,), upstream), grads(torch_softmax, (x,), upstream))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_softmax_over_long_rows(dtype):
    f = bt.jit(softmax)
    x = tied(8, 3000).to(dtype)
    assert not differentiates_max(f, (x,), "x.max(")
    upstream = torch.rand(8, 3000, dtype=dtype)
    torch.testing.assert_close(grads(f, (x,), upstream), grads(torch_softmax, (x,), upstream), atol=1e-4, rtol=2e-2)


# generated programs: row statistics (maxima among them) fed to ops that read a tuple of values
# (cat, stack, split) or reshape, slice and convert them; every max there keeps its gradient
STATS = ["x.amax({d})", "x.amin({d})", "x.max({d}).values", "x.min({d})[0]", "torch.max(x, {d}).values",
         "torch.logsumexp(x, {d})", "x.max(axis={d})", "bt.max(x, axis={d})", "x.sum({d})"]
IN_TORCH = {"x.max(axis={d})": "x.amax({d})", "bt.max(x, axis={d})": "x.amax({d})"}   # Relax's spellings
JOINS = ["torch.cat([{a}, {b}], 0)", "torch.stack([{a}, {b}], 0)", "torch.stack([{a}, {b}], 1).reshape(-1)",
         "torch.split(torch.cat([{a}, {b}]), 3)[1]", "{a}.reshape(2, 2) + {b}.reshape(2, 2)",
         "{a}[1:] * {b}[:-1]", "{a}[::2] - {b}[1::2]", "{a}.to(torch.float64) + {b}", "{a}.unsqueeze(0) + {b}"]
SOFTMAX = "torch.exp(x - x.amax({d}, keepdim=True)) / torch.exp(x - x.amax({d}, keepdim=True)).sum({d}, keepdim=True)"


def _programs(tmp_path, text, reference):
    """The generated function (to compile) and its plain-torch twin, from a file (@jit reads source)."""
    path = tmp_path / "generated.py"
    path.write_text(f"import torch\nimport babytriton as bt\n\n\ndef program(x):\n    return {text}\n\n\n"
                    f"def reference(x):\n    return {reference}\n")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.program, module.reference


@settings(max_examples=12, deadline=None)
@given(a=st.sampled_from(STATS), b=st.sampled_from(STATS), join=st.sampled_from(JOINS), d=st.sampled_from([0, 1, -1]),
       softmax_too=st.booleans(), seed=st.integers(0, 2**16))
def test_maxima_fed_to_tuples_and_views_keep_torchs_gradient(tmp_path_factory, a, b, join, d, softmax_too, seed):
    text = join.format(a=a.format(d=d), b=b.format(d=d))
    reference = join.format(a=IN_TORCH.get(a, a).format(d=d), b=IN_TORCH.get(b, b).format(d=d))
    if softmax_too:   # a shift max beside them: still detached, and still right
        text, reference = (f"{t}, {SOFTMAX.format(d=d)}" for t in (text, reference))
    fn, reference = _programs(tmp_path_factory.mktemp("shifts"), text, reference)
    torch.manual_seed(seed)
    x = torch.randn(4, 4, dtype=f64)   # continuous: no ties, so torch's max and amax rules agree
    outs = reference(x)
    upstream = [torch.randn_like(o) for o in (outs if isinstance(outs, tuple) else (outs,))]

    def weighted(f):
        def run(x):
            got = f(x)
            return sum((o * w).sum() for o, w in zip(got if isinstance(got, tuple) else (got,), upstream))
        return run
    f = bt.jit(fn)
    torch.testing.assert_close(grads(weighted(f), (x,)), grads(weighted(reference), (x,)), msg=text)
