"""@jit functions as torch custom operators (babytriton/torch/library.py): torch.compile(fullgraph=True)
and torch.export see one node, the backward is the compiled one, opcheck passes, torch is the oracle."""
import warnings

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

import babytriton as bt
from babytriton.torch import autograd


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


# -- plain @jit calls inside torch.compile / torch.export (no as_torch_op()) ------------------------

@bt.jit
def gate(x, w):
    return bt.sigmoid(x) * w


class Gated(nn.Module):
    """Plain @jit calls as written: `gate`, and `scale_shift` with a run-time float and a constexpr."""

    def __init__(self, torch_only: bool = False):
        super().__init__()
        torch.manual_seed(1)
        self.w = nn.Parameter(torch.rand(4) + 0.5)
        self.b = nn.Parameter(torch.randn(4))
        self.torch_only = torch_only

    def forward(self, x):
        if self.torch_only:
            return ((torch.sigmoid(x) * self.w + 1) * 0.5 + self.b * 3).square().sum()
        return scale_shift(gate(x, self.w) + 1, self.b, 0.5, k=3).square().sum()


def capturing_backend(graphs: list):
    """A torch.compile backend keeping dynamo's graph, then AOTAutograd's forward and backward graphs."""
    from torch._functorch.aot_autograd import aot_module_simplified, make_boxed_func

    def backend(gm, inputs):
        graphs.append(gm)

        def keep(g, _):
            graphs.append(g)
            return make_boxed_func(g.forward)
        return aot_module_simplified(gm, inputs, fw_compiler=keep, bw_compiler=keep)
    return backend


def op_targets(graph_module) -> list[str]:
    return [str(n.target) for n in graph_module.graph.nodes
            if n.op == "call_function" and str(n.target).startswith("babytriton.")]


def test_plain_jit_calls_inside_torch_compile_are_one_op_node_each():
    """fullgraph=True: dynamo's graph holds the two ops (made on first use, the same as as_torch_op's),
    the backward graph their compiled backwards; loss and gradients match torch."""
    graphs = []
    model, want_model = Gated(), Gated(torch_only=True)
    fast = torch.compile(model, backend=capturing_backend(graphs), fullgraph=True)
    x, x2 = torch.randn(3, 4, requires_grad=True), None
    loss = fast(x)
    loss.backward()
    x2 = x.detach().requires_grad_()
    want = want_model(x2)
    want.backward()
    torch.testing.assert_close(loss, want, rtol=1e-5, atol=1e-5)
    for got, ref in ((x.grad, x2.grad), (model.w.grad, want_model.w.grad), (model.b.grad, want_model.b.grad)):
        torch.testing.assert_close(got, ref, rtol=1e-4, atol=1e-5)
    dynamo, forward, backward = graphs
    gate_op, scale_op = gate.as_torch_op(), scale_shift.as_torch_op(k=3)
    assert sorted(op_targets(dynamo)) == sorted([str(gate_op), str(scale_op)])
    assert sorted(op_targets(forward)) == sorted([str(gate_op.default), str(scale_op.default)])
    names = [op._qualified_op_name.split("::")[1] for op in (gate_op, scale_op)]
    assert sorted(t.split(".")[1] for t in op_targets(backward)) == sorted(n + "_backward" for n in names)
    assert "s" in str(scale_op.default._schema) and "k" not in str(scale_op.default._schema)


