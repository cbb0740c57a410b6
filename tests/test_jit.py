"""The decorator, its options, the call path's argument checks, the in-memory cache and stages."""
import sys
import threading
import types

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import babytriton as bt
from babytriton.jit import _eager_when_empty, _key_function, _value_key

T23 = bt.Tensor((2, 3), "float32")


def add_mul(a: T23, b: T23):
    out = a + b
    out = out * a - 1.5
    return out


def test_both_decorator_forms():
    plain = bt.jit(add_mul)
    configured = bt.jit(target="cpu", verbose=False)(add_mul)
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    torch.testing.assert_close(plain(a, b), (a + b) * a - 1.5)
    torch.testing.assert_close(configured(a, b), (a + b) * a - 1.5)
    assert plain.__name__ == "add_mul" and plain.__wrapped__ is add_mul


@pytest.mark.parametrize("options, error, words", [
    ({"traget": "cpu"}, TypeError, "did you mean 'target'"),
    ({"target": "tpu"}, ValueError, "unknown target 'tpu'"),
    ({"schedule": "magic"}, ValueError, "unknown schedule 'magic'"),
    ({"backend": "jax"}, ValueError, "unknown backend 'jax'"),
    ({"unroll": -1}, ValueError, "unroll is a non-negative int"),
    ({"trials": 1.5}, ValueError, "trials is a non-negative int"),
    ({"verbose": "yes"}, TypeError, "verbose is True or False"),
])
def test_bad_options_fail_at_decoration(options, error, words):
    with pytest.raises(error, match=words):
        bt.jit(**options)
    with pytest.raises(error, match=words):
        bt.jit(add_mul, **options)


def test_target_spellings():
    import tvm
    for target in ("cpu", "llvm", tvm.target.Target("llvm"), {"kind": "llvm"}):
        f = bt.jit(target=target)(add_mul)
        a, b = torch.randn(2, 3), torch.randn(2, 3)
        torch.testing.assert_close(f(a, b), (a + b) * a - 1.5)


# --------------------------------------------------------------------------------------------------
# argument checks name the parameter, expected and got
# --------------------------------------------------------------------------------------------------

f = bt.jit(add_mul)


@pytest.mark.parametrize("args, error, words", [
    ((torch.ones(2, 3),), TypeError, "missing a required argument: 'b'"),
    ((torch.ones(2, 3),) * 3, TypeError, "too many positional arguments"),
    ((torch.ones(2, 3), torch.ones(3, 2)), ValueError, r"parameter 'b' expects shape \(2, 3\), got \(3, 2\)"),
    ((torch.ones(2, 3), torch.ones(6)), ValueError, r"parameter 'b' expects a 2-d tensor .* got 1-d"),
    ((torch.ones(2, 3, dtype=torch.float64), torch.ones(2, 3)), TypeError,
     "parameter 'a' expects dtype float32, got float64"),
    ((torch.ones(2, 3), [[1, 2, 3]]), TypeError, "parameter 'b' expects a tensor"),
    ((torch.ones(2, 3), "x"), TypeError, "parameter 'b' expects a tensor .* got str"),
    ((torch.ones(2, 3), torch.ones(2, 3, device="meta")), TypeError,
     "parameter 'b' is on meta, but this function runs on the CPU"),
])
def test_bad_arguments(args, error, words):
    with pytest.raises(error, match=words):
        f(*args)


def test_gpu_function_rejects_cpu_tensors_before_compiling():
    g = bt.jit(target={"kind": "cuda", "arch": "sm_90"})(add_mul)
    with pytest.raises(TypeError, match="parameter 'a' is on cpu, but this function runs on the GPU; move it"):
        g(torch.ones(2, 3), torch.ones(2, 3))
    with pytest.raises(TypeError, match="parameter 'a' is a numpy array"):
        g(np.ones((2, 3), "float32"), np.ones((2, 3), "float32"))
    assert g.cache_info()["compilations"] == 0


def test_scalar_annotations_are_checked():
    @bt.jit
    def scale(x: T23, k: int):
        return x * k

    with pytest.raises(TypeError, match="parameter 'k' is annotated int, got float"):
        scale(torch.ones(2, 3), 1.5)
    with pytest.raises(TypeError, match="parameter 'k' is annotated int, got bool"):
        scale(torch.ones(2, 3), True)


def test_unhashable_constexpr_is_a_clear_error():
    @bt.jit
    def g(x, n: bt.constexpr):
        return x * n

    with pytest.raises(TypeError, match="parameter 'n' is bt.constexpr, so its value must be hashable"):
        g(torch.ones(2), [1, 2])


def test_unsupported_annotation_is_reported_at_the_parameter():
    def h(x: list):
        return x

    with pytest.raises(bt.CompilationError, match="parameter 'x' has the annotation") as info:
        bt.jit(h)
    assert info.value.lineno == h.__code__.co_firstlineno


# --------------------------------------------------------------------------------------------------
# cache and stages
# --------------------------------------------------------------------------------------------------

