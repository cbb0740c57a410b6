"""babytriton: a teaching-grade JIT compiler from Python tensor functions to TVM Relax, TIR and CUDA."""
from . import ops
from .torch.autograd import GradientFallbackWarning
from .core.config import __version__
from .codegen.pytorch import torch_names
from .codegen.tir import parallel
from .frontend.devices import device
from .core.errors import CompilationError
from .jit import JITFunction, Kernel, grad_for, jit
from .ops import *  # noqa: F401,F403 - bt.softmax, bt.sigmoid, ...: operators for @jit code
from .torch.library import torch_op
from .core.types import Tensor, constexpr

# The operators stay out of __all__: `from babytriton import *` must not shadow sum, max, abs, ...
__all__ = ["jit", "JITFunction", "Kernel", "Tensor", "constexpr", "CompilationError", "device", "parallel",
           "ops", "grad_for", "GradientFallbackWarning", "torch_op", "torch_names"]
