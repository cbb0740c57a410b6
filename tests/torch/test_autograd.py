"""@jit calls inside torch autograd (babytriton/torch/autograd.py, backward.py): every case compared with
plain torch on the same inputs — several results, non-differentiable results and arguments,
broadcasting, halves, views, strides, empty tensors, NaN/inf, grad modes, threads, the disk cache,
the backward as a Kernel and in `explain`, the fallbacks and errors where Gradient cannot go, user
TensorIR kernels with @bt.grad_for, and double backward."""
import threading
import warnings

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from tvm.script import tirx as T

from tvm.relax.analysis import free_vars
from tvm.relax.op import gather_elements
from tvm.script import relax as R

import babytriton as bt
from babytriton.autodiff import backward
from babytriton.codegen.relax import RelaxCodeGen

F64 = torch.float64


def _copy(args):
    return [a.detach().clone().requires_grad_(a.requires_grad) if isinstance(a, torch.Tensor) else a for a in args]


def _tuple(x):
    return x if isinstance(x, tuple) else (x,)


def check(f, ref, args, grad_outputs=None, close=None, compiled=True):
    """f(*args) and ref(*args) (plain torch) on copies of the same inputs: the same results, the same
    requires_grad on each, and the same gradients (dtype, shape, values) for the same incoming
    gradients; with `compiled`, from the compiled backward (a fallback is an error). Returns f's
    gradients."""
    if compiled:
        with warnings.catch_warnings():
            warnings.simplefilter("error", bt.GradientFallbackWarning)
            return check(f, ref, args, grad_outputs, close, compiled=False)
    close = close or (lambda got, want: torch.testing.assert_close(got, want, equal_nan=True))
    mine, theirs = _copy(args), _copy(args)
    got, want = _tuple(f(*mine)), _tuple(ref(*theirs))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        close(g.detach(), w.detach())
        assert g.requires_grad == w.requires_grad and g.dtype == w.dtype
    pairs = [(g, w) for g, w in zip(got, want) if w.requires_grad]
    if grad_outputs is None:
        torch.manual_seed(1)
        grad_outputs = [torch.randn_like(w) for _, w in pairs]
    leaves_m = [a for a in mine if isinstance(a, torch.Tensor) and a.requires_grad]
    leaves_t = [a for a in theirs if isinstance(a, torch.Tensor) and a.requires_grad]
    gm = torch.autograd.grad([g for g, _ in pairs], leaves_m, grad_outputs, allow_unused=True)
    gt = torch.autograd.grad([w for _, w in pairs], leaves_t, grad_outputs, allow_unused=True)
    for a, b in zip(gm, gt):
        if b is None:
            assert a is None or not a.any()
            continue
        assert a.dtype == b.dtype and a.shape == b.shape
        close(a, b)
    return gm


# --------------------------------------------------------------------------------------------------
# item 3 of the issue: what is differentiated, as torch does
# --------------------------------------------------------------------------------------------------

@bt.jit
def three(x, w, n: int):
    y = x * w + n
    return y, x > 0, bt.sum(y * y)


def three_ref(x, w, n):
    y = x * w + n
    return y, x > 0, (y * y).sum()


def test_several_results_one_not_differentiable_one_unused():
    x, w = torch.randn(4, 8, dtype=F64, requires_grad=True), torch.randn(8, dtype=F64, requires_grad=True)
    check(three, three_ref, [x, w, 3])
    y, positive, total = three(x, w, 3)
    assert not positive.requires_grad and positive.dtype == torch.bool
    total.backward()            # y unused: torch gives the backward zeros for it
    y2 = x.detach() * w.detach() + 3
    torch.testing.assert_close(x.grad, 2 * y2 * w.detach())
    torch.testing.assert_close(w.grad, (2 * y2 * x.detach()).sum(0))


def test_inputs_that_do_not_require_grad():
    x, w = torch.randn(4, 8, dtype=F64, requires_grad=True), torch.randn(8, dtype=F64)
    check(three, three_ref, [x, w, 3])
    check(three, three_ref, [x.detach(), w.requires_grad_(), -1])


@bt.jit
def scaled(x, s: float, k: bt.constexpr, idx, mask):
    y = bt.where(mask, x * s, x + k) + idx
    return y * y, bt.argmax(y, axis=1)


def test_scalars_constexprs_and_integer_and_bool_tensors():
    x = torch.randn(3, 5, dtype=F64, requires_grad=True)
    idx, mask = torch.arange(5), torch.rand(3, 5) > 0.5

    def ref(x, s, k, idx, mask):
        y = torch.where(mask, x * s, x + k) + idx
        return y * y, torch.argmax(y, dim=1)
    check(scaled, ref, [x, 1.5, 2, idx, mask])
    check(scaled, ref, [x, -0.5, 3, idx, mask])


@bt.jit
def affine(x, w, b):
    return x * w + b


@st.composite
def broadcast_shapes(draw):
    """Three shapes that broadcast together: suffixes of one shape, some sizes 1."""
    full = draw(st.lists(st.integers(1, 4), min_size=0, max_size=3))
    shapes = []
    for _ in range(3):
        rank = draw(st.integers(0, len(full)))
        dims = full[len(full) - rank:]
        shapes.append(tuple(1 if draw(st.booleans()) else d for d in dims))
    return shapes


