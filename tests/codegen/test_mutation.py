"""In-place updates with torch's meaning (codegen/mutation.py): in-place methods on locals, aliases,
views, and parameters written back into the caller's tensors (optimizer steps), compiled and eager."""
import warnings

import pytest
import torch

import babytriton as bt
from babytriton import CompilationError


def _close(a, b):
    assert a.dtype == b.dtype and a.shape == b.shape, (a.dtype, a.shape, b.dtype, b.shape)
    half = a.dtype in (torch.float16, torch.bfloat16)  # chains of ops round at each step: an ulp or two apart
    torch.testing.assert_close(a, b, equal_nan=True, **({"atol": 2e-3, "rtol": 2e-2} if half else {}))


def _both(f):
    return [("jit", f), ("eager", f.eager)]


def _error(f, *args) -> str:
    with pytest.raises(CompilationError) as info:
        f(*args)
    message = str(info.value)
    assert "tvm" not in message.lower()
    return message


# ----------------------------------------------------------------------------------------------
# in-place methods on locals
# ----------------------------------------------------------------------------------------------
def _chains(x, y, m):
    a = x * 1
    a.masked_fill_(m, 0.5).add_(y, alpha=2).clamp_(min=0)
    b = x.clone()
    b.addcmul_(x, y, value=0.5).addcdiv_(y, x.abs() + 1, value=-2).lerp_(y, 0.25)
    c = x.abs()
    c.sqrt_().exp_().neg_().div_(3).sub_(y).pow_(2)
    d = x.clone()
    d.zero_()
    d[:, 1:].fill_(4.0)
    e = x.clone()
    e.copy_(y[0])
    e[:, :2].mul_(2).add_(1)
    i = (x * 10).to(torch.int32)
    i.add_(3).mul_(2)
    return a, b, c, d, e, i


chains = bt.jit(_chains)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_inplace_chains_match_torch(dtype):
    x, y = torch.randn(3, 4).to(dtype), torch.randn(3, 4).to(dtype)
    m = x > 0.5
    expected = _chains(x.clone(), y.clone(), m)
    for _, f in _both(chains):
        for got, want in zip(f(x, y, m), expected):
            _close(got, want)


@bt.jit
def _aliases(x):
    y = x.clone()
    z = y            # one tensor, two names: both see the update
    z.add_(1)
    w = y[0]         # a view of y: it sees the updates of y that follow, as in torch
    y[0].mul_(2)
    y.sub_(0.5)
    return y, z, w


def test_aliases_and_views_see_the_update():
    x = torch.randn(2, 3)
    y = x.clone()
    z = y
    z.add_(1)
    w = y[0]
    y[0].mul_(2)
    y.sub_(0.5)
    for _, f in _both(_aliases):
        for got, want in zip(f(x), (y, z, w)):
            _close(got, want)


def test_updating_a_view_is_a_located_error():
    @bt.jit
    def f(x):
        y = x.clone()
        v = y[0]
        v.add_(1)
        return y

    @bt.jit
    def g(x):
        y = x.clone()
        t = y.transpose(0, 1)
        t[0] = 0
        return y
    @bt.jit
    def h(x):
        y = x.clone()
        t = y.transpose(0, 1)
        y.add_(1)        # t would change too in torch
        return t
    @bt.jit
    def k(x):
        y = x.clone()
        a, b = y.chunk(2)
        b.zero_()
        return y

    @bt.jit
    def t(x):
        y = x.clone()
        z = y.T
        z[0] = 1
        return y
    for fn in (f, g, h, k, t):
        message = _error(fn, torch.randn(2, 3))
        assert "view" in message and "clone()" in message and "test_mutation.py:" in message


@pytest.mark.parametrize("case", ["promote", "broadcast"])
def test_inplace_refuses_what_torch_refuses(case):
    @bt.jit
    def f(x, y):
        z = x.clone()
        if case == "promote":
            z.add_(0.5)
        else:
            z.add_(y)
        return z
    x = torch.zeros(3, dtype=torch.int64) if case == "promote" else torch.zeros(3)
    message = _error(f, x, torch.ones(2, 3))
    assert ("result type Float can't be cast to the desired output type Long" in message if case == "promote"
            else "output with shape (3,) doesn't match the broadcast shape (2, 3)" in message)