def test_same_types_reuse_one_compilation():
    g = bt.jit(add_mul)
    for _ in range(3):
        g(torch.randn(2, 3), torch.randn(2, 3))
    g.compile(torch.randn(2, 3), torch.randn(2, 3))
    info = g.cache_info()  # one version: compiled here, or loaded from the session's disk cache
    assert info["misses"] == 1 and info["compilations"] + info["disk_hits"] == 1


def test_stages_in_order_and_source():
    k = bt.jit(add_mul).compile(torch.ones(2, 3), torch.ones(2, 3))
    assert list(k.stages) == ["python", "ast", "relax", "ConvertToDataflow", "AttentionToSDPA", "MatmulToTorch",
                              "DecomposeSoftmax", "LegalizeOps", "AnnotateTIROpPattern", "FuseRowwise", "FuseOps",
                              "FuseMultiOutput", "FuseTIR", "schedule", "source"]
    assert "def add_mul" in k.stages["python"]
    assert "FunctionDef(" in k.stages["ast"]
    assert "R.add(a, b)" in k.stages["relax"]
    assert "R.dataflow()" in k.stages["ConvertToDataflow"]
    assert "T.prim_func" in k.stages["LegalizeOps"]
    assert "fused_add_multiply_subtract" in k.stages["FuseTIR"]
    assert k.source is k.stages["source"] and "define" in k.source and "fused_add_multiply_subtract" in k.source
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    torch.testing.assert_close(k(a, b), (a + b) * a - 1.5)


def test_compile_without_arguments_needs_full_annotations():
    k = bt.jit(add_mul).compile()
    assert "fused_add_multiply_subtract" in k.stages["FuseTIR"]

    @bt.jit
    def loose(x, n: int):
        return x * n

    with pytest.raises(TypeError, match="parameter 'x' is not fully annotated"):
        loose.compile()


def test_kernel_checks_its_arguments():
    k = bt.jit(add_mul).compile()
    with pytest.raises(ValueError, match="parameter 'a' expects shape"):
        k(torch.ones(3, 3), torch.ones(2, 3))


def test_verbose_prints_each_stage(capsys):
    bt.jit(verbose=True)(add_mul).compile()
    out = capsys.readouterr().out
    for stage in ("python", "relax", "FuseTIR", "source"):
        assert f"===== add_mul: {stage} =====" in out


def test_tutorial_add_then_add_fuses_into_one_kernel():
    @bt.jit
    def add_add(a: T23, b: T23):
        c = a + b
        d = c + a
        return d

    k = add_add.compile()
    fused = [line for line in k.stages["FuseTIR"].splitlines() if "def fused_" in line]
    assert len(fused) == 1 and "fused_add_add" in fused[0]
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    torch.testing.assert_close(add_add(a, b), a + b + a)


# --------------------------------------------------------------------------------------------------
# globals that change: their values are part of the key, for every shape
# --------------------------------------------------------------------------------------------------

SCALE = 2.0
SETTINGS = types.SimpleNamespace(offset=1.0)


def scaled(x):
    return x * SCALE + SETTINGS.offset


def test_a_changed_global_reaches_old_and_new_shapes_alike(monkeypatch):
    f = bt.jit(scaled, cache=False)
    module = sys.modules[__name__]
    old, new = torch.randn(2, 3), torch.randn(4, 5)

    def check(*tensors):
        for x in tensors:
            want = x * module.SCALE + SETTINGS.offset
            torch.testing.assert_close(f(x), want)
            torch.testing.assert_close(f.eager(x), want)

    check(old)
    monkeypatch.setattr(module, "SCALE", 3.0)
    check(old, new)                       # the shape compiled before sees the new value as well
    assert f.cache_info()["compilations"] == 3
    monkeypatch.setattr(module, "SCALE", 2.0)
    check(old)                            # back to a value seen before: its version, no compile
    assert f.cache_info()["compilations"] == 3
    check(new)
    monkeypatch.setattr(SETTINGS, "offset", -4.0)   # an attribute path read by the function
    check(new, old)
    assert f.cache_info()["compilations"] == 6
    monkeypatch.setattr(module, "SCALE", float("2.0"))   # another object, the same value: same version
    check(new, old)
    assert f.cache_info()["compilations"] == 6


def test_changed_closure_number_and_callee_global(monkeypatch):
    factor = 2

    @bt.jit(cache=False)
    def g(x):
        return x * factor

    @bt.jit(cache=False)
    def caller(x):
        return scaled_callee(x) + 1.0   # the callee reads SCALE

    x = torch.randn(3)
    torch.testing.assert_close(g(x), x * 2)
    factor = 5  # noqa: F841 - read through g's closure cell
    torch.testing.assert_close(g(x), x * 5)
    torch.testing.assert_close(caller(x), x * 2.0 + SETTINGS.offset + 1.0)
    monkeypatch.setattr(sys.modules[__name__], "SCALE", -1.0)
    torch.testing.assert_close(caller(x), x * -1.0 + SETTINGS.offset + 1.0)


scaled_callee = bt.jit(scaled, cache=False)


