"""babytriton: a teaching-grade JIT compiler from Python tensor functions to TVM Relax, TIR and CUDA."""
from .codegen.tir import parallel
from .devices import device
from .errors import CompilationError
from .jit import JITFunction, Kernel, jit
from .types import Tensor, constexpr

__version__ = "0.1.0"

__all__ = ["jit", "JITFunction", "Kernel", "Tensor", "constexpr", "CompilationError", "device", "parallel"]
