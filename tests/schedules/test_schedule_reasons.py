"""`k.fusion` says why a kernel ended on Dlight's Fallback (or, on a CPU, on no rule): each of babytriton's
rules that declines a kernel of its kind gives a reason (schedules/reasons.py), kept per kernel by Guarded."""
import pytest
import torch
import tvm
from hypothesis import given, settings
from hypothesis import strategies as st

import babytriton as bt
from babytriton import schedules
from babytriton.schedules.reasons import decline, hearing

SM90 = {"kind": "cuda", "arch": "sm_90"}


def symbolic(x: bt.Tensor(("n", 4))):
    return x * 2.0 + 1.0


def zero_d(x: bt.Tensor(()), y: bt.Tensor(())):
    return x * y + 1.0


def tiny(x: bt.Tensor((4,))):
    return x * 2.0


def large(x: bt.Tensor((1024, 1024))):
    return x * 2.0


# kernels that stay on Fallback by design: nothing to spread over threads
@pytest.mark.parametrize("f, reason", [(zero_d, "Elementwise: a 0-d result"), (tiny, "Elementwise: 4 elements")])
def test_a_kernel_on_fallback_says_why(f, reason):
    k = bt.jit(target=SM90)(f).compile()
    (kernel,) = k.fusion
    assert kernel.rule == "dlight.gpu.Fallback" and kernel.launch.startswith("grid "), str(k.fusion)
    assert kernel.why.startswith(reason), kernel.why
    assert f"rule dlight.gpu.Fallback: {kernel.launch}; declined by {kernel.why}" in str(k.fusion)


def test_a_scheduled_kernel_shows_its_rule_and_launch_shape_only():
    k = bt.jit(target=SM90)(large).compile()
    (kernel,) = k.fusion
    assert kernel.rule == "Elementwise" and kernel.launch.startswith("grid ") and kernel.why == "", str(k.fusion)
    assert f"rule Elementwise: {kernel.launch}" in str(k.fusion) and "declined" not in str(k.fusion)


def test_fallback_chosen_by_the_user_has_nothing_to_explain():
    k = bt.jit(target=SM90, schedule="fallback")(symbolic).compile()
    assert k.fusion[0].rule == "dlight.gpu.Fallback" and k.fusion[0].why == ""


def scatter(x: bt.Tensor((64, 8)), index: bt.Tensor((64, 8), "int64")):
    return torch.scatter(x, 1, index, x * 2.0)


def test_a_cpu_kernel_no_rule_took_says_why():
    k = bt.jit(target="cpu")(scatter).compile()
    x, index = torch.randn(64, 8), torch.rand(64, 8).argsort(dim=1)
    torch.testing.assert_close(k(x, index), torch.scatter(x, 1, index, x * 2.0))
    kernel = next(kk for kk in k.fusion if kk.rule == "none")   # TVM's scatter: an opaque block
    rules, reason = kernel.why.split(": ", 1)   # every CPU rule of babytriton's, for the one reason
    assert {"CPUElementwise", "CPUReduction", "CPUSpatial"} <= set(rules.split(", ")), kernel
    assert reason == "its blocks have no normal form (an opaque block)", kernel
    assert f"rule none: {kernel.launch}; declined by {kernel.why}" in str(k.fusion)


@settings(max_examples=4, deadline=None, derandomize=True)
@given(st.integers(1, 48), st.integers(1, 300), st.booleans())
def test_every_kernel_on_fallback_says_why(rows, cols, transpose):
    """Generated shapes, transposed or not: a kernel that ends on Fallback names the rules that declined it."""
    def f(x: bt.Tensor((rows, cols))):
        return (x.T if transpose else x) * 2.0 + 1.0
    k = bt.jit(target=SM90)(f).compile()
    (kernel,) = k.fusion
    assert (kernel.rule == "dlight.gpu.Fallback") == bool(kernel.why) == ("declined by" in str(k.fusion)), kernel
    assert kernel.rule != "dlight.gpu.Fallback" or "Elementwise: " in kernel.why, kernel


class _Raises:
    def apply(self, func, target, tunable):
        decline("never heard: the failure is the reason")
        raise ValueError("a rule's bug")


def test_the_first_reason_counts_and_a_failing_rule_says_it_failed():
    assert decline("nobody listens") is None
    with hearing() as heard:
        decline("a symbolic size")
        decline("a later reason")
    assert heard == ["a symbolic size"]
    k = bt.jit(target="cpu")(large).compile()
    mod = k.module.clone()
    (gvar,) = [g for g, func in mod.functions_items() if isinstance(func, tvm.tirx.PrimFunc)]
    mod[gvar] = mod[gvar].without_attr(schedules.RULE_ATTR)  # as if no rule had scheduled it
    with schedules.Declines(mod) as declined:
        assert schedules.Guarded(_Raises()).apply(mod[gvar], k.target, False) is None
    assert str(declined.onto(mod)[gvar].attrs[schedules.DECLINED_ATTR]) == "_Raises: failed (ValueError)"