# ----------------------------------------------------------------------------------------------
# parameters: the caller's tensors updated in place
# ----------------------------------------------------------------------------------------------
@bt.jit
def adamw(p, g, m, v, lr: float, b1: float, b2: float, eps: float, wd: float, step: int):
    p.mul_(1 - lr * wd)
    m.mul_(b1).add_(g, alpha=1 - b1)
    v.mul_(b2).addcmul_(g, g, value=1 - b2)
    m_hat = m / (1 - b1 ** step)
    p.addcdiv_(m_hat, (v / (1 - b2 ** step)).sqrt().add_(eps), value=-lr)


def _adamw_reference(p, g, m, v, lr, b1, b2, eps, wd, step):
    p.mul_(1 - lr * wd)
    m.mul_(b1).add_(g, alpha=1 - b1)
    v.mul_(b2).addcmul_(g, g, value=1 - b2)
    p.addcdiv_(m / (1 - b1 ** step), (v / (1 - b2 ** step)).sqrt().add_(eps), value=-lr)


@pytest.mark.parametrize("mode", ["jit", "eager"])
def test_adamw_step_updates_in_place(mode):
    torch.manual_seed(0)
    p = torch.randn(4, 5, requires_grad=True)
    g, m, v = torch.randn(4, 5), torch.zeros(4, 5), torch.zeros(4, 5)
    ref = [t.detach().clone() for t in (p, g, m, v)]
    pointers = [t.data_ptr() for t in (p, m, v)]
    step = adamw if mode == "jit" else adamw.eager
    for k in (1, 2):
        with torch.no_grad():
            assert step(p, g, m, v, 1e-2, 0.9, 0.999, 1e-8, 0.01, k) is None
        _adamw_reference(*ref, 1e-2, 0.9, 0.999, 1e-8, 0.01, k)
    for got, want in zip((p, m, v), (ref[0], ref[2], ref[3])):
        _close(got.detach(), want)
    assert [t.data_ptr() for t in (p, m, v)] == pointers
    assert p.requires_grad


@bt.jit
def sgd_momentum(p, g, buf, lr: float, momentum: float):
    buf.mul_(momentum).add_(g)
    p.add_(buf, alpha=-lr)
    return p.norm() if False else (p * p).sum()


def test_sgd_momentum_step_and_leaf_error():
    p, g, buf = torch.randn(6, requires_grad=True), torch.randn(6), torch.zeros(6)
    rp, rb = p.detach().clone(), buf.clone()
    with torch.no_grad():
        result = sgd_momentum(p, g, buf, 0.1, 0.9)
    rb.mul_(0.9).add_(g)
    rp.add_(rb, alpha=-0.1)
    _close(p.detach(), rp)
    _close(buf, rb)
    _close(result, (rp * rp).sum())
    with pytest.raises(RuntimeError, match="a leaf Variable that requires grad is being used in an in-place.*'p'"):
        sgd_momentum(p, g, buf, 0.1, 0.9)  # grad enabled: torch's rule


@bt.jit
def _region_updates(p, mask):
    p[mask] = 0
    p[:, 0] = 1
    p[-1, 1:] += 2


@bt.jit
def _in_loops(p, g, n: int):
    for _ in range(3):          # unrolled
        p.add_(g, alpha=0.5)
    for _ in range(40):         # compiled as a loop (above `unroll`)
        p.mul_(0.99)
    if n > 2:                   # decided when the code runs
        p.sub_(1)
    q = p
    for _ in range(n):          # a run-time trip count; q is p
        q.add_(0.25)


def test_parameter_region_updates_and_loops():
    for mode, f in _both(_region_updates):
        p = torch.randn(3, 4)
        ptr, ref = p.data_ptr(), p.clone()
        mask = p > 0.5
        f(p, mask)
        ref[mask] = 0
        ref[:, 0] = 1
        ref[-1, 1:] += 2
        _close(p, ref)
        assert p.data_ptr() == ptr
    for mode, f in _both(_in_loops):
        for n in (1, 4):
            p, g = torch.randn(5), torch.randn(5)
            ref = p.clone()
            f(p, g, n)
            for _ in range(3):
                ref.add_(g, alpha=0.5)
            for _ in range(40):
                ref.mul_(0.99)
            if n > 2:
                ref.sub_(1)
            ref.add_(0.25 * n)
            _close(p, ref)


