"""@jit functions as torch custom operators (babytriton/torch_library.py): torch.compile(fullgraph=True)
and torch.export see one node, the backward is the compiled one, opcheck passes, torch is the oracle."""
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import babytriton as bt
from babytriton import autograd


@bt.jit
def rms_gate(x, g, eps: float):
    """RMS normalisation then a sigmoid gate; also the argmax of each row (an int result)."""
    y = x / bt.sqrt((x * x).mean(axis=-1, keepdims=True) + eps) * g
    return y * bt.sigmoid(y), y.argmax(axis=-1)


def rms_gate_torch(x, g, eps):
    y = x / torch.sqrt((x * x).mean(-1, keepdim=True) + eps) * g
    return y * torch.sigmoid(y), y.argmax(-1)


@bt.jit
def scale_shift(x: bt.Tensor(("n", "m")), b: bt.Tensor(("m",)), s: float, k: bt.constexpr):
    """A symbolic-size signature, a run-time scalar and a constexpr baked into the op."""
    return x * s + b * k


@bt.jit
def passthrough(x, idx):
    """Returns its argument itself, and an int tensor: the op must hand back new tensors."""
    return x, idx + 1


@bt.jit
def wide_or_sum(x):
    """Code generation needs the static size of `x.shape[1]`: symbolic sizes go through the eager reference."""
    return x * 2.0 if x.shape[1] > 4 else x.sum(axis=1, keepdims=True) + 1.0


RMS = rms_gate.as_torch_op()
SCALE3 = scale_shift.as_torch_op(k=3)


class Block(nn.Module):
    """A linear layer, the gated RMS norm and a scale-shift, by the ops (`op`), by the plain @jit calls
    (`jit`) or by torch."""

    def __init__(self, how: str):
        super().__init__()
        torch.manual_seed(0)
        self.lin = nn.Linear(6, 8)
        self.g = nn.Parameter(torch.rand(8) + 0.5)
        self.b = nn.Parameter(torch.randn(8))
        self.how = how

    def forward(self, x):
        h = self.lin(x)
        if self.how == "op":
            y, top = RMS(h, self.g, 1e-5)
            z = SCALE3(y, self.b, 0.5)
        elif self.how == "jit":
            y, top = rms_gate(h, self.g, 1e-5)
            z = scale_shift(y, self.b, 0.5, 3)
        else:
            y, top = rms_gate_torch(h, self.g, 1e-5)
            z = y * 0.5 + self.b * 3
        return (z * z).sum() + top.sum().float()


def loss_and_grads(model, x):
    model.zero_grad()
    loss = model(x)
    loss.backward()
    return loss.detach(), [p.grad.clone() for p in model.parameters()]


@pytest.fixture(scope="module")
def compiled():
    """One inductor compile (fullgraph) of the block using the ops, shared by the tests."""
    model = Block("op")
    return model, torch.compile(model, fullgraph=True)


