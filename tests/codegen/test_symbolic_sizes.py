"""Symbolic sizes written as different expressions (values.compare_sizes, RelaxCodeGen.aligned): sizes
equal for every non-negative size count as one size (`x[1:] - x[:-1]` with x of ("n", 4)); sizes equal
for some sizes only are checked at each call; results are compared with torch for n from 0 up."""
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tvm import tirx

import babytriton as bt
from babytriton.codegen.values import compare_sizes, same_size

SIZES = range(6)


def pair(x: bt.Tensor(("n", 3)), a: bt.constexpr, b: bt.constexpr):
    return x[a[0]:a[1]:a[2]] - x[b[0]:b[1]:b[2]]


def torch_pair(x, a, b):
    return x[a[0]:a[1]:a[2]] - x[b[0]:b[1]:b[2]]


def neighbours(x: bt.Tensor(("n", 4))):
    return x[1:] - x[:-1], x[2:] * x[:-2] + x[1:-1], torch.cat([x[:1], x[1:]]) - x


def test_slices_of_one_symbolic_size_that_are_always_equal_meet():
    f = bt.jit(neighbours)
    for n in SIZES:
        x = torch.randn(n, 4)
        for got, want in zip(f(x), (x[1:] - x[:-1], x[2:] * x[:-2] + x[1:-1], torch.cat([x[:1], x[1:]]) - x)):
            torch.testing.assert_close(got, want)
        for got, want in zip(f.eager(x), neighbours(x)):
            torch.testing.assert_close(got, want)


def test_gradients_of_differences_of_slices():
    f = bt.jit(neighbours)
    x = torch.randn(5, 4, requires_grad=True)
    (f(x)[0] ** 2).sum().backward()
    got, x.grad = x.grad, None
    ((x[1:] - x[:-1]) ** 2).sum().backward()
    torch.testing.assert_close(got, x.grad)


bound = st.one_of(st.none(), st.integers(-5, 5))
piece = st.tuples(bound, bound, st.sampled_from([None, 1, 2, 3]))


@settings(max_examples=15, deadline=None)
@given(a=piece, b=piece)
def test_generated_pairs_of_slices_match_torch_or_fail_clearly(a, b):
    """Where torch's two slices have one size for every n, the compiled code agrees with torch for
    every n; where they differ for some n only, those calls fail with the check's message (a symbolic
    size broadcasts only as a static 1 does: README), the others agree."""
    f = bt.jit(pair)
    compiled = None
    for n in SIZES:
        x = torch.randn(n, 3)
        try:
            want = torch_pair(x, a, b)
        except RuntimeError:
            want = None
        try:
            got = f(x, a, b)
        except bt.CompilationError as e:   # only when the sizes can never meet
            assert compiled is None and "never" in str(e), str(e)
            assert all(x[a[0]:a[1]:a[2]].shape[0] not in (x[b[0]:b[1]:b[2]].shape[0], 1)
                       for x in map(torch.empty, ((m, 3) for m in range(1, 8)))), (a, b)
            return
        except (RuntimeError, ValueError) as e:
            compiled = True
            sizes = x[a[0]:a[1]:a[2]].shape[0], x[b[0]:b[1]:b[2]].shape[0]
            assert want is None or sizes[0] != sizes[1], (a, b, n, str(e))
            assert "meets the size" in str(e) or "combines it" in str(e), str(e)
            continue
        compiled = True
        assert want is not None, (a, b, n)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(f.eager(x, a, b), want)


def test_sizes_compare_for_every_non_negative_size():
    n, m = tirx.Var("n", "int64"), tirx.Var("m", "int64")
    one, zero = tirx.const(1, "int64"), tirx.const(0, "int64")
    assert same_size(tirx.max(n - one, zero), tirx.min(tirx.max(n - one, zero), n))   # true only for n >= 0
    assert compare_sizes(n, n + 1) is False and compare_sizes(tirx.min(one, n), 3) is False
    assert compare_sizes(tirx.floordiv(n, 2), n - tirx.floordiv(n, 2)) is None   # even n only
    assert compare_sizes(n, m) is None and compare_sizes(3, 3) and not same_size(n, 3)
    assert compare_sizes(tirx.max(n, 3) - tirx.max(n, 3) + 2, 2) is True


def expanded(x: bt.Tensor(("n", 4))):
    return x[:1] + torch.ones(3, 4)


def test_a_size_that_can_only_broadcast_is_checked_to_be_one():
    f = bt.jit(expanded)
    for n in (1, 4):
        x = torch.randn(n, 4)
        torch.testing.assert_close(f(x), expanded(x))
    with pytest.raises(RuntimeError, match="must be 1"):
        f(torch.randn(0, 4))
    with pytest.raises(RuntimeError):
        expanded(torch.randn(0, 4))
