"""@jit functions calling @jit functions: inlined into the caller, checked at the call, fused
across the call; recursion refused."""
import inspect
import re

import pytest
import torch
import tvm

import babytriton as bt

INTERNALS = ("Traceback", "tvm", "TVM", ".cc", "babytriton/", "InternalError", "relax.")


@bt.jit
def swish(x: bt.Tensor(("n", 8), "float32"), beta: float = 1.0):
    return x * sigmoid(x * beta)


@bt.jit
def block(x: bt.Tensor(("n", 8), "float32"), w: bt.Tensor((8, 8), "float32")):
    h = swish(x @ w, beta=1.702)
    return h + x, h


@bt.jit
def affine(x, k: bt.constexpr, shift: int):
    return x * k + shift


def line_of(fn, marker: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if marker in line)


def call_error(fn, *args) -> bt.CompilationError:
    with pytest.raises(bt.CompilationError) as info:
        fn(*args)
    err = info.value
    text = str(err).replace(err.source_line or "", "")
    for word in INTERNALS:
        assert word not in text, (word, text)
    return err


def ref_swish(x, beta=1.0):
    return x * torch.sigmoid(x * beta)


def test_calls_compute_like_python():
    @bt.jit
    def model(x: bt.Tensor(("n", 8), "float32"), w: bt.Tensor((8, 8), "float32")):
        y, h = block(x, w)
        return swish(y) + affine(h, 2, shift=3)

    x, w = torch.randn(5, 8), torch.randn(8, 8)
    h = ref_swish(x @ w, 1.702)
    torch.testing.assert_close(model(x, w), ref_swish(h + x) + h * 2 + 3, rtol=1e-5, atol=1e-5)


def test_fusion_sees_through_the_call():
    @bt.jit
    def f(x: bt.Tensor((4, 8), "float32")):
        return exp(swish(x + 1.0)) * 2.0

    k = f.compile(torch.randn(4, 8))
    fused = [line for line in k.stages["FuseTIR"].splitlines() if "def fused" in line]
    assert len(fused) == 1 and "fused_add_multiply_tir_sigmoid_multiply1_tir_exp_multiply2" in fused[0]
    assert "def swish" not in k.stages["relax"]  # inlined, not a second Relax function
    x = torch.randn(4, 8)
    torch.testing.assert_close(f(x), torch.exp(ref_swish(x + 1)) * 2)


def test_scalars_from_numbers_and_0d_tensors():
    @bt.jit
    def f(x, s):
        return swish(x, s) + swish(x, 2) + swish(x, s.astype("int32"))

    x, s = torch.randn(3, 8), torch.tensor(0.5)
    torch.testing.assert_close(f(x, s), ref_swish(x, 0.5) + ref_swish(x, 2.0) + ref_swish(x, 0.0))


def test_numbers_reach_the_callee_as_a_direct_call_passes_them():
    @bt.jit
    def scale_by(x, s):
        return x * s

    @bt.jit
    def caller(x):
        return scale_by(x, 2.5)

    x = torch.arange(4, dtype=torch.int32)
    direct, inlined = scale_by(x, 2.5), caller(x)
    assert inlined.dtype == direct.dtype == (x * 2.5).dtype == torch.float32  # a number, by torch's rules
    torch.testing.assert_close(inlined, direct)


def test_callee_sees_its_own_globals_and_kernels():
    from test_kernels import custom_add_twice

    @bt.jit
    def f(x: bt.Tensor((4, 8), "float32")):
        return custom_add_twice(x, x) + 1.0

    x = torch.randn(4, 8)
    torch.testing.assert_close(f(x), x * 5 + 1)


# -- errors -------------------------------------------------------------------------------------
@bt.jit
def wants_4(x: bt.Tensor((4,), "float32")):
    return x + undefined_name  # error in callee  # noqa: F821


@bt.jit
def calls_wants_4(x):
    return wants_4(x)  # call site


@bt.jit
def two_rows(a: bt.Tensor(("n", 2), "float32"), b: bt.Tensor(("n", 2), "float32")):
    return a + b


@bt.jit
def ping(x):
    return pong(x)


@bt.jit
def pong(x):
    return ping(x)  # closes the cycle


def test_annotation_mismatch_is_reported_at_the_call():
    err = call_error(calls_wants_4, torch.ones(5))
    assert err.lineno == line_of(calls_wants_4.fn, "# call site")
    assert "wants_4(): parameter 'x' expects shape (4,), got a float32 tensor of shape (5,)" in err.message


def test_error_inside_the_callee_names_the_call_site():
    err = call_error(calls_wants_4, torch.ones(4))
    assert err.lineno == line_of(wants_4.fn, "# error in callee")
    assert "name 'undefined_name' is not defined" in err.message
    assert f"in 'wants_4', called from {__file__}:{line_of(calls_wants_4.fn, '# call site')}" in err.message


def test_symbolic_sizes_must_agree():
    @bt.jit
    def f(a, b):
        return two_rows(a, b)  # error

    err = call_error(f, torch.ones(3, 2), torch.ones(4, 2))
    assert "dimension 'n' is 3 in an earlier parameter but 4 here" in err.message


def test_argument_kinds_are_checked():
    @bt.jit
    def no_tensor(x):
        return two_rows(x, 1.0)

    @bt.jit
    def runtime_constexpr(x):
        return affine(x, x, 1)

    @bt.jit
    def wrong_arity(x):
        return two_rows(x)

    assert "parameter 'b' expects a tensor, got float 1.0" in call_error(no_tensor, torch.ones(2, 2)).message
    assert "'k' is bt.constexpr" in call_error(runtime_constexpr, torch.ones(2)).message
    assert "missing a required argument: 'b'" in call_error(wrong_arity, torch.ones(2, 2)).message


def test_recursion_is_refused():
    err = call_error(ping, torch.ones(2))
    assert "recursive call (ping -> pong -> ping)" in err.message
    assert err.lineno == line_of(pong.fn, "closes the cycle")

    @bt.jit
    def itself(x):
        return itself(x)

    assert "recursive call (itself -> itself)" in call_error(itself, torch.ones(2)).message


# -- with device blocks and the fusion map ----------------------------------------------------------
def test_inlined_code_runs_on_the_device_of_the_block_it_is_called_in():
    cuda = tvm.target.Target({"kind": "cuda", "arch": "sm_90"})

    @bt.jit(target=cuda)
    def f(x: bt.Tensor((4, 8), "float32")):
        with bt.device("cpu"):
            y = swish(x)
        with bt.device("gpu"):
            z = swish(y) + 1.0
        return z

    k = f.compile()
    kernels = re.findall(r"R\.call_tir\(cls\.(\w+)", k.stages["PlaceOnDevices"].split("@R.function")[-1])
    assert len(kernels) == 2 and kernels[0].endswith("_llvm") and kernels[1].endswith("_cuda"), kernels


def test_a_callee_with_device_blocks_needs_a_caller_with_them():
    @bt.jit
    def on_cpu(x):
        with bt.device("cpu"):
            y = x * 2.0
        return y

    @bt.jit
    def plain(x):
        return on_cpu(x)

    assert "can only be called from @jit code that has device blocks" in call_error(plain, torch.ones(2)).message


def test_the_fusion_map_points_at_the_call():
    @bt.jit
    def f(x: bt.Tensor((4, 8), "float32")):
        y = x + 1.0
        return swish(y)  # the call

    k = f.compile()
    call_line = line_of(f.fn, "# the call")
    (kernel,) = k.fusion
    assert {op.line for op in kernel.ops} == {call_line - 1, call_line}, str(k.fusion)
