"""Python as model code uses it, under @jit (issue 27): undecorated helpers inlined, `assert` on
sizes, `is None` / `in` / dtype comparisons, math on sizes and run-time scalars, `*sizes` in calls,
what a tensor says of itself (`x.size()`, `x.numel()`, torch.finfo), and bool arithmetic as torch's.
Every result is compared with plain torch (the undecorated function) and with f.eager(...)."""
import inspect
import math
from typing import Optional

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

import babytriton as bt

INTERNALS = ("Traceback", "tvm", "TVM", ".cc", "babytriton/", "InternalError", "relax.")
FEW = settings(max_examples=15, deadline=None)


def line_of(fn, marker: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if marker in line)


def call_error(fn, *args) -> bt.CompilationError:
    """The CompilationError of calling fn, checked to hold no compiler internals."""
    with pytest.raises(bt.CompilationError) as info:
        fn(*args)
    err = info.value
    text = str(err).replace(err.source_line or "", "")
    for word in INTERNALS:
        assert word not in text, (word, text)
    assert "^" in str(err)  # the caret under the user's code
    return err


def same_as_torch(f, *args, rtol=1e-5, atol=1e-5):
    """f compiled and eager against the undecorated function: values and dtypes."""
    want = f.fn(*args)
    for got in (f(*args), f.eager(*args)):
        got, expected = (got, want) if isinstance(want, tuple) else ((got,), (want,))
        assert len(got) == len(expected)
        for g, w in zip(got, expected):
            w = torch.as_tensor(w)
            assert g.dtype == w.dtype, (g.dtype, w.dtype)
            torch.testing.assert_close(g, w, rtol=rtol, atol=atol, equal_nan=True)


# ----------------------------------------------------------------------------------------------
# undecorated helpers, as model code writes them (Hugging Face's rotary embedding, heads, attention)
# ----------------------------------------------------------------------------------------------
def rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


def apply_rotary(q, k, cos, sin, unsqueeze_dim=1):
    cos = cos.unsqueeze(unsqueeze_dim)
    sin = sin.unsqueeze(unsqueeze_dim)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def split_heads(x: torch.Tensor, heads: int) -> torch.Tensor:
    B, T, C = x.size()
    assert C % heads == 0, f"{C} channels do not split into {heads} heads"
    return x.view(*x.shape[:-1], heads, C // heads).transpose(1, 2)


def attention(q, k, v, mask: Optional[torch.Tensor] = None, scale=None):
    scale = 1.0 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


def peak(y):
    values, indices = y.max(dim=-1)  # torch's meaning: (values, indices)
    return values + y.sum(axis=-1) + indices


def transformer_block(x, cos, sin, mask=None, heads=2):
    B, T, C = x.size()
    q = split_heads(x, heads)
    k = split_heads(x * 0.5, heads=heads)
    q, k = apply_rotary(q, k, cos, sin)
    y = attention(q, k, q, mask)
    y = y.transpose(1, 2).reshape(B, T, C)
    return y, peak(y)


@bt.jit
def block(x, cos, sin, mask: Optional[torch.Tensor] = None, heads: bt.constexpr = 2):
    return transformer_block(x, cos, sin, mask, heads)


@bt.jit
def block_symbolic(x: bt.Tensor(("b", "t", 8), "float32"), cos: bt.Tensor(("b", "t", 4), "float32"),
                   sin: bt.Tensor(("b", "t", 4), "float32")):
    return transformer_block(x, cos, sin, heads=2)


def block_inputs(b=2, t=5, c=8, heads=2):
    g = torch.Generator().manual_seed(b * 100 + t * 10 + c)
    x = torch.randn(b, t, c, generator=g)
    cos, sin = torch.randn(2, b, t, c // heads, generator=g)
    return x, cos, sin


@pytest.mark.parametrize("masked", [False, True])
def test_helpers_are_inlined_as_torch_runs_them(masked):
    x, cos, sin = block_inputs()
    mask = torch.tril(torch.ones(5, 5, dtype=torch.bool)) if masked else None  # None: a compile-time value
    same_as_torch(block, x, cos, sin, mask)


@given(st.integers(1, 3), st.integers(1, 6))
@FEW
def test_helpers_are_inlined_for_symbolic_sizes(b, t):
    same_as_torch(block_symbolic, *block_inputs(b, t))


def test_a_helper_s_source_is_part_of_the_cache_key():
    from babytriton.runtime import cache
    text, _ = cache.canonical(transformer_block, set())
    assert "def transformer_block" in text and "def split_heads" in text  # and the helpers it calls


def test_inlined_helpers_are_differentiable():
    x, cos, sin = block_inputs()
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    block(x1, cos, sin)[0].sum().backward()
    block.fn(x2, cos, sin)[0].sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-4, atol=1e-5)


def relax_spelling(x):
    return x.max(axis=1, keepdims=True), x.sum(axis=1)  # Relax's keywords: values only


@bt.jit
def uses_relax_spelling(x):
    m, s = relax_spelling(x)
    return m, s, relax_spelling(x * 2)[0]


def test_helpers_keep_the_relax_spelling_compiled_and_eager():
    x = torch.randn(3, 4)
    want = (torch.amax(x, 1, keepdim=True), x.sum(1), torch.amax(x * 2, 1, keepdim=True))
    for got in (uses_relax_spelling(x), uses_relax_spelling.eager(x)):
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)