@settings(max_examples=8, deadline=None)
@given(shapes=broadcast_shapes())
def test_broadcasting_reduces_gradients_to_each_input(shapes):
    args = [torch.randn(s, dtype=F64, requires_grad=True) for s in shapes]
    grads = check(affine, lambda x, w, b: x * w + b, args)
    assert [tuple(g.shape) for g in grads] == [tuple(s) for s in shapes]


def test_mixed_dtypes_promote_and_each_gradient_is_in_its_inputs_dtype():
    args = [torch.randn(4, 3, requires_grad=True), torch.randn(3, dtype=torch.float16, requires_grad=True),
            torch.randn(1, dtype=F64, requires_grad=True)]
    grads = check(affine, lambda x, w, b: x * w + b, args)
    assert [g.dtype for g in grads] == [torch.float32, torch.float16, F64]


@bt.jit
def passthrough(x, y):
    return x, y * 2.0, bt.reshape(y, (2, 6)), bt.permute_dims(y, (1, 0))


def test_a_result_that_is_an_input_or_a_view_of_one():
    x, y = torch.randn(5, dtype=F64, requires_grad=True), torch.randn(3, 4, dtype=F64, requires_grad=True)
    check(passthrough, lambda x, y: (x, y * 2.0, y.reshape(2, 6), y.permute(1, 0)), [x, y])


@bt.jit
def act(x, w):
    return bt.tanh(x @ w) * 0.5


@bt.jit
def norm(x, w):
    m = bt.mean(x, axis=-1, keepdims=True)
    d = x - m
    return d / bt.sqrt(bt.mean(d * d, axis=-1, keepdims=True) + 1e-5) * bt.sigmoid(w)


def norm_ref(x, w):
    m = x.mean(-1, keepdim=True)
    d = x - m
    return d / torch.sqrt((d * d).mean(-1, keepdim=True) + 1e-5) * torch.sigmoid(w)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("fn,ref,shapes", [(act, lambda x, w: torch.tanh(x @ w) * 0.5, [(6, 40), (40, 5)]),
                                            (norm, norm_ref, [(4, 300), (300,)])], ids=["matmul", "norm"])
def test_half_gradients_are_in_the_input_dtype_as_accurate_as_torchs(dtype, fn, ref, shapes):
    torch.manual_seed(0)
    args = [torch.randn(s, dtype=dtype, requires_grad=True) for s in shapes]
    grad_out = torch.randn(ref(*args).shape, dtype=dtype)
    wide = [a.detach().float().requires_grad_() for a in args]   # the exact answer, for both to meet
    exact = torch.autograd.grad(ref(*wide), wide, grad_out.float())
    ulp = torch.finfo(dtype).eps
    out = fn(*args)
    torch.testing.assert_close(out, ref(*args), atol=4 * ulp, rtol=4 * ulp)
    mine = torch.autograd.grad(out, args, grad_out)
    theirs = torch.autograd.grad(ref(*args), args, grad_out)       # torch's own half autograd
    for got, want, truth in zip(mine, theirs, exact):
        assert got.dtype == want.dtype == dtype and got.shape == want.shape
        err_torch = (want.float() - truth).abs().max()
        err_mine = (got.float() - truth).abs().max()
        assert err_mine <= 2 * err_torch + 2 * ulp * truth.abs().max(), (err_mine, err_torch)


def test_non_contiguous_inputs_and_incoming_gradients():
    ref = lambda x, w: torch.tanh(x @ w) * 0.5  # noqa: E731
    x = torch.randn(8, 4, dtype=F64).T.requires_grad_()
    w = torch.randn(3, 8, dtype=F64)[:, ::1].T.requires_grad_()
    assert not x.is_contiguous() and not w.is_contiguous()
    check(act, ref, [x, w])
    x, w = torch.randn(4, 8, dtype=F64, requires_grad=True), torch.randn(8, 3, dtype=F64, requires_grad=True)
    check(act, ref, [x, w], [torch.randn(1, 3, dtype=F64).expand(4, 3)])     # stride 0
    check(act, ref, [x, w], [torch.randn(3, 4, dtype=F64).T])                # transposed
    out = act(x, w)
    out.sum().backward()        # sum's backward is an expanded tensor too
    x2, w2 = x.detach().requires_grad_(), w.detach().requires_grad_()
    ref(x2, w2).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(w.grad, w2.grad)


@pytest.mark.parametrize("shapes", [[(0, 8), (8, 3)], [(4, 0), (0, 3)]], ids=["no-rows", "empty-reduction"])
def test_empty_tensors(shapes):
    args = [torch.randn(s, dtype=F64, requires_grad=True) for s in shapes]
    check(act, lambda x, w: torch.tanh(x @ w) * 0.5, args)


@bt.jit
def root(x, y):
    return bt.sqrt(x) * y, bt.log(x) + bt.exp(y)