def test_compiled_model_matches_torch_and_the_plain_jit_calls(compiled):
    model, fast = compiled
    x = torch.randn(5, 6)
    want, want_grads = loss_and_grads(Block("torch"), x)
    plain, plain_grads = loss_and_grads(Block("jit"), x)
    got, got_grads = loss_and_grads(model, x)   # the op eagerly
    with torch.no_grad():
        eager_model = model(x)
    model.zero_grad()
    loss = fast(x)
    loss.backward()
    torch.testing.assert_close(loss.detach(), want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(plain, got, rtol=0, atol=0)
    assert eager_model == got
    for p, w, q in zip(model.parameters(), want_grads, plain_grads):
        torch.testing.assert_close(p.grad, w, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(p.grad, q, rtol=1e-6, atol=1e-6)


def test_compiled_graphs_hold_the_op_and_its_compiled_backward():
    """AOTAutograd's forward graph calls the op once and its backward graph the `_backward` op (the
    compiled backward), with no fallback to the eager reference."""
    from torch._functorch.aot_autograd import aot_module_simplified, make_boxed_func
    graphs = []

    def backend(gm, inputs):
        def keep(g, _):
            graphs.append(g)
            return make_boxed_func(g.forward)
        return aot_module_simplified(gm, inputs, fw_compiler=keep, bw_compiler=keep)

    fn = torch.compile(lambda x, g: RMS(x, g, 1e-5)[0].sum(), backend=backend, fullgraph=True)
    x = torch.randn(3, 8, requires_grad=True)
    g = torch.rand(8, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", autograd.GradientFallbackWarning)
        fn(x, g).backward()
    forward, backward = ([str(n.target) for n in gr.graph.nodes if n.op == "call_function"] for gr in graphs)
    name = RMS._qualified_op_name.split("::")[1]
    assert forward.count(str(RMS.default)) == 1
    assert [t for t in backward if t.startswith("babytriton.")] == [f"babytriton.{name}_backward.default"]
    x2, g2 = x.detach().requires_grad_(), g.detach().requires_grad_()
    rms_gate_torch(x2, g2, 1e-5)[0].sum().backward()
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(g.grad, g2.grad, rtol=1e-4, atol=1e-5)


def test_export_has_one_node_and_runs():
    model = Block("op")
    x = torch.randn(4, 6)
    program = torch.export.export(model, (x,))
    targets = [str(n.target) for n in program.graph.nodes if n.op == "call_function"]
    assert targets.count(str(RMS.default)) == 1
    assert targets.count(str(SCALE3.default)) == 1
    x2 = torch.randn(4, 6)
    torch.testing.assert_close(program.module()(x2), Block("torch")(x2), rtol=1e-5, atol=1e-5)


def test_export_with_a_dynamic_batch():
    batch = torch.export.Dim("batch")
    program = torch.export.export(Block("op"), (torch.randn(4, 6),), dynamic_shapes=({0: batch},))
    x = torch.randn(7, 6)
    torch.testing.assert_close(program.module()(x), Block("torch")(x), rtol=1e-5, atol=1e-5)


def test_opcheck():
    x = torch.randn(3, 8, requires_grad=True)
    torch.library.opcheck(RMS, (x, torch.rand(8, requires_grad=True), 1e-5))
    torch.library.opcheck(SCALE3, (torch.randn(2, 5, requires_grad=True), torch.randn(5, requires_grad=True), 2.0))
    op = passthrough.as_torch_op(results=2)
    torch.library.opcheck(op, (x, torch.randint(0, 9, (4,))))


def test_results_are_new_tensors():
    op = passthrough.as_torch_op(results=2)
    x = torch.randn(3)
    y, i = op(x, torch.arange(3))
    assert y.data_ptr() != x.data_ptr() and torch.equal(y, x)
    assert i.dtype == torch.int64 and torch.equal(i, torch.arange(3) + 1)


@settings(max_examples=6, deadline=None)
@given(rows=st.integers(1, 4), cols=st.integers(1, 6), dtype=st.sampled_from([torch.float32, torch.float64]))
def test_gradients_match_torch(rows, cols, dtype):
    x = torch.randn(rows, cols, dtype=dtype, requires_grad=True)
    g = (torch.rand(cols, dtype=dtype) + 0.5).requires_grad_()
    x2, g2 = x.detach().requires_grad_(), g.detach().requires_grad_()
    y, top = RMS(x, g, 1e-5)
    y2, top2 = rms_gate_torch(x2, g2, 1e-5)
    assert torch.equal(top, top2) and not top.requires_grad
    d = torch.randn_like(y)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(y, y2, **tol)
    for a, b in zip(torch.autograd.grad(y, [x, g], d), torch.autograd.grad(y2, [x2, g2], d)):
        torch.testing.assert_close(a, b, **tol)


def test_only_the_inputs_that_require_grad_are_differentiated():
    x = torch.randn(3, 8, dtype=torch.float64, requires_grad=True)
    g = torch.rand(8, dtype=torch.float64) + 0.5
    (dx,) = torch.autograd.grad(RMS(x, g, 1e-5)[0].sum(), [x])
    x2 = x.detach().requires_grad_()
    (want,) = torch.autograd.grad(rms_gate_torch(x2, g, 1e-5)[0].sum(), [x2])
    torch.testing.assert_close(dx, want)
    b = torch.randn(3, requires_grad=True)
    (db,) = torch.autograd.grad(SCALE3(torch.randn(2, 3), b, 0.25).sum(), [b])
    torch.testing.assert_close(db, torch.full((3,), 6.0))


def test_double_backward_runs_torch_autograd_over_the_eager_reference():
    x = torch.randn(2, 5, dtype=torch.float64, requires_grad=True)
    g = (torch.rand(5, dtype=torch.float64) + 0.5).requires_grad_()
    assert torch.autograd.gradgradcheck(lambda a, b: RMS(a, b, 1e-5)[0], (x, g))


def test_constexprs_are_baked_in_one_op_per_value():
    assert scale_shift.as_torch_op(k=3) is SCALE3
    two = bt.torch_op(scale_shift, k=2)
    assert two is not SCALE3 and "k" not in str(two.default._schema)
    x, b = torch.randn(2, 3), torch.randn(3)
    torch.testing.assert_close(two(x, b, 1.5), x * 1.5 + b * 2)
    torch.testing.assert_close(SCALE3(x, b, 1.5), x * 1.5 + b * 3)
    assert str(SCALE3.default._schema).endswith("(Tensor x, Tensor b, float s) -> Tensor")


def test_symbolic_sizes_the_code_needs_static_go_through_the_eager_reference():
    op = wide_or_sum.as_torch_op()
    fn = torch.compile(lambda x: op(x) + 0.0, backend="aot_eager", dynamic=True, fullgraph=True)
    for shape in ((3, 5), (4, 6), (2, 3)):
        x = torch.randn(*shape)
        want = x * 2.0 if shape[1] > 4 else x.sum(1, keepdim=True) + 1.0
        torch.testing.assert_close(fn(x), want)


def test_names():
    assert RMS._qualified_op_name.startswith("babytriton::")
    assert RMS._qualified_op_name.endswith("test_torch_library_rms_gate")   # the module's name, then the function's
    assert bt.torch_op(rms_gate) is RMS
    mine = rms_gate.as_torch_op("my_rms_gate")
    assert mine is torch.ops.babytriton.my_rms_gate and mine is not RMS
    with pytest.raises(ValueError, match="my_rms_gate is taken"):
        scale_shift.as_torch_op("my_rms_gate", k=1)
    with pytest.raises(ValueError, match="not a valid identifier"):
        rms_gate.as_torch_op("a.b")


def test_unsupported_parameters_and_results_are_clear_errors():
    with pytest.raises(TypeError, match=r"constexpr parameter 'k' needs a value .*as_torch_op\(k=\.\.\.\)"):
        scale_shift.as_torch_op()
    with pytest.raises(TypeError, match="parameter 's' is not bt.constexpr"):
        scale_shift.as_torch_op(k=1, s=2.0)
    with pytest.raises(TypeError, match="has no parameter 'q'"):
        scale_shift.as_torch_op(k=1, q=2)
    with pytest.raises(TypeError, match="takes a @bt.jit function"):
        bt.torch_op(rms_gate_torch)

    @bt.jit(backend="tir")
    def fill(out):
        for i in range(out.shape[0]):
            out[i] = 1.0
    with pytest.raises(TypeError, match="backend='tir' functions write their results into their arguments"):
        fill.as_torch_op()

    @bt.jit
    def with_default(x, mode="fast"):
        return x
    with pytest.raises(TypeError, match="parameter 'mode' has the default 'fast'"):
        with_default.as_torch_op()

    @bt.jit
    def pair(x):
        both = (x + 1.0, x * 2.0)
        return both
    op = pair.as_torch_op()
    with pytest.raises(TypeError, match=r"pair\(\) returned Tensor, Tensor, but the op was made for 1 .*results="):
        op(torch.randn(3))
    with pytest.raises(torch._dynamo.exc.TorchRuntimeError, match=r"returns 2 results here .*results=<count>"):
        torch.compile(lambda x: op(x), backend="eager", fullgraph=True)(torch.randn(3))
    with pytest.raises(ValueError, match="an int >= 1"):
        pair.as_torch_op(results=0)

    @bt.jit
    def one_or_two(x, two: bt.constexpr):
        if two:
            return x, x
        return x
    with pytest.raises(bt.CompilationError, match=r"returns 1 or 2 results in different places.*results=<count>"):
        one_or_two.as_torch_op(two=True)
    torch.testing.assert_close(one_or_two.as_torch_op(two=False, results=1)(torch.ones(2)), torch.ones(2))
    a, b = pair.as_torch_op("pair_of_two", results=2)(torch.ones(3))
    assert torch.equal(a, torch.full((3,), 2.0)) and torch.equal(b, torch.full((3,), 2.0))


@bt.jit
def scaled(x, s=1.0):
    return x * s


def test_an_unannotated_number_default_is_a_schema_scalar_of_its_type():
    op = scaled.as_torch_op()
    assert str(op.default._schema).endswith("(Tensor x, float s=1.) -> Tensor")
    x = torch.arange(3, dtype=torch.int32)
    got = op(x, 2)   # an int for the float: promotes as a float (a float32 result), as torch's x * 2.0
    assert got.dtype == torch.float32 and torch.equal(got, x * 2.0)
    assert torch.equal(op(x), x * 1.0)
    torch.library.opcheck(op, (x, 2.5))


@pytest.mark.gpu
def test_a_gpu_function_in_a_compiled_model():
    gate = bt.jit(target="gpu")(rms_gate.fn).as_torch_op("rms_gate_gpu")
    x = torch.randn(5, 8, device="cuda", requires_grad=True)
    g = (torch.rand(8, device="cuda") + 0.5).requires_grad_()
    torch.library.opcheck(gate, (x, g, 1e-5))
    fn = torch.compile(lambda x, g: gate(x, g, 1e-5)[0].square().sum(), fullgraph=True)
    loss = fn(x, g)
    loss.backward()
    x2, g2 = x.detach().requires_grad_(), g.detach().requires_grad_()
    want = rms_gate_torch(x2, g2, 1e-5)[0].square().sum()
    want.backward()
    torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(g.grad, g2.grad, rtol=1e-4, atol=1e-5)


@bt.jit
def branchy(x, w):
    """A run-time `if`: the backward falls back to torch autograd over the eager reference; `w` is unused."""
    if x.sum() > 0:
        return x * 2.0
    return x * 3.0


def test_a_backward_that_falls_back_runs_through_the_backward_op():
    """The fallback's torch autograd runs inside the backward op's implementation (below torch's
    autograd keys): eagerly and in a compiled graph, with one warning naming the `if`."""
    op = branchy.as_torch_op()
    w = torch.randn(3, requires_grad=True)
    fast = torch.compile(lambda x, w: op(x, w).sum(), backend="aot_eager", fullgraph=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for sign, slope in ((1.0, 2.0), (-1.0, 3.0)):
            x = (torch.rand(4, 3) * sign).requires_grad_()
            for run in (lambda x, w: op(x, w).sum(), fast):
                dx, dw = torch.autograd.grad(run(x, w), [x, w])
                assert torch.equal(dx, torch.full((4, 3), slope)) and torch.equal(dw, torch.zeros(3))
    fallbacks = [str(c.message) for c in caught if issubclass(c.category, autograd.GradientFallbackWarning)]
    assert len(fallbacks) == 1 and "run-time `if`" in fallbacks[0] and "if x.sum() > 0:" in fallbacks[0]
    torch.library.opcheck(op, (torch.rand(4, 3, requires_grad=True), w))
