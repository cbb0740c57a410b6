"""PyTorch's vocabulary in @jit code: torch.*, torch.nn.functional.* and tensor methods, each mapped
to one rule over the library's Relax operators (registry.py); the modules beside it hold the rules,
by kind. The compiler and the eager reference look names up here and run the same rules."""
from . import creation, meta, nn, pointwise, reductions, shapes  # noqa: F401 - each registers its rules
from . import linalg, misc, scatter  # noqa: F401,E402 - after pointwise: misc's shifts replace its plain ones
from .registry import (FUNCTIONS, METHODS, PROPERTIES, BoundMethod, Entry, call, call_method, method,  # noqa: F401
                       resolve, tensor_property, torch_names)
