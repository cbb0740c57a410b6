"""Tensors to and from the Relax VM through DLPack (babytriton/core/dlpack.py): torch's values, no copy
where TVM can take the memory as it is."""
import numpy as np
import pytest
import torch

import babytriton as bt
from babytriton.core.dlpack import numpy_to_vm, torch_to_vm, vm_to_torch
from babytriton.core.types import DTYPES


@pytest.mark.parametrize("dtype", list(DTYPES))
def test_round_trip_keeps_values_and_shares_compact_memory(dtype):
    t = (torch.arange(24) % 7).to(DTYPES[dtype]).reshape(4, 6)
    back = vm_to_torch(torch_to_vm(t))
    assert back.dtype == t.dtype and torch.equal(back, t)
    assert back.data_ptr() == t.data_ptr()  # compact and aligned: handed over, not copied


@pytest.mark.parametrize("make", [
    lambda t: t.mT,                      # transposed: not compact
    lambda t: t[:, ::2],                 # strided
    lambda t: t[1:, 1:],                 # offset into the storage
    lambda t: t[:0],                     # empty, torch's strides
    lambda t: t.reshape(4, 6, 1).expand(4, 6, 0),  # empty with a zero stride
    lambda t: t.expand(2, 4, 6),         # broadcast view (stride 0)
], ids=["transposed", "strided", "offset", "empty", "empty-expanded", "expanded"])
def test_views_give_their_values(make):
    view = make(torch.arange(24.0).reshape(4, 6))
    back = vm_to_torch(torch_to_vm(view))
    assert back.shape == view.shape and torch.equal(back, view)


def test_numpy_arrays_read_only_or_not():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    frozen = a.T.copy()
    frozen.flags.writeable = False
    for array in (a, a.T, frozen):
        assert np.array_equal(vm_to_torch(numpy_to_vm(array)).numpy(), array)


def test_a_negated_view_is_read_with_its_negation():
    """A tensor with torch's negative bit (a lazily negated view) gives torch's value; complex
    tensors (the conjugate bit's home) stay refused."""
    @bt.jit
    def f(x):
        return x + 1

    x = torch.arange(6.0).reshape(2, 3)
    views = [x._neg_view(), torch.complex(x, x).conj().imag]  # both carry the negative bit
    for view in views:
        assert view.is_neg()
        torch.testing.assert_close(f(view), view + 1)
        torch.testing.assert_close(f.eager(view), view + 1)
    torch.testing.assert_close(f(x), x + 1)  # the same compiled version: the bit is not in the key
    with pytest.raises(TypeError, match="unsupported dtype"):
        f(torch.complex(x, x).conj())