def dynamo_graphs(fn, sizes, mark: bool = False, **options) -> int:
    """How many graphs dynamo makes for `fn(x, w).sum()` over inputs of these row counts, each result
    and gradient checked against torch."""
    torch._dynamo.reset()
    count = []
    backend = capturing_backend([])

    def counting(gm, inputs):
        count.append(gm)
        return backend(gm, inputs)
    compiled = torch.compile(lambda x, w: fn(x, w).sum(), backend=counting, fullgraph=True, **options)
    for rows in sizes:
        x, w = torch.randn(rows, 4, requires_grad=True), torch.randn(4, requires_grad=True)
        if mark:
            torch._dynamo.mark_dynamic(x, 0)
        got = compiled(x, w)
        got.backward()
        x2, w2 = x.detach().requires_grad_(), w.detach().requires_grad_()
        want = (torch.sigmoid(x2) * w2).sum()
        want.backward()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(x.grad, x2.grad, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(w.grad, w2.grad, rtol=1e-5, atol=1e-6)
    return len(count)


@pytest.mark.parametrize("how", [dict(dynamic=True), dict(mark=True), dict()])
def test_dynamic_shapes_compile_as_often_as_torch(how):
    """dynamic=True and mark_dynamic: one graph for every size, as for the torch function; with
    neither, torch's automatic dynamic shapes (a second graph, then no more)."""
    sizes = (3, 5, 7, 9)
    torch_count = dynamo_graphs(lambda x, w: torch.sigmoid(x) * w, sizes, **how)
    assert dynamo_graphs(gate, sizes, **how) == torch_count
    assert torch_count == (2 if not how else 1)


def test_torch_compile_of_a_jit_function_itself():
    graphs = []
    fast = torch.compile(scale_shift, backend=capturing_backend(graphs), fullgraph=True, dynamic=True)
    for rows in (2, 3, 6):
        x, b = torch.randn(rows, 5), torch.randn(5)
        torch.testing.assert_close(fast(x, b, 0.25, 2), x * 0.25 + b * 2)
    assert len([g for g in graphs if op_targets(g) == [str(scale_shift.as_torch_op(k=2))]]) == 1   # dynamo's


@bt.jit
def times(x, k: bt.constexpr):
    return x * k


def test_a_symbolic_size_given_as_a_constexpr_is_specialized_as_torch_does():
    """A size dynamo keeps symbolic, passed as a constexpr: guarded on (one graph per value)."""
    count = []
    fast = torch.compile(lambda x: times(x, x.shape[0]), backend=lambda gm, _: count.append(gm) or gm.forward,
                         fullgraph=True, dynamic=True)
    for rows in (2, 3, 3):
        x = torch.randn(rows, 3)
        torch.testing.assert_close(fast(x), x * rows)
    assert len(count) == 2


def test_export_of_plain_jit_calls_holds_their_ops():
    for strict in (False, True):
        program = torch.export.export(Gated(), (torch.randn(3, 4),), strict=strict,
                                      dynamic_shapes=({0: torch.export.Dim("rows")},))
        targets = [str(n.target) for n in program.graph.nodes if n.op == "call_function"]
        assert targets.count(str(gate.as_torch_op().default)) == 1
        assert targets.count(str(scale_shift.as_torch_op(k=3).default)) == 1
        x = torch.randn(6, 4)
        torch.testing.assert_close(program.module()(x), Gated(torch_only=True)(x), rtol=1e-5, atol=1e-5)


def test_call_errors_inside_torch_compile_name_the_function():
    def compiled(fn):
        return torch.compile(fn, backend="eager", fullgraph=True)
    x = torch.randn(2, 3)
    internal = torch._dynamo.exc.InternalTorchDynamoError   # the TypeError, as dynamo wraps it
    with pytest.raises(internal, match=r"TypeError: gate\(x, w\): missing a required argument: 'w'"):
        compiled(lambda x: gate(x))(x)
    with pytest.raises(internal, match=r"TypeError: gate\(x, w\): got an unexpected keyword argument 'q'"):
        compiled(lambda x: gate(x, q=x))(x)

    @bt.jit(backend="tir")
    def fill(out):
        for i in range(out.shape[0]):
            out[i] = 1.0
    with pytest.raises(internal, match=r"TypeError: fill\(\): backend='tir' .*inside torch.compile or "
                                       r"torch.export runs as its torch op"):
        compiled(lambda x: fill(x))(x)
    with pytest.raises(torch._dynamo.exc.TorchRuntimeError, match=r"_gate\(.*shapes \(2, 3\) and \(5,\) cannot be "
                                                                 r"broadcast together.*return bt.sigmoid\(x\) \* w"):
        compiled(lambda x: gate(x, torch.randn(5)))(x)


def test_arguments_by_keyword_and_defaults_inside_torch_compile():
    fast = torch.compile(lambda x: scaled(x) + scaled(x=x, s=3.0) + scale_shift(x, s=2.0, b=x[0], k=1),
                         backend="aot_eager", fullgraph=True)
    x = torch.randn(2, 3)
    torch.testing.assert_close(fast(x), x + x * 3.0 + (x * 2.0 + x[0]))


def test_the_op_runs_the_real_call_while_a_compile_is_on():
    """torch.compiler.is_compiling() is process-wide: a call then goes through the op, whose
    implementation must run the compiled function, not its op again."""
    x, w = torch.randn(2, 4), torch.randn(4)
    with torch.compiler._compile_session_context():
        got = gate(x, w)
    torch.testing.assert_close(got, torch.sigmoid(x) * w)


def test_dynamo_marks_constant_functions_with_the_attribute_babytriton_sets():
    """babytriton marks its look-ups as torch._dynamo.assume_constant_result does, without importing dynamo."""
    def probe():
        return 1
    marked = torch._dynamo.assume_constant_result(probe)
    assert {k for k in vars(marked)} == {"_dynamo_marked_constant"}
    from babytriton.torch import library as torch_library
    assert torch_library.tracing._dynamo_marked_constant


# -- torch.export Dims shared by several inputs -----------------------------------------------------

@bt.jit
def bmm(a, b):
    return a @ b


@bt.jit
def bmm_add(a, b, c):
    return a @ b + c


@bt.jit
def cat2(a, b):
    return bt.concat([a, b], axis=0) * 2.0


class Calls2(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, a, b):
        return self.fn(a, b)


class Calls3(Calls2):
    def forward(self, a, b, c):
        return self.fn(a, b, c)


def test_export_with_one_dim_shared_by_two_inputs_of_a_batched_matmul():
    """The tracer gives each input's size its own symbol (the Dim's equality is checked after tracing):
    the fake implementation gets the result from the eager reference, whose matmul relates them."""
    op = bmm.as_torch_op()
    batch, inner = torch.export.Dim("batch"), torch.export.Dim("inner")
    a, b = torch.randn(3, 4, 5), torch.randn(3, 5, 6)
    for shapes, k in ((({0: batch}, {0: batch}), 5), (({0: batch, 2: inner}, {0: batch, 1: inner}), 7)):
        program = torch.export.export(Calls2(op), (a, b), dynamic_shapes=shapes)
        assert [str(n.target) for n in program.graph.nodes if n.op == "call_function"] == [str(op.default)]
        a2, b2 = torch.randn(5, 4, k), torch.randn(5, k, 6)
        torch.testing.assert_close(program.module()(a2, b2), a2 @ b2)
    with pytest.raises((AssertionError, RuntimeError), match=r"Guard failed: b.size\(\)\[0\] == a.size\(\)\[0\]"):
        program.module()(a2, torch.randn(4, 7, 6))


def test_export_with_dims_shared_by_three_inputs():
    op = bmm_add.as_torch_op()
    batch, inner, rows = torch.export.Dim("batch"), torch.export.Dim("inner"), torch.export.Dim("rows")
    program = torch.export.export(
        Calls3(op), (torch.randn(3, 4, 5), torch.randn(3, 5, 6), torch.randn(3, 4, 6)),
        dynamic_shapes=({0: batch, 1: rows, 2: inner}, {0: batch, 1: inner}, {0: batch, 1: rows}))
    a, b, c = torch.randn(2, 7, 3), torch.randn(2, 3, 6), torch.randn(2, 7, 6)
    torch.testing.assert_close(program.module()(a, b, c), a @ b + c)


def test_distinct_symbolic_sizes_keep_distinct_names():
    """`s0 + 1` and `s0 - 1` once shared one name in the fake specs (made of the expression's text): the
    result's size came out wrong, silently."""
    def fn(x):
        y = cat2(torch.cat([x, x[:1]]), x[1:])
        return y.sum(0) + y.shape[0]
    fast = torch.compile(fn, backend="aot_eager", fullgraph=True, dynamic=True)
    for rows in (3, 5):
        x = torch.randn(rows, 2)
        want = torch.cat([x, x[:1], x[1:]]) * 2.0
        torch.testing.assert_close(fast(x), want.sum(0) + want.shape[0])


def test_a_function_that_updates_its_parameters_in_place_is_no_torch_op():
    """An op declared without mutated arguments would hide the writes from torch.compile: refused by name."""
    @bt.jit
    def sgd(p, g, lr: float):
        p.add_(g, alpha=-lr)
        return p.sum()

    with pytest.raises(TypeError, match=r"sgd\(\) updates its parameter\(s\) p in place"):
        sgd.as_torch_op()
    p, g = torch.ones(4), torch.ones(4)
    sgd(p, g, 0.5)   # called directly, it writes the caller's tensor
    assert torch.equal(p, torch.full((4,), 0.5))
