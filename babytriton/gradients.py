"""The gradients of Relax ops that TVM 0.27 lacks, or computes unlike torch: registered as each op's
`FPrimalGradient` (what relax.transform.Gradient calls), so that a backward agrees with torch's."""
from __future__ import annotations

from tvm import relax
from tvm.relax.op.base import register_gradient  # noqa: F401