def test_threads_see_a_changed_global_consistently(monkeypatch):
    f = bt.jit(scaled, cache=False)
    module = sys.modules[__name__]
    shapes = [(2, 3), (3, 2), (1, 4)]
    for value in (2.0, 7.0):
        monkeypatch.setattr(module, "SCALE", value)
        errors = []

        def work(i):
            try:
                for step in range(30):
                    x = torch.randn(shapes[(i + step) % len(shapes)])
                    torch.testing.assert_close(f(x), x * value + SETTINGS.offset)
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
    assert f.cache_info()["compilations"] == 2 * len(shapes)


# --------------------------------------------------------------------------------------------------
# the cached call path: the call key and the runner it finds
# --------------------------------------------------------------------------------------------------

_KEY_VALUES = [
    lambda: torch.ones(2, 3), lambda: torch.ones(3, 2, dtype=torch.float64), lambda: torch.ones(2, 3).t(),
    lambda: torch.ones(2, 3, requires_grad=True), lambda: torch.nn.Parameter(torch.ones(2)),
    lambda: torch.ones(2, device="meta"), lambda: torch.tensor(1.5), lambda: np.ones((2, 3), np.float32),
    lambda: bt.Tensor((2, 3), "float32"), lambda: 3, lambda: 3.0, lambda: True, lambda: "s",
    lambda: (1, 2), lambda: None, lambda: [1],
]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(_KEY_VALUES), st.booleans()), max_size=4))
def test_the_generated_call_key_is_each_arguments_key(arguments):
    """The generated call key (torch tensors read inline) is, argument by argument, what
    `_value_key` gives: the key that picks a runner is the same for every kind of value."""
    values = tuple(make() for make, _ in arguments)
    constexpr = tuple(c for _, c in arguments)
    want = tuple(_value_key(v, c) for v, c in zip(values, constexpr))
    assert _key_function(constexpr)(values) == want


def test_a_primed_call_path_still_finds_checks_and_compiles_by_argument():
    """After the first call made a runner, calls with another shape, dtype, array type or
    requires_grad take their own runner (compiling where the version differs), and the versions
    already made are found again without a new check."""
    @bt.jit(cache=False)
    def g(x, y):
        return x * y + 1.0

    def prepared():   # runners made: each one looks its version up once (a hit or a miss)
        return g.stats["hits"] + g.stats["misses"]

    x, y = torch.randn(2, 3), torch.randn(2, 3)
    torch.testing.assert_close(g(x, y), x * y + 1.0)
    assert prepared() == 1
    for _ in range(3):   # the cached runner: no new check, no new lookup
        x1 = torch.randn(2, 3)
        torch.testing.assert_close(g(x1, y), x1 * y + 1.0)
    assert prepared() == 1
    x3 = torch.randn(3, 3)
    torch.testing.assert_close(g(x3, x3), x3 * x3 + 1.0)                # a new shape: a new version
    xd = x.double()
    torch.testing.assert_close(g(xd, xd), xd * xd + 1.0)                # a new dtype: a new version
    assert g.cache_info()["versions"] == 3
    a, b = x.numpy(), y.numpy()
    out = g(a, b)                                                       # numpy in, numpy out, same version
    assert isinstance(out, np.ndarray) and np.allclose(out, a * b + 1.0)
    assert g.cache_info()["versions"] == 3
    xg = x.clone().requires_grad_()
    g(xg, y).sum().backward()                                           # through autograd
    torch.testing.assert_close(xg.grad, y)
    p = torch.nn.Parameter(x.clone())                                   # a torch.Tensor subclass
    g(p, y).sum().backward()
    torch.testing.assert_close(p.grad, y)
    before = prepared()
    torch.testing.assert_close(g(x, y), x * y + 1.0)                    # the first runner, found again
    assert prepared() == before


def test_a_primed_annotated_function_still_rejects_wrong_arguments():
    h = bt.jit(add_mul, cache=False)
    a = torch.randn(2, 3)
    torch.testing.assert_close(h(a, a), (a + a) * a - 1.5)
    with pytest.raises(TypeError, match="parameter 'b' expects dtype float32, got float64"):
        h(a, a.double())
    with pytest.raises(ValueError, match=r"parameter 'a' expects shape \(2, 3\), got \(3, 2\)"):
        h(a.t().contiguous(), a)
    with pytest.raises(TypeError, match="parameter 'b' is on meta, but this function runs on the CPU"):
        h(a, torch.ones(2, 3, device="meta"))
    torch.testing.assert_close(h(a, a), (a + a) * a - 1.5)
    assert h.cache_info()["versions"] == 1


def test_an_empty_symbolic_size_picks_the_eager_runner_once():
    """GPU runners: a symbolic-size tensor holding no element (a bt.Tensor's data too) runs eagerly;
    decided when the runner is made, as the call key holds exact shapes."""
    class Function:
        def eager(self, *args):
            return "eager"

    def run(args):
        return "compiled"

    empty = bt.Tensor(("n",), "float32")
    empty.data = torch.ones(0)
    for args in [(torch.ones(0, 3), torch.ones(2)), (empty, torch.ones(2))]:
        assert _eager_when_empty(run, Function(), args, [0])(args) == "eager"
    assert _eager_when_empty(run, Function(), (torch.ones(2, 3), torch.ones(0)), [0]) is run