def test_nan_and_inf_propagate_into_gradients_as_in_torch():
    x = torch.tensor([0.0, 1.0, float("nan"), float("inf"), -1.0, 4.0], dtype=F64, requires_grad=True)
    y = torch.tensor([1.0, float("-inf"), 2.0, 0.0, float("nan"), 1e300], dtype=F64, requires_grad=True)
    check(root, lambda x, y: (torch.sqrt(x) * y, torch.log(x) + torch.exp(y)), [x, y])


def test_no_grad_inference_mode_and_eval_make_no_graph_where_torch_makes_none():
    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8, 3, requires_grad=True)
    with torch.no_grad():
        out = act(x, w)
    assert not out.requires_grad and out.grad_fn is None
    with torch.inference_mode():
        out = act(x, w)
    assert not out.requires_grad and out.is_inference()

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.randn(8, 3))

        def forward(self, x):
            return act(x, self.w)
    layer = Layer().eval()      # eval() changes no grad mode: parameters still get gradients
    layer(x).sum().backward()
    w2 = layer.w.detach().requires_grad_()
    (torch.tanh(x.detach() @ w2) * 0.5).sum().backward()
    torch.testing.assert_close(layer.w.grad, w2.grad)


def test_threads_calling_forward_and_backward_at_once():
    f = bt.jit(norm.fn)
    errors, barrier = [], threading.Barrier(4)

    def work(seed):
        try:
            g = torch.Generator().manual_seed(seed)
            x = torch.randn(3, 16, dtype=F64, generator=g)
            w = torch.randn(16, dtype=F64, generator=g)
            barrier.wait()
            for _ in range(3):
                check(f, norm_ref, [x.requires_grad_(), w.requires_grad_()], compiled=False)  # filters: not per thread
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert f.cache_info()["compilations"] == 2      # one forward, one backward, for all threads


@bt.jit
def mixed_kinds(x, a, t):
    return x * a + t


def test_numpy_and_bt_tensor_arguments_beside_differentiated_ones():
    x = torch.randn(3, dtype=F64, requires_grad=True)
    a = np.linspace(-1, 1, 3)
    held = bt.Tensor((3,), "float64")
    held.data = torch.randn(3, dtype=F64)
    check(mixed_kinds, lambda x, a, t: x * torch.from_numpy(a) + held.data, [x, a, held])
    held.data = torch.randn(3, dtype=F64, requires_grad=True)   # a gradient it could not get: an error
    with pytest.raises(TypeError, match="bt.Tensor argument.*require grad"):
        mixed_kinds(x, a, held)


# --------------------------------------------------------------------------------------------------
# the backward as a Kernel: stages, source, fusion map, disk cache, explain
# --------------------------------------------------------------------------------------------------

def layer_norm_like(x, w):
    m = bt.mean(x, axis=-1, keepdims=True)
    d = x - m
    y = d * w
    return bt.sigmoid(y) * y


def test_the_backward_kernel_has_stages_source_and_a_fusion_map_of_the_users_lines():
    f = bt.jit(layer_norm_like)
    x, w = torch.randn(4, 8), torch.randn(8)
    k = f.backward(x, w)
    assert k.name == "layer_norm_like_backward"
    stages = list(k.stages)
    assert stages[:4] == ["python", "ast", "relax", "backward"] and stages[-1] == "source"
    assert "def layer_norm_like_backward(" in k.stages["backward"] and k.source
    first = layer_norm_like.__code__.co_firstlineno
    lines = {first + i for i in range(1, 5)}          # the four lines of the body
    ops = [op for kernel in k.fusion for op in kernel.ops]
    assert ops and all(op.line in lines for op in ops), [(op.op, op.line) for op in ops]
    gx, gw = k(x, w, torch.ones(4, 8))
    x2, w2 = x.clone().requires_grad_(), w.clone().requires_grad_()
    m = x2.mean(-1, keepdim=True)
    y = (x2 - m) * w2
    (torch.sigmoid(y) * y).sum().backward()
    torch.testing.assert_close(gx, x2.grad)
    torch.testing.assert_close(gw, w2.grad)


@bt.jit
def two_lines(x, w):
    h = x * w
    y = bt.exp(h)
    return y * h


def test_every_backward_binding_has_a_line_temporaries_that_of_the_adjoint_they_feed():
    x, w = torch.randn(3, 4), torch.randn(4)
    info = two_lines.info
    codegen = RelaxCodeGen(info.parsed, dict(zip(["x", "w"], info.specs((x, w)))), info.codegen_options)
    mod = backward.vjp_module(codegen.build(), "two_lines", (True, True), (True,))
    lines = backward.lines(mod, codegen.binding_lines)
    order = list(mod["two_lines_backward"].body.blocks[0].bindings)
    by_name = {b.var.name: lines.get(b.var) for b in order}
    assert all(b.var in lines for b in order), [b.var.name for b in order if b.var not in lines]
    assert by_name["h"] == 3 and by_name["y"] == 4                   # the forward's copy
    assert by_name["y_adjoint"] == 4 and by_name["h_adjoint"] == 3   # adjoints: their value's line
    temporaries = [b for b in order if backward._base(b.var.name) is None and b.var.name not in ("h", "y")]
    assert temporaries   # Gradient's `lv*`: the line of the first binding with a line that reads them
    for t in temporaries:
        reader = next(b for b in order if any(v.same_as(t.var) for v in free_vars(b.value)))
        assert lines[t.var] == lines[reader.var], (t.var.name, reader.var.name)


