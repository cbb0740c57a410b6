"""Tensors to and from the Relax VM without copies, through DLPack."""
import numpy as np
import torch
import tvm


def as_is(t: torch.Tensor) -> bool:
    """Whether TVM takes this torch tensor's memory as it is: compact, 64-byte aligned (what
    `tvm.runtime.from_dlpack` requires, and the generated code assumes) and not lazily negated."""
    return t.is_contiguous() and not t.data_ptr() & 63 and not t.is_neg()


def torch_to_vm(t: torch.Tensor):
    if t.is_neg():  # a lazily negated view (`x._neg_view()`): its memory holds -x, so negate for real
        t = t.resolve_neg()
    if t.numel() == 0:  # torch gives an empty tensor any strides ((3, 0): (1, 1)); TVM checks them
        compact = [1] * t.dim()
        for i in range(t.dim() - 2, -1, -1):
            compact[i] = compact[i + 1] * t.shape[i + 1]
        if list(t.stride()) != compact:
            t = torch.empty_strided(t.shape, compact, dtype=t.dtype, device=t.device)
    elif not as_is(t):  # tested first: TVM's refusal is an exception, which costs 30 µs
        t = t.contiguous() if not t.is_contiguous() else t.clone()
    try:
        return tvm.runtime.from_dlpack(t)
    except Exception:
        # TVM takes only compact, 64-byte aligned memory: a fresh contiguous copy always is.
        return tvm.runtime.from_dlpack(t.contiguous() if not t.is_contiguous() else t.clone())


# torch's capsule reader itself, without `torch.from_dlpack`'s Python dispatch on the argument's type
# (0.3 us of the 1 us a conversion took); the public function where a torch lacks it
_from_capsule = getattr(torch._C, "_from_dlpack", torch.from_dlpack)


def vm_to_torch(t) -> torch.Tensor:
    """A VM tensor as a torch tensor sharing its memory. Handing torch the DLPack capsule skips the
    stream handshake of `torch.from_dlpack(t)`, which costs 5 µs per CUDA tensor; TVM and torch both
    launch on the default stream, so no synchronisation is needed."""
    return _from_capsule(t.__dlpack__())


def numpy_to_torch(a: np.ndarray) -> torch.Tensor:
    """A numpy array as a torch tensor: its memory where torch can share it, else a copy."""
    return torch.from_numpy(np.ascontiguousarray(a)) if a.flags.writeable else torch.tensor(a)


def numpy_to_vm(a: np.ndarray):
    return torch_to_vm(numpy_to_torch(a))
