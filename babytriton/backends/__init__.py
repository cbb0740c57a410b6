"""The two builders from FunctionInfo and argument specs to a compiled Kernel: relax.py (whole-tensor
functions, with their backward) and tir.py (@jit(backend="tir") kernels). Imports runtime/, autodiff/."""
