"""A call's arguments checked against the parameters and described as ArgSpecs (babytriton/frontend/arguments.py);
the error for each mistake is in tests/core/bad_inputs."""
import inspect

import numpy as np
import pytest
import torch

import babytriton as bt
from babytriton.frontend.arguments import ArgSpec, arg_spec
from babytriton.core.types import params_from_signature


def _params(fn):
    return params_from_signature(inspect.signature(fn), lambda name, message: TypeError(message))


def test_tensor_without_data_is_a_clear_error():
    @bt.jit
    def f(a: bt.Tensor((2,), "float32")):
        return a

    with pytest.raises(ValueError, match="has no data"):
        f(bt.Tensor((2,)))


@pytest.mark.parametrize("dtype", ["float16", "int32", "bool"])
def test_torch_numpy_and_bt_tensor_arguments_have_one_spec(dtype):
    """The same data as a torch tensor, a numpy array or a bt.Tensor keys the same version."""
    def f(a, b: bt.Tensor(("n", 3), dtype)): ...

    data = torch.zeros(4, 3, dtype=getattr(torch, dtype))
    held = bt.Tensor(("n", 3), dtype)
    held.data = data
    values = [data, held, data.numpy()]
    auto, annotated = _params(f)
    assert {arg_spec(auto, v, "f") for v in values} == {ArgSpec("tensor", shape=(4, 3), dtype=dtype)}
    assert {arg_spec(annotated, v, "f") for v in values} == {ArgSpec("tensor", shape=("n", 3), dtype=dtype)}


def test_equal_constexprs_of_other_types_have_other_specs():
    """3, 3.0 and True are equal in Python but compile differently, so their specs differ."""
    def f(n: bt.constexpr): ...

    (param,) = _params(f)
    specs = [arg_spec(param, v, "f") for v in (3, 3.0, True, np.int64(3))]
    assert len(set(specs)) == 4
    assert arg_spec(param, (1, 2.0), "f") != arg_spec(param, (1, 2), "f")