def test_a_backward_is_stored_on_disk_and_loaded_by_a_fresh_function(tmp_path, monkeypatch):
    monkeypatch.setenv("BABYTRITON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("BABYTRITON_CACHE", raising=False)
    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8, requires_grad=True)
    first = bt.jit(layer_norm_like)
    first(x, w).sum().backward()
    assert first.cache_info()["disk_writes"] == 2     # the forward and its backward
    grads = (x.grad.clone(), w.grad.clone())
    x.grad = w.grad = None
    second = bt.jit(layer_norm_like)                   # empty memory, warm disk
    second(x, w).sum().backward()
    info = second.cache_info()
    assert info["disk_hits"] == 2 and info["compilations"] == 0
    torch.testing.assert_close((x.grad, w.grad), grads)
    k = second.backward(x, w)
    assert k.from_disk and "backward" in k.stages and k.fusion is not None
    assert [kk.name for kk in k.fusion] == [kk.name for kk in first.backward(x, w).fusion]
    explained = second.explain(x, w, backward=True)
    assert explained.in_memory and explained.on_disk and explained.parts["backward"] == "backward wrt x, w; results 0"


def test_explain_covers_the_backward(capsys):
    f = bt.jit(layer_norm_like, cache=False)
    x, w = torch.randn(4, 8, requires_grad=True), torch.randn(8)
    before = f.explain(x, w, backward=True)
    assert not before.in_memory and before.function == "layer_norm_like (backward)"
    assert before.parts["backward"] == "backward wrt x; results 0" and "compile the first version" in before.text
    f(x, w).sum().backward()
    after = f.explain(x, w, backward=True)
    assert after.in_memory and after.key.digest == before.key.digest
    assert after.key.digest != f.explain(x, w).key.digest          # the forward's is another entry
    other = f.explain(x, w.requires_grad_(), backward=True)          # another variant: explained as new
    assert not other.in_memory and any("backward" in d for d in other.differences)
    assert "explain layer_norm_like (backward)" in capsys.readouterr().out


# --------------------------------------------------------------------------------------------------
# item 4 of the issue: where Gradient cannot go
# --------------------------------------------------------------------------------------------------

@bt.jit
def run_time_if(x, flag: bool):
    if flag:
        y = x * 2.0
    else:
        y = bt.exp(x)
    return y * x


@bt.jit
def run_time_loop(x, n: int):
    for i in range(n):
        x = bt.sin(x) * 1.5
    return x


# Ops whose Relax op may lack a registered gradient (babytriton/autodiff/gradients.py adds rules): the test
# takes the first that has none when it runs.
@bt.jit
def uses_cumprod(x):
    return R.cumprod(x, 0) + x


@bt.jit
def uses_prod(x):
    return bt.prod(x, axis=0) + x


@bt.jit
def uses_erf(x):
    return bt.erf(x) * x


@bt.jit
def uses_max(x):
    return bt.max(x, axis=0) * x


def _without_gradient():
    import tvm
    for fn, op, ref in [(uses_cumprod, "cumprod", lambda x: torch.cumprod(x, 0) + x),
                        (uses_prod, "prod", lambda x: x.prod(0) + x), (uses_erf, "erf", lambda x: torch.erf(x) * x),
                        (uses_max, "max", lambda x: x.max(0).values * x)]:
        if tvm.ir.Op.get(f"relax.{op}").get_attr("FPrimalGradient") is None:
            return fn, op, ref, ("R." if op == "cumprod" else "bt.") + op + "("
    pytest.skip("every candidate op has a registered gradient now")


def _line_of(fn, text):
    import inspect
    lines, first = inspect.getsourcelines(fn.fn)
    return first + next(i for i, line in enumerate(lines) if text in line)


@pytest.mark.parametrize("case", ["if", "loop", "op"])
def test_fallback_is_torch_autograd_over_the_eager_reference_warned_once(case):
    if case == "if":
        f = run_time_if
        ref = lambda x, flag: (x * 2.0 if flag else torch.exp(x)) * x  # noqa: E731
        calls = [(torch.randn(5, dtype=F64), True), (torch.randn(5, dtype=F64), False),
                 (torch.randn(2, 3, dtype=F64), True)]
        construct, where = "a run-time `if`", "if flag:"
    elif case == "loop":
        f = run_time_loop

        def ref(x, n):
            for _ in range(n):
                x = torch.sin(x) * 1.5
            return x
        calls = [(torch.randn(5, dtype=F64), 3), (torch.randn(5, dtype=F64), 1), (torch.randn(4, 2, dtype=F64), 2)]
        construct, where = "a run-time loop", "for i in range(n):"
    else:
        f, op, ref, where = _without_gradient()
        calls = [(torch.randn(4, 3, dtype=F64),), (torch.randn(2, 3, dtype=F64),)]
        construct = f"`{op}`, which has no registered gradient"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for args in calls:
            check(f, ref, [args[0].requires_grad_(), *args[1:]], compiled=False)
    fallbacks = [w for w in caught if issubclass(w.category, bt.GradientFallbackWarning)]
    assert len(fallbacks) == 1, [str(w.message) for w in fallbacks]
    text = str(fallbacks[0].message)
    line = _line_of(f, where)
    assert f"the backward of '{f.__name__}' is not compiled" in text and construct in text
    assert f"at {__file__}:{line}: " in text and where in text.rpartition(f":{line}: ")[2]
    with pytest.raises(bt.CompilationError, match="cannot be compiled because of"):
        f.backward(*calls[0])


