"""Differential fuzzing: random @jit programs, each compared with plain torch on the same inputs.

`generate(seed)` writes one program: a function over 1-4 tensors of rank 0-4 (broadcasting shapes,
size-1 axes anywhere and empty axes, a quarter of programs over wide shapes that GPU schedules take
apart, mixed dtypes, static, symbolic or no annotations, some passed as transposes, strided slices or
with torch's negative bit, some holding NaN/inf/-0.0), runtime scalars of every kind and constexprs,
built from Python's operators, library ops, torch's math in its own spellings (TORCH_MATH), reductions,
shape ops, `split`/`chunk` into pieces used afterwards, control flow and `a if c else b` on tensor
conditions; now and then instead a reduction over 4096-100000 half-precision elements
(`generate_long`). `check_file(path)` imports it (babytriton needs real source files) and runs it
three ways: translated into plain torch (testing/oracle.py: the oracle, independent of babytriton's
operator rules), compiled (twice: compiling, then the cached path; with `threads`, also from several
threads at once) and eagerly (`f.eager`, a second opinion); with `cuda`, a program that passes is
also built for CUDA (sm_90) and its source compiled by nvcc (`check_cuda`: nothing runs, no GPU). Dtypes, shapes and values
must match torch's (NaN equal to NaN); where torch raises, the compiled call must raise a clean Python
error. `minimise` shrinks a failing program (dropping statements, helpers, input views and special
values, and replacing expressions by their parts) while it fails the same way; `run_isolated` runs
programs in a child process so that one that kills it is a finding too.

No false alarms on ordinary inputs: the generator tracks, for every value, a bound on its magnitude and whether it is
computed exactly (inputs are small multiples of 1/8, so sums and products stay exact while they fit
the dtype's mantissa). Exact values must match bit for bit; inexact ones get a tolerance from an
error bound carried along with the value. Operations that jump (floor, comparisons, `//`, argmax,
casts to integers) only take exact operands, and divisors and logarithms only take values at least 1.

The package, by concern: `values` (V and its rules), `arguments` (parameters, their arguments),
`tables`, the `Generator` (generator.py) with its mixins `statements`, `operators`, `math_calls` and
`tensor_calls`, `programs` (generate), `checking` (check_file, compare), `minimising` and `driver`
(run, run_isolated, run_parallel). The names below are its interface.
"""
from .values import (
    DEFAULT_TOLERANCE, EPS, FLOATS, HEADER, INPUT_DTYPES, INTS, LIMIT, MANTISSA, NAMES, Unfit, V, broadcast,
    broadcast_dims, converted_err, dims_of, finish, fits, paren, promote, representable, symbolic,
)
from .arguments import Param, SPECIALS, make_args
from .tables import (
    BT_OPS, DOMAINS, DOMAIN_LIMIT, FLOAT_LITERALS, HELPERS, INT_LITERALS, INT_TO_FLOAT, LONG_SHARE,
    MATMUL_WORK, OPS, TORCH_MATH, UNARY_FLOAT, WIDE_ELEMENTS, WIDE_INNER, WIDE_OUTER, WIDE_SHARE, as_argument,
    method_keywords,
)
from .generator import Generator
from .programs import LONG_REDUCTIONS, Program, generate, generate_long
from .checking import (
    FINDINGS, Outcome, SM90, check_cuda, check_file, check_module, check_threads, compare, load,
    _one_torch_thread,
)
from .minimising import minimise
from .driver import (
    MINIMISE_PER_SORT, PARALLEL_CHUNK, Report, program_seed, reproducer, run, run_isolated, run_parallel,
)