# helpers calling helpers, defaults, keywords, tuples and numbers as arguments, closures
def scaled(x, factor: float = 2.0, *, offset=0, shape=None):
    y = x * factor + offset
    return y if shape is None else y.reshape(shape)


def twice(x, n: int = 1):
    return scaled(x) if n == 1 else scaled(x, 3.0, offset=n, shape=(x.numel(),))


def make_closure_user():
    bias = 0.25

    def shift(x):  # a helper from the closure
        return x + bias

    @bt.jit
    def closure_user(x, s: float):
        return shift(twice(x, n=2)) * s, twice(x), scaled(x, s)

    return closure_user


closure_user = make_closure_user()


def test_helpers_take_defaults_keywords_numbers_and_tuples():
    x = torch.randn(3, 4)
    same_as_torch(closure_user, x, 1.5)


# ----------------------------------------------------------------------------------------------
# errors: inside helpers, calls that are not inlined
# ----------------------------------------------------------------------------------------------
def bad_helper(x):
    return x @ x  # error


@bt.jit
def calls_bad_helper(x):
    return bad_helper(x) + 1  # call


def recurse(x, n):
    return x if n == 0 else recurse(x, n - 1)  # recursion


@bt.jit
def calls_recursion(x):
    return recurse(x, 2)


def test_an_error_in_a_helper_points_at_it_and_says_where_it_was_called():
    err = call_error(calls_bad_helper, torch.ones(2, 3))
    assert err.lineno == line_of(bad_helper, "# error")
    assert f"called from {__file__}:{line_of(calls_bad_helper, '# call')}" in err.message
    assert "inner sizes 3 and 2" in err.message


def test_recursion_is_refused():
    err = call_error(calls_recursion, torch.ones(2))
    assert err.lineno == line_of(recurse, "# recursion")
    assert "recursive call (recurse -> recurse)" in err.message


square = lambda v: v * v  # noqa: E731


class Scaler:
    def scale(self, x):
        return x * 2


SCALER = Scaler()


@bt.jit
def calls_unsupported_torch(x):
    return F.local_response_norm(x, 2)  # error


@bt.jit
def calls_lambda(x):
    return square(x)  # error


@bt.jit
def calls_method(x):
    return SCALER.scale(x)  # error


@pytest.mark.parametrize("fn, words", [
    (calls_unsupported_torch, "torch.nn.functional.local_response_norm is not supported in @jit code"),
    (calls_lambda, "cannot call the lambda `square`"),
    (calls_method, "a method of Scaler"),
])
def test_calls_that_are_not_inlined_are_clear_errors(fn, words):
    err = call_error(fn, torch.ones(2, 3, 4))
    assert err.lineno == line_of(fn, "# error")
    assert words in err.message, err.message


# ----------------------------------------------------------------------------------------------
# assert
# ----------------------------------------------------------------------------------------------
@bt.jit
def head_dim(x):
    assert x.shape[-1] % 2 == 0, f"head dim must be even, got {x.shape[-1]}"  # static
    assert x.ndim >= 1  # bare
    return x * 2


@bt.jit
def head_dim_symbolic(x: bt.Tensor(("n", "d"), "float32")):
    assert x.shape[-1] % 2 == 0, f"head dim must be even, got {x.shape[-1]} {{sic}}"  # symbolic
    assert x.ndim == 2 and x.size(0) in (1, 2, 3), "n is 1, 2 or 3"  # membership
    return x * 2


@bt.jit
def nonnegative(x):
    assert (x >= 0).all(), f"negative input in a {x.dtype} tensor"  # data
    return x.sqrt()


def test_static_assert_fails_at_compile_time_with_its_message():
    torch.testing.assert_close(head_dim(torch.ones(2, 4)), torch.full((2, 4), 2.0))
    err = call_error(head_dim, torch.ones(2, 3))
    assert err.lineno == line_of(head_dim, "# static")
    assert "AssertionError: head dim must be even, got 3" in err.message
    with pytest.raises(AssertionError, match="head dim must be even, got 3"):
        head_dim.eager(torch.ones(2, 3))