def test_double_backward_runs_through_the_eager_reference():
    @bt.jit
    def mlp(x, w, b):
        return bt.tanh(x @ w + b)
    torch.manual_seed(0)
    x = torch.randn(5, 4, dtype=F64, requires_grad=True)
    w, b = torch.randn(4, 3, dtype=F64, requires_grad=True), torch.randn(3, dtype=F64, requires_grad=True)
    v = torch.randn(4, 3, dtype=F64)

    def hvp(fn):   # the Hessian of sum(f) wrt w times v, and the mixed second derivative wrt x
        gw, = torch.autograd.grad(fn(x, w, b).sum(), w, create_graph=True)
        return torch.autograd.grad((gw * v).sum(), (w, x, b))
    want = hvp(lambda x, w, b: torch.tanh(x @ w + b))
    torch.testing.assert_close(hvp(mlp), want)
    assert torch.autograd.gradgradcheck(mlp, (x, w, b))


# --------------------------------------------------------------------------------------------------
# user TensorIR kernels: an error without a gradient, @bt.grad_for with one
# --------------------------------------------------------------------------------------------------

@T.prim_func(s_tir=True)
def cube(a: T.handle, c: T.handle):
    n = T.int64()
    A = T.match_buffer(a, (n,), "float64")
    C = T.match_buffer(c, (n,), "float64")
    for i in range(n):
        with T.sblock("C"):
            vi = T.axis.remap("S", [i])
            C[vi] = A[vi] * A[vi] * A[vi]


@T.prim_func(s_tir=True)
def cube_too(a: T.handle, c: T.handle):   # cube's twin, given a gradient (registrations are global)
    n = T.int64()
    A = T.match_buffer(a, (n,), "float64")
    C = T.match_buffer(c, (n,), "float64")
    for i in range(n):
        with T.sblock("C"):
            vi = T.axis.remap("S", [i])
            C[vi] = A[vi] * A[vi] * A[vi]


