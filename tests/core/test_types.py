"""bt.Tensor as annotation and value, dtype names, constexpr."""
import numpy as np
import pytest
import torch

import babytriton as bt
from babytriton.core.types import DTYPES, dtype_name, is_float_dtype


def test_tensor_annotation_fields():
    t = bt.Tensor(("n", 3), "float16")
    assert t.shape == ("n", 3) and t.dtype == "float16" and t.ndim == 2
    assert repr(t) == "Tensor((n, 3), 'float16')"
    assert bt.Tensor((2, 3)) == bt.Tensor([2, 3], "float32")


@pytest.mark.parametrize("shape", [(2, -1), (2, 1.5), ("3x",), (True,)])
def test_bad_shapes(shape):
    with pytest.raises(ValueError, match="shape"):
        bt.Tensor(shape)


@pytest.mark.parametrize("name", list(DTYPES))
def test_is_float_dtype_agrees_with_torch(name):
    from tvm import relax
    assert is_float_dtype(name) == DTYPES[name].is_floating_point
    assert is_float_dtype(relax.TensorType([2], name).dtype) == DTYPES[name].is_floating_point  # TVM's dtype


def test_dtype_names():
    assert set(DTYPES) >= {"float16", "bfloat16", "float32", "float64", "int32", "int64", "bool"}
    assert dtype_name(torch.float16) == "float16"
    assert dtype_name(np.int32) == "int32"
    assert dtype_name("float") == "float32"
    with pytest.raises(ValueError, match="unsupported dtype 'complex64'"):
        bt.Tensor((2,), "complex64")


def test_data_setter_checks_shape_and_dtype():
    t = bt.Tensor(shape=(2, 3), dtype="float32")
    t.data = torch.ones(2, 3)
    t.data = np.zeros((2, 3), "float32")
    assert isinstance(t.data, torch.Tensor)
    with pytest.raises(ValueError, match=r"expected shape \(2, 3\), got \(3, 2\)"):
        t.data = torch.ones(3, 2)
    with pytest.raises(ValueError, match="expected dtype float32, got int64"):
        t.data = torch.ones(2, 3, dtype=torch.int64)
    with pytest.raises(ValueError, match="takes a torch tensor or numpy array"):
        t.data = [1, 2, 3]
    sym = bt.Tensor(("n", 3))
    sym.data = torch.ones(7, 3)


def test_constexpr_is_only_an_annotation():
    with pytest.raises(TypeError, match="annotation"):
        bt.constexpr()


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64", "int32", "int64", "bool",
                                   "int8", "uint8"])
def test_every_dtype_round_trips(dtype):
    @bt.jit
    def ident(x):
        y = x
        return y, x == x

    x = (torch.rand(3, 2) * 10).to(DTYPES[dtype])
    y, same = ident(x)
    assert y.dtype == x.dtype and torch.equal(y, x) and bool(same.all())