@given(st.integers(1, 4), st.integers(1, 6))
@FEW
def test_assert_on_symbolic_sizes_runs_when_called(n, d):
    x = torch.randn(n, d)
    if d % 2 == 0 and n <= 3:
        torch.testing.assert_close(head_dim_symbolic(x), x * 2)
        return
    words = (f"head dim must be even, got {d} {{sic}}" if d % 2 else "n is 1, 2 or 3")
    line = line_of(head_dim_symbolic, "# symbolic" if d % 2 else "# membership")
    with pytest.raises(RuntimeError) as info:
        head_dim_symbolic(x)
    assert words in str(info.value) and f"line {line} " in str(info.value)
    with pytest.raises(AssertionError, match=words.replace("{", r"\{").replace("}", r"\}")):
        head_dim_symbolic.eager(x)


def test_assert_on_data_runs_on_the_cpu():
    x = torch.rand(5)
    torch.testing.assert_close(nonnegative(x), x.sqrt())
    with pytest.raises(RuntimeError, match="negative input in a float32 tensor"):
        nonnegative(-x)
    with pytest.raises(AssertionError, match="negative input in a float32 tensor"):
        nonnegative.eager(-x)


@bt.jit
def fstring_of_tensor(x):
    assert x.ndim == 3, f"got {x}"  # error
    return x


def test_fstring_of_a_tensor_is_a_located_error():
    err = call_error(fstring_of_tensor, torch.ones(2))
    assert "f-string" in err.message and err.lineno == line_of(fstring_of_tensor, "# error")


# ----------------------------------------------------------------------------------------------
# is None, in, dtype comparisons; what a tensor says of itself
# ----------------------------------------------------------------------------------------------
@bt.jit
def by_dtype(x, scale=None, dim: bt.constexpr = -1):
    y = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    if scale is not None:
        y = y * scale
    if x.dtype != torch.float32 and x.dtype == torch.half:
        y = y + 1
    if dim in (-1, 1) and x.is_floating_point() and torch.is_floating_point(x) and x.dtype.is_floating_point:
        y = y - torch.finfo(x.dtype).eps
    return y + x.element_size() + (x.dtype is not None) + (scale is None) + (x is None) + x.dtype.itemsize


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("scale", [None, 2])
def test_dtype_and_none_comparisons_pick_paths_as_torch(dtype, scale):
    same_as_torch(by_dtype, torch.randn(2, 3).to(dtype), scale)


@bt.jit
def by_dtype_name(x):
    return x * 2 if x.dtype == "float16" and "float16" == x.dtype and x.dtype in ("float16",) else x


def test_dtypes_still_equal_their_names():
    for dtype, factor in ((torch.float16, 2), (torch.float32, 1)):
        x = torch.randn(3).to(dtype)
        for got in (by_dtype_name(x), by_dtype_name.eager(x)):
            torch.testing.assert_close(got, x * factor)


@bt.jit
def dtype_identity(x):
    return x * 2 if x.dtype is torch.float32 else x  # error


@bt.jit
def tensor_in_tuple(x):
    return x in (1, 2)  # error


@pytest.mark.parametrize("fn, words", [
    (dtype_identity, "use `==` / `!=`, e.g. `x.dtype == torch.float16`"),
    (tensor_in_tuple, "`in` with a tensor on its left is not supported"),
])
def test_is_and_in_refuse_what_cannot_be_right(fn, words):
    err = call_error(fn, torch.ones(2))
    assert words in err.message and err.lineno == line_of(fn, "# error")
    with pytest.raises(TypeError, match=words.replace("(", r"\(").replace(")", r"\)")):
        fn.eager(torch.ones(2))


@bt.jit
def meta(x: bt.Tensor(("n", "m"), "float32")):
    n, m = x.size()
    info = torch.finfo(x.dtype)
    assert x.dim() == x.ndimension() == len(x.shape) == 2
    assert x.is_contiguous() and torch.iinfo(torch.int8).max == 127
    flat = x.reshape(*x.shape[:-1], m)
    return (flat * float(x.numel()) + x.size(-1) + len(x) + x.size()[1:][0] - int(n) * torch.numel(x)
            + math.sqrt(m) + info.tiny / info.eps)


@given(st.integers(1, 5), st.integers(0, 4))
@FEW
def test_sizes_are_numbers_static_or_symbolic(n, m):
    same_as_torch(meta, torch.randn(n, m))