@T.prim_func(s_tir=True)
def mul_rows(a: T.handle, b: T.handle, c: T.handle):
    n = T.int64()
    A = T.match_buffer(a, (n, T.int64(4)), "float64")
    B = T.match_buffer(b, (T.int64(4),), "float64")
    C = T.match_buffer(c, (n, T.int64(4)), "float64")
    for i, j in T.grid(n, T.int64(4)):
        with T.sblock("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = A[vi, vj] * B[vj]


def test_a_kernel_without_a_gradient_is_an_error_at_its_line_never_a_wrong_gradient():
    @bt.jit
    def calls_cube(x):
        y = cube(x)
        return y + x
    line = _line_of(calls_cube, "y = cube(x)")
    for run in (lambda x: calls_cube(x), lambda x: calls_cube.eager(x)):
        x = torch.randn(5, dtype=F64, requires_grad=True)
        with pytest.raises(bt.CompilationError) as caught:
            run(x).sum().backward()
        e = caught.value
        assert "the TensorIR kernel `cube` has no gradient" in str(e) and "@bt.grad_for(cube)" in str(e)
        assert (e.filename, e.lineno) == (__file__, line) and "y = cube(x)" in str(e)
        assert e.__cause__ is None and e.__context__ is None and "tvm" not in str(e).lower()
        assert x.grad is None
    with pytest.raises(bt.CompilationError, match="has no gradient"):
        calls_cube.backward(torch.randn(5, dtype=F64))
    with torch.no_grad():   # no gradient asked: the kernel runs as before
        torch.testing.assert_close(calls_cube(x), x ** 3 + x)


def test_grad_for_splices_the_gradient_into_the_compiled_backward():
    @bt.jit
    def kernel_layer(x, w):
        y = mul_rows(x, w)
        return bt.tanh(y) + bt.expand_dims(cube_too(bt.sum(y, axis=1)), 1)

    @bt.grad_for(mul_rows)
    def mul_rows_grad(a, b, g):
        return g * b, bt.sum(g * a, axis=0)

    @bt.grad_for(cube_too)
    def cube_grad(a, g):
        return 3.0 * a * a * g

    assert isinstance(mul_rows_grad, bt.JITFunction)
    x = torch.randn(3, 4, dtype=F64, requires_grad=True)
    w = torch.randn(4, dtype=F64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", bt.GradientFallbackWarning)    # compiled: no fallback
        assert torch.autograd.gradcheck(kernel_layer, (x, w))
    check(kernel_layer, lambda x, w: torch.tanh(x * w) + ((x * w).sum(1) ** 3)[:, None], [x, w])
    k = kernel_layer.backward(x, w)
    assert "call_tir_with_grad" not in k.stages["backward"]
    assert "y_adjoint1" in k.stages["backward"]                     # mul_rows_grad's ops, written in place
    call = _line_of(kernel_layer, "y = mul_rows(x, w)")
    adjoint_lines = {op.line for kernel in k.fusion for op in kernel.ops if op.var.startswith("y_adjoint")}
    assert adjoint_lines == {call}
    assert torch.autograd.gradgradcheck(kernel_layer, (x, w))   # create_graph: the eager route, differentiable
    with pytest.raises(TypeError, match="takes a TensorIR kernel"):
        bt.grad_for(kernel_layer)


@T.prim_func(s_tir=True)
def scale_rows(a: T.handle, c: T.handle):
    n = T.int64()
    A = T.match_buffer(a, (n, T.int64(4)), "float64")
    C = T.match_buffer(c, (n, T.int64(4)), "float64")
    for i, j in T.grid(n, T.int64(4)):
        with T.sblock("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = A[vi, vj] * T.float64(2) * T.float64(2) * T.float64(2)


def test_a_grad_for_function_with_a_run_time_loop_runs_through_the_eager_reference():
    @bt.grad_for(scale_rows)
    def scale_rows_grad(a, g):
        if bt.sum(g) > 0.0:      # a run-time `if`: not straight-line code
            h = g * 8.0
        else:
            h = 8.0 * g
        return h

    @bt.jit
    def calls_scale(x):
        return bt.sin(scale_rows(x))
    x = torch.randn(2, 4, dtype=F64, requires_grad=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert torch.autograd.gradcheck(calls_scale, (x,))
    texts = {str(w.message) for w in caught if issubclass(w.category, bt.GradientFallbackWarning)}
    assert len(texts) == 1 and "@bt.grad_for function 'scale_rows_grad'" in texts.pop()


@T.prim_func(s_tir=True)
def mul_rows_too(a: T.handle, b: T.handle, c: T.handle):   # mul_rows' twin, given a wrong gradient
    n = T.int64()
    A = T.match_buffer(a, (n, T.int64(4)), "float64")
    B = T.match_buffer(b, (T.int64(4),), "float64")
    C = T.match_buffer(c, (n, T.int64(4)), "float64")
    for i, j in T.grid(n, T.int64(4)):
        with T.sblock("C"):
            vi, vj = T.axis.remap("SS", [i, j])
            C[vi, vj] = A[vi, vj] * B[vj]


def test_a_grad_for_function_returning_the_wrong_gradients_is_an_error_at_its_def():
    @bt.grad_for(mul_rows_too)
    def wrong_grad(a, b, g):
        return g * b, g * a          # the second should be summed to b's shape (4,)

    @bt.jit
    def calls_it(x, w):
        return mul_rows_too(x, w) * 2.0
    x, w = torch.randn(3, 4, dtype=F64, requires_grad=True), torch.randn(4, dtype=F64, requires_grad=True)
    with pytest.raises(bt.CompilationError, match=r"'wrong_grad' of kernel `mul_rows_too` returns .* as gradient 2, "
                                                  r"but that input is a float64 tensor of shape \(4,\)") as caught:
        calls_it(x, w).sum().backward()
    assert caught.value.lineno == _line_of(wrong_grad, "def wrong_grad") and caught.value.__cause__ is None


@T.prim_func(s_tir=True)
def double_and_square(a: T.handle, c: T.handle, d: T.handle):
    n = T.int64()
    A = T.match_buffer(a, (n,), "float64")
    C = T.match_buffer(c, (n,), "float64")
    D = T.match_buffer(d, (n,), "float64")
    for i in range(n):
        with T.sblock("C"):
            vi = T.axis.remap("S", [i])
            C[vi] = A[vi] * T.float64(2)
            D[vi] = A[vi] * A[vi]


def test_grad_for_a_kernel_with_two_outputs_one_unused():
    @bt.grad_for(double_and_square)
    def double_and_square_grad(a, g_double, g_square):
        return 2.0 * g_double + 2.0 * a * g_square

    @bt.jit
    def both(x):
        c, d = double_and_square(x)
        return bt.sin(c) * d

    @bt.jit
    def first_only(x):
        c, d = double_and_square(x)
        return bt.sin(c)
    x = torch.randn(5, dtype=F64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", bt.GradientFallbackWarning)
        assert torch.autograd.gradcheck(both, (x,)) and torch.autograd.gradcheck(first_only, (x,))
    check(both, lambda x: torch.sin(2 * x) * x * x, [x])


@T.prim_func(s_tir=True)
def triple(a: T.handle, c: T.handle):
    n = T.int64()
    A = T.match_buffer(a, (n,), "float64")
    C = T.match_buffer(c, (n,), "float64")
    for i in range(n):
        with T.sblock("C"):
            vi = T.axis.remap("S", [i])
            C[vi] = A[vi] * T.float64(3)


def calls_triple(x):
    return triple(x) * x


def test_a_backward_is_keyed_on_the_kernel_gradients_it_compiles_in(tmp_path, monkeypatch):
    monkeypatch.setenv("BABYTRITON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("BABYTRITON_CACHE", raising=False)
    f = bt.jit(calls_triple)
    x = torch.randn(4, dtype=F64, requires_grad=True)

    def grad_of(fn):
        return torch.autograd.grad(fn(x).sum(), x)[0]

    @bt.grad_for(triple)
    def triple_grad(a, g):
        return 3.0 * g
    torch.testing.assert_close(grad_of(f), 6 * x.detach())
    assert "gradient of `triple`: triple_grad" in f.explain(x, backward=True).parts["backward"]

    @bt.grad_for(triple)
    def halved_grad(a, g):       # another gradient (deliberately not triple's): used from now on
        return 1.5 * g
    torch.testing.assert_close(grad_of(f), 4.5 * x.detach())
    torch.testing.assert_close(grad_of(bt.jit(calls_triple)), 4.5 * x.detach())   # its own disk entry
    assert f.cache_info()["disk_writes"] == 3       # the forward, and one backward per gradient


# --------------------------------------------------------------------------------------------------
# issue 16 item 2: with BABYTRITON_SAVE_FOR_BACKWARD=1 the backward takes the forward's small values
# (row statistics) instead of recomputing them; off by default (no schedule rule yet takes a row
# kernel that writes per-row side outputs)
# --------------------------------------------------------------------------------------------------

def ln(x, w, b):
    mu = x.mean(axis=-1, keepdims=True)
    xc = x - mu
    var = (xc * xc).mean(axis=-1, keepdims=True)
    return xc * bt.rsqrt(var + 1e-5) * w + b


def ln_ref(x, w, b):
    mu = x.mean(-1, keepdim=True)
    var = ((x - mu) ** 2).mean(-1, keepdim=True)
    return (x - mu) * torch.rsqrt(var + 1e-5) * w + b


def softmax_rows(x):
    m = x.max(axis=-1, keepdims=True)
    e = bt.exp(x - m)
    s = e.sum(axis=-1, keepdims=True)
    return e / s


def cross_entropy_rows(logits, target):
    m = logits.max(axis=-1, keepdims=True)
    s = bt.exp(logits - m).sum(axis=-1, keepdims=True)
    lse = m + bt.log(s)
    picked = gather_elements(logits, bt.expand_dims(target, 1), axis=1)
    return (lse - picked).mean()


def cross_entropy_ref(logits, target):
    return torch.nn.functional.cross_entropy(logits, target)


ROWS = 16
SAVES = [  # function, its torch reference, inputs, the row statistics' names (none recomputed)
    (ln, ln_ref, lambda: [torch.randn(ROWS, 64), torch.randn(64), torch.randn(64)], {"mu", "var"}),
    (softmax_rows, lambda x: torch.softmax(x, -1), lambda: [torch.randn(ROWS, 64) * 4], {"m", "s"}),
    (cross_entropy_rows, cross_entropy_ref,
     lambda: [torch.randn(ROWS, 100), torch.randint(0, 100, (ROWS,))], {"m", "s"}),
]
REDUCTIONS = ("max", "sum", "mean", "min", "prod")


def saved_by_autograd(f, args):
    """The tensors torch autograd keeps for the backward of one call."""
    kept = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: kept.append(t) or t, lambda t: t):
        out = f(*args)
    return out, kept


@pytest.mark.parametrize("fn, ref, make, stats", SAVES, ids=[s[0].__name__ for s in SAVES])
def test_the_backward_takes_the_saved_row_statistics_instead_of_recomputing_them(fn, ref, make, stats, monkeypatch):
    monkeypatch.setenv("BABYTRITON_SAVE_FOR_BACKWARD", "1")
    f = bt.jit(fn, cache=False)
    args = make()
    k = f.backward(*args)
    saved = [p for p in k.params if p.name.startswith("saved")]
    assert saved and all(p.annotation.shape[0] == ROWS and all(d == 1 for d in p.annotation.shape[1:])
                         for p in saved), [(p.name, p.annotation) for p in k.params]
    # the forward's row reductions are not in the backward's kernels (its own reductions are adjoints)
    recomputed = [(op.op, op.var) for kernel in k.fusion for op in kernel.ops
                  if op.op in REDUCTIONS and op.var in stats]
    assert not recomputed
    forward = [op for kernel in f.training_forward(*args).fusion for op in kernel.ops if op.var in stats]
    assert {op.var for op in forward} == stats          # the training forward computes them
    # the same gradients as torch, through the saving path
    x = [a.clone().requires_grad_(a.is_floating_point()) for a in args]
    x2 = [a.clone().requires_grad_(a.is_floating_point()) for a in args]
    out, kept = saved_by_autograd(f, x)
    g = torch.randn_like(out)
    (out * g).sum().backward()
    (ref(*x2) * g).sum().backward()
    for a, b in zip(x, x2):
        if a.is_floating_point():
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)
    # what is kept: the inputs, and one small tensor per saved value
    inputs = {a.data_ptr() for a in x}
    small = [t for t in kept if t.data_ptr() not in inputs]
    assert len(kept) == len(x) + len(saved) and len(small) == len(saved)
    assert bt.torch.autograd.saved_bytes(small) == sum(ROWS * 4 for _ in saved)
    assert bt.torch.autograd.saved_bytes(kept) == sum(a.numel() * a.element_size() for a in x) + ROWS * 4 * len(saved)


@pytest.mark.parametrize("switch", [None, "0"])
def test_with_saving_off_the_backward_recomputes_from_the_inputs(switch, monkeypatch):
    if switch is None:
        monkeypatch.delenv("BABYTRITON_SAVE_FOR_BACKWARD", raising=False)   # the default
    else:
        monkeypatch.setenv("BABYTRITON_SAVE_FOR_BACKWARD", switch)
    f = bt.jit(ln, cache=False)
    args = [torch.randn(ROWS, 64), torch.randn(64), torch.randn(64)]
    k = f.backward(*args)
    assert not [p for p in k.params if p.name.startswith("saved")]
    assert any(op.var == "mu" and op.op == "mean" for kernel in k.fusion for op in kernel.ops)   # recomputed
    x = [a.clone().requires_grad_() for a in args]
    out, kept = saved_by_autograd(f, x)
    assert len(kept) == 3 and f.training_forward(*args) is f.compile(*args)
    check(f, ln_ref, [a.clone().requires_grad_() for a in args])
    assert f.cache_info()["compilations"] == 2        # the forward and the recomputing backward


def silu(x):
    return x * bt.sigmoid(x)


def test_nothing_small_nothing_saved_and_no_training_forward(monkeypatch):
    monkeypatch.setenv("BABYTRITON_SAVE_FOR_BACKWARD", "1")
    f = bt.jit(silu, cache=False)
    x = torch.randn(8, 32, requires_grad=True)
    out, kept = saved_by_autograd(f, [x])
    assert len(kept) == 1 and kept[0].data_ptr() == x.data_ptr()
    out.sum().backward()
    torch.testing.assert_close(x.grad, (torch.sigmoid(x) * (1 + x * (1 - torch.sigmoid(x)))).detach())
    assert f.cache_info()["compilations"] == 2
    assert not [p for p in f.backward(x).params if p.name.startswith("saved")]


# the training forward's row kernel writes per-row side outputs, which no GPU row rule schedules yet
@pytest.mark.filterwarnings("ignore::babytriton.schedules.SerialKernelWarning")
def test_a_saving_gpu_backward_compiles_to_cuda(monkeypatch):
    """The training forward and its backward for sm_90 (compiled here, without a GPU)."""
    monkeypatch.setenv("BABYTRITON_SAVE_FOR_BACKWARD", "1")
    f = bt.jit(ln, target={"kind": "cuda", "arch": "sm_90"}, cache=False)
    args = [torch.empty(ROWS, 64, device="meta"), torch.empty(64, device="meta"), torch.empty(64, device="meta")]
    k = f.backward(*args)
    assert [p.name for p in k.params] == ["x", "w", "b", "saved0", "saved1", "d_out0"] and "__global__" in k.source
    assert "__global__" in f.training_forward(*args).source


def test_saving_versions_are_stored_on_disk_threads_and_explain(tmp_path, monkeypatch):
    monkeypatch.setenv("BABYTRITON_SAVE_FOR_BACKWARD", "1")
    monkeypatch.setenv("BABYTRITON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("BABYTRITON_CACHE", raising=False)
    x, w, b = torch.randn(ROWS, 64, requires_grad=True), torch.randn(64, requires_grad=True), torch.randn(64)
    first = bt.jit(ln)
    errors = []

    def work():
        try:
            first(x, w, b).sum().backward()
        except BaseException as e:  # noqa: BLE001 - reported by the main thread
            errors.append(e)
    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    assert first.cache_info()["disk_writes"] == 3     # the forward, its training forward, its backward
    grads = (x.grad.clone() / 3, w.grad.clone() / 3)
    x.grad = w.grad = None
    second = bt.jit(ln)                               # empty memory, warm disk
    second(x, w, b).sum().backward()
    info = second.cache_info()
    assert info["disk_hits"] == 3 and info["compilations"] == 0
    torch.testing.assert_close((x.grad, w.grad), grads)
    k = second.backward(x, w, b)
    assert k.from_disk and [p.name for p in k.params] == ["x", "w", "b", "saved0", "saved1", "d_out0"]
    explained = second.explain(x, w, b, backward=True)
    assert explained.in_memory and explained.parts["backward"] == \
        "backward wrt x, w; results 0; takes saved forward values"


def _rows_for_gpu(x, w):
    mu = x.mean(axis=-1, keepdims=True)
    d = x - mu
    return d * bt.rsqrt((d * d).mean(axis=-1, keepdims=True) + 1e-5) * w


@pytest.mark.gpu
def test_forward_and_backward_on_the_gpu_never_wait_for_it():
    """Neither the compiled forward nor the backward synchronises with the GPU (a copy from pageable
    memory, an .item()): a training step then queues its kernels back to back."""
    f = bt.jit(target="gpu")(_rows_for_gpu)
    x = torch.randn(64, 256, device="cuda", requires_grad=True)
    w = torch.rand(256, device="cuda", requires_grad=True)
    g = torch.randn(64, 256, device="cuda")
    f(x, w).backward(g)   # compiled both ways
    x.grad = w.grad = None
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        f(x, w).backward(g)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    xr, wr = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    torch.nn.functional.layer_norm(xr, (256,), eps=1e-5).mul(wr).backward(g)
    torch.testing.assert_close((x.grad, w.grad), (xr.grad, wr.grad), atol=1e-4, rtol=1e-4)