@bt.jit
def _rebound(p, q):
    p = p * 2                    # a local from here: the caller's p is untouched
    p.add_(1)
    y = q.clone()
    y.add_(1)                    # a copy: the caller's q is untouched
    return p + y


def test_rebinding_is_not_written_back():
    for mode, f in _both(_rebound):
        p, q = torch.randn(3), torch.randn(3)
        before_p, before_q = p.clone(), q.clone()
        _close(f(p, q), before_p * 2 + 1 + before_q + 1)
        _close(p, before_p)
        _close(q, before_q)


def test_parameter_updated_and_rebound_is_refused():
    @bt.jit
    def f(p):
        p.add_(1)
        p = p * 2
        return p
    assert "also rebound with `=`" in _error(f, torch.randn(3))


def test_augmented_assignment_stays_functional():
    @bt.jit
    def f(x):
        x += 1          # README "Semantics": x = x + 1, the caller's x is untouched
        return x
    for mode, fn in _both(f):
        x = torch.zeros(2)
        _close(fn(x), torch.ones(2))
        _close(x, torch.zeros(2))


def test_gradient_through_inplace_on_a_local():
    @bt.jit
    def f(x):
        y = x * 1
        y.mul_(3).add_(1)
        y[:, 0] = 0
        return y
    x = torch.randn(2, 3, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        (f(x) * torch.arange(6.0).reshape(2, 3)).sum().backward()
    r = x.detach().clone().requires_grad_()
    y = r * 1
    y.mul_(3).add_(1)
    y[:, 0] = 0
    (y * torch.arange(6.0).reshape(2, 3)).sum().backward()
    _close(x.grad, r.grad)


@bt.jit
def _scale_in_place(t):
    t.mul_(2)


def test_inlined_function_updating_its_parameter_is_refused():
    @bt.jit
    def f(x):
        y = x.clone()
        _scale_in_place(y)
        return y
    assert "of an inlined @jit function is updated in place" in _error(f, torch.randn(3))


def test_region_of_a_parameter_updated_through_a_method():
    @bt.jit
    def f(p, d: bt.constexpr):
        p[:, :d].mul_(2).add_(1)
    for mode, fn in _both(f):
        p = torch.randn(2, 4)
        ref = p.clone()
        ref[:, :3].mul_(2).add_(1)
        fn(p, 3)
        _close(p, ref)


def test_inplace_through_detach_and_on_a_view_temporary():
    @bt.jit
    def f(p):
        p.detach().mul_(3)      # the same memory: p is updated

    @bt.jit
    def g(x):
        y = x.clone()
        y.view(-1).add_(1)      # torch would update y through the view
        return y
    for mode, fn in _both(f):
        p = torch.randn(4)
        ref = p * 3
        fn(p)
        _close(p, ref)
    assert "is a view" in _error(g, torch.randn(2, 2))


def test_function_form_of_an_inplace_op():
    @bt.jit
    def f(x):
        y = x.clone()
        torch.relu_(y)
        torch.Tensor.add_(y, 1)
        return y
    for mode, fn in _both(f):
        x = torch.randn(5)
        _close(fn(x), x.relu() + 1)


def test_a_compiled_version_called_directly_writes_back_too():
    @bt.jit
    def f(p, g):
        p.add_(g)
        return p.sum()
    p, g = torch.zeros(3), torch.ones(3)
    kernel = f.compile(p, g)
    _close(kernel(p, g), torch.tensor(3.0))
    _close(p, torch.ones(3))


def test_inplace_keyword_writes_its_input_as_torch_does():
    """F.relu(y, inplace=True) changes y (a local) and F.silu(p, inplace=True) the caller's p."""
    import torch.nn.functional as F

    def f(x, p):
        y = x * 2
        z = F.relu(y, inplace=True)
        F.silu(p, inplace=True)
        return y + z, F.relu(x * 3, inplace=True)   # a temporary: just the value

    x, p = torch.randn(4, 5), torch.randn(5)
    p_torch, p_compiled, p_eager = p.clone(), p.clone(), p.clone()
    want = f(x, p_torch)
    for got, written in ((bt.jit(f)(x, p_compiled), p_compiled), (bt.jit(f).eager(x, p_eager), p_eager)):
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(written, p_torch)