@bt.jit
def meta_static(x):
    B, T, C = x.size()
    s = x.size()[1:]
    return x.view(B, *s[:1], 2, C // 2).sum(-1) * (1.0 / math.sqrt(C)) + x.numel() + s[-1]


def test_sizes_of_static_shapes_fold():
    same_as_torch(meta_static, torch.randn(2, 3, 4))


# ----------------------------------------------------------------------------------------------
# math of run-time scalars and sizes
# ----------------------------------------------------------------------------------------------
@bt.jit
def maths(x, s: float, n: int):
    return x * math.sqrt(s) + math.log(s) - math.exp(n / 4) * math.pi + math.sqrt(n) + math.tanh(s)


@given(st.floats(0.1, 10.0), st.integers(1, 20))
@FEW
def test_math_functions_of_run_time_scalars(s, n):
    same_as_torch(maths, torch.randn(3), s, n)


# ----------------------------------------------------------------------------------------------
# bool arithmetic as torch's
# ----------------------------------------------------------------------------------------------
@bt.jit
def bools(x, m, k):
    return m * k, m + k, m * x, x * m, m + 1, m.sum(), m + m, ~m & k, m * True, (m | k) * 2.5


masks = st.lists(st.booleans(), min_size=0, max_size=6)


@given(masks, st.data())
@FEW
def test_bool_arithmetic_as_torch(m, data):
    k = data.draw(st.lists(st.booleans(), min_size=len(m), max_size=len(m)))
    m, k = torch.tensor(m, dtype=torch.bool), torch.tensor(k, dtype=torch.bool)
    same_as_torch(bools, torch.randn(len(m)), m, k)


def test_mask_products_are_differentiable():
    m, k = torch.tensor([True, False, True]), torch.tensor([True, True, False])
    x1 = torch.randn(3, requires_grad=True)
    x2 = x1.detach().clone().requires_grad_()
    (bools(x1, m, k)[2] * 2 + bools(x1, m, k)[3]).sum().backward()
    (bools.fn(x2, m, k)[2] * 2 + bools.fn(x2, m, k)[3]).sum().backward()
    torch.testing.assert_close(x1.grad, x2.grad)


@bt.jit
def subtract_bools(m):
    return m - m  # error


@bt.jit
def subtract_one(m):
    return 1 - m  # error


@pytest.mark.parametrize("fn, words", [
    (subtract_bools, "Subtraction, the `-` operator, with two bool tensors is not supported."),
    (subtract_one, "Subtraction, the `-` operator, with a bool tensor is not supported."),
])
def test_bool_subtraction_is_torch_s_error(fn, words):
    m = torch.tensor([True, False])
    err = call_error(fn, m)
    assert words in err.message and err.lineno == line_of(fn, "# error")
    with pytest.raises(RuntimeError, match=words.replace("(", r"\(").replace(")", r"\)")):
        fn.fn(m)


# ----------------------------------------------------------------------------------------------
# on a GPU
# ----------------------------------------------------------------------------------------------
@pytest.mark.gpu
def test_on_a_gpu_size_asserts_run_and_data_asserts_are_not_checked():
    sizes = bt.jit(target="cuda")(head_dim_symbolic.fn)
    data = bt.jit(target="cuda")(nonnegative.fn)
    x = torch.rand(3, 4, device="cuda")
    torch.testing.assert_close(sizes(x), x * 2)
    with pytest.raises(RuntimeError, match="head dim must be even, got 5"):
        sizes(torch.rand(3, 5, device="cuda"))
    torch.testing.assert_close(data(x), x.sqrt())
    assert data(-x).isnan().all()  # not checked on a GPU (README): torch.sqrt's NaN
    block_gpu = bt.jit(target="cuda")(block.fn)
    args = [t.cuda() for t in block_inputs()]
    for got, want in zip(block_gpu(*args), block.fn(*args)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


# -- comprehensions over compile-time sequences -------------------------------------------------
@bt.jit
def comprehensions(a, b, c, max_norm: float):
    grads = [a, b, c]
    total = torch.stack([g.norm(2) for g in grads]).norm(2)
    coef = torch.clamp(max_norm / (total + 1e-6), max=1.0)
    pairs = [x * y for x, y in zip((a, b), (a.flip(0), b.flip(0)))]
    return (*tuple(g * coef for g in grads), sum(g.square().sum() for g in grads), pairs[1],
            *[i * 2 for i, g in enumerate(grads) if i != 1], [g.sum() for g in reversed(grads)][0])


def test_comprehensions_unroll_over_tuples_and_builtins():
    a, b, c = torch.randn(3, 4), torch.randn(5), torch.randn(2, 2)
    same_as_torch(comprehensions, a, b, c, 0.5)


@bt.jit
def over_a_tensor(x):
    return [row.sum() for row in x]  # the bad line


@bt.jit
def run_time_filter(x):
    return [y for y in (x, x) if y.sum() > 0]  # the bad line


@pytest.mark.parametrize("f, words", [(over_a_tensor, "a tuple or list known when compiling"),
                                      (run_time_filter, "`if` must be known when compiling")])
def test_comprehension_errors_are_located(f, words):
    err = call_error(f, torch.randn(3, 4))
    assert words in err.message and err.lineno == line_of(f.fn, "# the bad line")
