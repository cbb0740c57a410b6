"""A vectorisable float32 exp, erf, tanh, log, sin and cos for CPU builds (LLVM would call libm once
per lane), on while babytriton builds (`fast_exp`)."""
from __future__ import annotations

import math
import threading

import tvm
import tvm_ffi
from tvm import tirx


# LLVM has no vector exp here: it turns a vectorised exp into one libm expf call per lane, which
# caps every exp, sigmoid and softmax at scalar speed. While babytriton builds (`fast_exp`), the llvm
# lowering of float32 exp is Cody-Waite range reduction and the Cephes degree-6 polynomial (about
# 1 ulp), with inf, 0 and NaN where libm gives them. The lowering is global to TVM, hence the flag.
_EXP_LOWERING = tvm.ir.Op.get("tirx.exp").get_attr("llvm.FLowerIntrinsic")
_fast = threading.local()


def _named(arg, compute, lanes):
    """compute(x, lanes) with x a Let-bound name for `arg`: a polynomial reads x several times, and
    nested calls (exp(exp(..)), log(log(..))) then stay linear in size."""
    x = tirx.Var("x", arg.ty.dtype if hasattr(arg, "ty") else arg.dtype)
    return tirx.Let(x, bool_casts_as_selects(arg), compute(x, lanes))


def _exp_f32(arg, lanes: int):
    return _named(arg, _exp_f32_of, lanes)


def bool_casts_as_selects(expr, scalar_too: bool = False):
    """`expr` with each cast of a bool vector (`scalar_too`: of any bool) written as a select of 1 or
    0 (the same values): the LLVM codegen analyses a Let's value, and TVM's interval analysis fails on
    a bool vector's cast (it makes a vector IntImm), as in exp(x.astype('float32')) for a vectorised
    bool x, or `where`'s `0 < int64(cond)` once its loop is vectorised."""
    def as_select(cast):
        source = cast.value.ty.dtype if hasattr(cast.value, "ty") else cast.value.dtype
        if not source.is_bool or (source.lanes == 1 and not scalar_too):
            return cast
        dtype = cast.ty.dtype if hasattr(cast, "ty") else cast.dtype
        scalar = str(dtype.with_lanes(1))
        if source.lanes == 1:
            return tirx.Select(cast.value, tirx.const(1, scalar), tirx.const(0, scalar))
        return tirx.Select(cast.value, tirx.Broadcast(tirx.const(1, scalar), source.lanes),
                           tirx.Broadcast(tirx.const(0, scalar), source.lanes))
    return tvm_ffi.structural_map(tvm_ffi.structural_map(expr, (tirx.LT, _bool_test_of_cast)), (tirx.Cast, as_select))


def _bool_test_of_cast(less):
    """`0 < int(c)` (`where`'s condition, legalized) as c itself. Written as `0 < select(c, 1, 0)`,
    nested `where`s (torch.nan_to_num: three) took TVM's simplifier 12 s instead of 0.08 s: it
    explores both sides of every select it finds in a condition."""
    zero, cast = less.a, less.b
    if isinstance(zero, tirx.Broadcast):
        zero = zero.value
    if not (isinstance(zero, tirx.IntImm) and zero.value == 0 and isinstance(cast, tirx.Cast)):
        return less
    source = cast.value.ty.dtype if hasattr(cast.value, "ty") else cast.value.dtype
    return cast.value if source.is_bool else less


def _exp_f32_of(x, lanes: int):
    f32 = lambda v: tirx.const(v, "float32")  # noqa: E731 - scalars broadcast to the lanes
    i32 = lambda v: tirx.const(v, "int32")  # noqa: E731
    fdt, idt = ("float32", "int32") if lanes == 1 else (f"float32x{lanes}", f"int32x{lanes}")
    # clamped where the result has overflowed (e^89: inf) or underflowed (e^-104: 0) already, so
    # the same arithmetic gives inf and 0 beyond, as libm does, with no select per bound
    c = tirx.max(tirx.min(x, f32(89.0)), f32(-104.0))
    n = tirx.floor(c * f32(1.4426950408889634) + f32(0.5))            # x = n ln2 + r
    r = c - n * f32(0.693359375) - n * f32(-2.12194440e-4)             # ln2 as hi + lo
    p = f32(1.9875691500e-4)
    for coefficient in (1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1):
        p = p * r + f32(coefficient)
    p = p * r * r + r + f32(1.0)                                        # e^r
    # 2^n as two normal halves: n reaches 128 (e^89) and -150 (subnormal results)
    half = n.astype(idt) // i32(2)
    low = tirx.reinterpret(fdt, (half + i32(127)) * i32(1 << 23))
    high = tirx.reinterpret(fdt, (n.astype(idt) - half + i32(127)) * i32(1 << 23))
    return tirx.Select(tirx.isnan(x), x, p * low * high)  # NaN stays NaN (the clamp made it a number)


def as_f32(dtype):
    """float32 with the lanes of `dtype`."""
    return "float32" if dtype.lanes == 1 else f"float32x{dtype.lanes}"


def _in_float32(fast, tvms):
    """The llvm lowering of a float math call: `fast(arg, lanes)` for float32 while babytriton builds
    (`fast_exp`); float16 computed in float32 by it and rounded once, as torch does (LLVM scalarises a
    float16 vector call); TVM's own lowering `tvms` otherwise."""
    def lower(call):
        dtype = call.ty.dtype
        if getattr(_fast, "on", False) and dtype.is_float and dtype.bits == 32:
            return fast(call.args[0], dtype.lanes)
        if getattr(_fast, "on", False) and str(dtype.with_lanes(1)) == "float16":
            return tirx.Cast(dtype, fast(tirx.Cast(as_f32(dtype), call.args[0]), dtype.lanes))
        return tvms(call)
    return lower


def _rational(c, numerator, denominator):
    """Eigen's odd rational form c * p(c^2) / q(c^2), each polynomial by Horner's rule in float32."""
    f32 = lambda v: tirx.const(v, "float32")  # noqa: E731 - scalars broadcast to the lanes
    c2 = c * c
    p, q = f32(numerator[0]), f32(denominator[0])
    for coefficient in numerator[1:]:
        p = p * c2 + f32(coefficient)
    for coefficient in denominator[1:]:
        q = q * c2 + f32(coefficient)
    return c * p / q


tirx.op.register_intrin_lowering("tirx.exp", target="llvm", f=_in_float32(_exp_f32, _EXP_LOWERING), level=99)

# erf the same way: LLVM calls libm's erff once per lane of a vectorised erf (gelu's), so float32 erf
# is Eigen's rational approximation (the one of TVM's `topi.fast_erf`): odd degree 13 over even
# degree 8 on x clamped to [-4, 4] (erf is +-1 in float32 beyond), within 7 ulp (4e-7) of torch.erf.
_ERF_LOWERING = tvm.ir.Op.get("tirx.erf").get_attr("default.FLowerIntrinsic")
_ERF_NUMERATOR = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
                  -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_ERF_DENOMINATOR = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
                    -7.37332916720468e-03, -1.42647390514189e-02)


def _erf_f32(arg, lanes=None):
    return _named(arg, _erf_of, lanes)


def _erf_of(x, _lanes):
    c = tirx.max(tirx.min(x, tirx.const(4.0, "float32")), tirx.const(-4.0, "float32"))
    # it overshoots +-1 by up to 2 ulp from |x| = 3.8 on: GELU's 1 + erf(x / sqrt 2) went below 0, and
    # GELU itself above 0, for x near -5.6
    ratio = tirx.max(tirx.min(_rational(c, _ERF_NUMERATOR, _ERF_DENOMINATOR), tirx.const(1.0, "float32")),
                     tirx.const(-1.0, "float32"))
    return tirx.Select(tirx.isnan(x), x, ratio)


tirx.op.register_intrin_lowering("tirx.erf", target="llvm", f=_in_float32(_erf_f32, _ERF_LOWERING), level=99)


# tanh the same way: TVM's llvm lowering computes both exp(2x) and exp(-2x) and divides twice (an
# arm for each sign; GELU-tanh ran 3.5x slower than GELU-erf). Float32 tanh here is Eigen's
# rational approximation (TVM's `topi.fast_tanh`): odd degree 13 over even degree 6 of x clamped to
# [-9, 9], exactly +-1 from |x| = 8.04 (torch: 9.01), within 5 float32 ulp of 1 below that (an exp form
# 1 - 2 / (exp(2|x|) + 1) is within 1 ulp there but doubled GELU-tanh's time); x itself below 4e-4.
_TANH_LOWERING = tvm.ir.Op.get("tirx.tanh").get_attr("llvm.FLowerIntrinsic")
_TANH_NUMERATOR = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11, 5.12229709037114e-08,
                   1.48572235717979e-05, 6.37261928875436e-04, 4.89352455891786e-03)
_TANH_DENOMINATOR = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03, 4.89352518554385e-03)
TANH_CLAMP = 9.0


def _tanh_f32(arg, lanes=None):
    return _named(arg, _tanh_of, lanes)


def _tanh_of(x, _lanes):
    f32 = lambda v: tirx.const(v, "float32")  # noqa: E731 - scalars broadcast to the lanes
    c = tirx.max(tirx.min(x, f32(TANH_CLAMP)), f32(-TANH_CLAMP))
    keep = tirx.Or(tirx.abs(x) < f32(0.0004), tirx.isnan(x))  # tanh(x) rounds to x; NaN stays NaN
    # it overshoots 1 by an ulp near 8.5
    ratio = tirx.max(tirx.min(_rational(c, _TANH_NUMERATOR, _TANH_DENOMINATOR), f32(1.0)), f32(-1.0))
    return tirx.Select(keep, x, ratio)


def _tanh_lowering(call):
    """float64 tanh is LLVM's own intrinsic (libm's tanh per lane): TVM's lowering, an exp formula,
    cancelled near 0 (tanh(1e-12) was 9.99978e-13, tanh(1e-20) 0, tanh(-0.0) +0)."""
    if str(call.ty.dtype.with_lanes(1)) == "float64":
        return tirx.call_llvm_pure_intrin(call.ty.dtype, "llvm.tanh", call.args[0])
    return _in_float32(_tanh_f32, _TANH_LOWERING)(call)


tirx.op.register_intrin_lowering("tirx.tanh", target="llvm", f=_tanh_lowering, level=99)


# log the same way (log_softmax, cross-entropy, softplus, mish, BCE: LLVM calls logf per lane): the
# Cephes logf scheme. x = 2^e * m with m in [sqrt(1/2), sqrt(2)) by integer operations on its bits
# (subnormals scaled by 2^23 first), log(m) = f - f^2/2 + f^3 P(f) for f = m - 1 (degree 8), plus
# e ln2 as hi + lo: within 1 ulp of torch.log, log(1) exactly 0. log2 and log10 add e in their own
# base (powers of 2 exact); log1p is Goldberg's log(u) * x / (u - 1), u = 1 + x, as codegen writes it.
_LOG_POLY = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1, 1.4249322787e-1,
             -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1)
_SQRT_HALF_BITS = 0x3F3504F3  # float32 sqrt(1/2): mantissas from here up to twice it share an exponent


def _log_parts(x, lanes: int):
    """(f, y, e) with log(x) = f + y + e ln2 for a finite x > 0: f = m - 1, y the polynomial rest."""
    f32 = lambda v: tirx.const(v, "float32")  # noqa: E731 - scalars broadcast to the lanes
    i32 = lambda v: tirx.const(v, "int32")  # noqa: E731
    fdt, idt = ("float32", "int32") if lanes == 1 else (f"float32x{lanes}", f"int32x{lanes}")
    subnormal = x < f32(1.1754943508222875e-38)
    bits = tirx.reinterpret(idt, tirx.Select(subnormal, x * f32(8388608.0), x))
    shifted = bits - i32(_SQRT_HALF_BITS)
    k = shifted >> i32(23)                                   # arithmetic: m below 1 borrows from e
    m = tirx.reinterpret(fdt, bits - (k << i32(23)))
    e = (k - tirx.Select(subnormal, lanes_of(i32(23), lanes), lanes_of(i32(0), lanes))).astype(fdt)
    f = m - f32(1.0)                                         # exact (Sterbenz)
    z = f * f
    p = f32(_LOG_POLY[0])
    for coefficient in _LOG_POLY[1:]:
        p = p * f + f32(coefficient)
    return f, p * f * z - f32(0.5) * z, e


def lanes_of(scalar, lanes: int):
    """`scalar` broadcast to `lanes` (a Select's arms need the lanes of its condition)."""
    return scalar if lanes == 1 else tirx.Broadcast(scalar, lanes)


def _log_specials(x, finite, lanes: int):
    """`finite` where 0 < x < inf, else torch's log there: -inf at +-0, NaN below 0, x at inf and NaN."""
    f32 = lambda v: tirx.const(v, "float32")  # noqa: E731
    positive = tirx.And(x > f32(0.0), x < f32(math.inf))
    special = tirx.Select(x == f32(0.0), lanes_of(f32(-math.inf), lanes),
                          tirx.Select(x < f32(0.0), lanes_of(f32(math.nan), lanes), x))
    return tirx.Select(positive, finite, special)


def _log_f32(arg, lanes: int):
    def log(x, lanes):
        f, y, e = _log_parts(x, lanes)
        return _log_specials(x, (y + e * tirx.const(-2.12194440e-4, "float32")) + f
                             + e * tirx.const(0.693359375, "float32"), lanes)
    return _named(arg, log, lanes)


def _log_in_base(hi: float, lo: float, e_hi: float, e_lo: float):
    """log_b as (f + y)(hi + lo) + e (e_hi + e_lo): hi, e_hi short enough that their products are exact."""
    def in_base(arg, lanes: int):
        def log(x, lanes):
            f, y, e = _log_parts(x, lanes)
            c = lambda v: tirx.const(v, "float32")  # noqa: E731
            r = y * c(lo) + f * c(lo) + y * c(hi) + f * c(hi)
            return _log_specials(x, r + e * c(e_lo) + e * c(e_hi), lanes)
        return _named(arg, log, lanes)
    return in_base


# log2: e + (f + y)(1 + (log2(e) - 1)); log10: e log10(2) and log10(e) each split hi + lo (Cephes)
_log2_f32 = _log_in_base(1.0, 0.44269504088896340736, 1.0, 0.0)
_log10_f32 = _log_in_base(4.3359375e-1, 7.00731903251827651129e-4, 3.0078125e-1, 2.48745663981195213739e-4)


def _log1p_f32(arg, lanes: int):
    def log1p(x, lanes):
        u = tirx.Var("u", x.ty.dtype)  # named: TVM's simplifier would fold (x + 1) - 1 to x
        r = _log_f32(u, lanes) * (x / (u - tirx.const(1.0, "float32")))
        r = tirx.Select(u == tirx.const(1.0, "float32"), x, r)      # |x| below 1's ulp
        return tirx.Let(u, x + tirx.const(1.0, "float32"), tirx.Select(u == tirx.const(math.inf, "float32"), u, r))
    return _named(arg, log1p, lanes)


_LOG_LOWERINGS = {
    "tirx.log": (_log_f32, "llvm"), "prim.log2": (_log2_f32, "llvm"), "tirx.log10": (_log10_f32, "llvm"),
    "tirx.log1p": (_log1p_f32, "default"),   # TVM has no llvm lowering of log1p: libm's log1pf
}
for _name, (_fast_log, _tvm_target) in _LOG_LOWERINGS.items():
    tirx.op.register_intrin_lowering(
        _name, target="llvm", level=99,
        f=_in_float32(_fast_log, tvm.ir.Op.get(_name).get_attr(f"{_tvm_target}.FLowerIntrinsic")))


class fast_exp:  # noqa: N801 - used as `with schedules.fast_exp():`
    """While active on this thread, LLVM builds lower float32 exp, erf, tanh, log (log2, log10,
    log1p), and vectorised sin and cos to the vectorisable polynomials."""

    def __enter__(self):
        self.before = getattr(_fast, "on", False)
        _fast.on = True

    def __exit__(self, *exc):
        _fast.on = self.before


# sin and cos the same way (LLVM calls sinf/cosf per lane; Inductor uses Sleef's vector forms): x = n pi/2
# + r by Cody-Waite with pi/2 in four parts (Sleef's split of pi, halved): n times each of the first
# three is exact and so is each subtraction but the last, so r keeps its bits near multiples of pi/2,
# where sin and cos are tiny. Then Cephes' sinf and cosf polynomials on [-pi/4, pi/4], the one of
# the quadrant n mod 4, its sign flipped in quadrants 2 and 3. Within 2 ulp of torch (1 near the
# zeros) for |x| up to TRIG_BOUND (at 5e4 the zeros were 23 ulp off); a vector with a finite lane
# beyond it takes TVM's lowering (libm per lane) in a branch.
_PIO2_PARTS = (1.5703125, 4.8351287841796875e-4, 3.1385570764541625977e-7, 6.0771006282767103810e-11)
_SIN_POLY = (-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1)
_COS_POLY = (2.443315711809948e-5, -1.388731625493765e-3, 4.166664568298827e-2)
TRIG_BOUND = 3.0e4


def _trig_fast(x, cosine: bool, lanes: int):
    """sin or cos of x where |x| <= TRIG_BOUND, NaN at inf and NaN (0 at finite lanes beyond, which
    the caller's branch never reads)."""
    f32 = lambda v: tirx.const(v, "float32")  # noqa: E731 - scalars broadcast to the lanes
    i32 = lambda v: tirx.const(v, "int32")  # noqa: E731
    fdt, idt = ("float32", "int32") if lanes == 1 else (f"float32x{lanes}", f"int32x{lanes}")
    inside = tirx.abs(x) <= f32(TRIG_BOUND)                  # false for NaN
    c = tirx.Select(inside, x, lanes_of(f32(0.0), lanes))  # keeps the int conversion defined
    n = tirx.floor(c * f32(0.6366197723675814) + f32(0.5))
    r = c
    for part in _PIO2_PARTS:
        r = r - n * f32(part)
    z = r * r
    s, k = f32(_SIN_POLY[0]), f32(_COS_POLY[0])
    for a, b in zip(_SIN_POLY[1:], _COS_POLY[1:]):
        s, k = s * z + f32(a), k * z + f32(b)
    s = s * z * r + r
    k = k * z * z - f32(0.5) * z + f32(1.0)
    q = n.astype(idt) + i32(1 if cosine else 0)               # cos x = sin(x + pi/2)
    v = tirx.Select((q & i32(1)) == i32(1), k, s)
    v = tirx.reinterpret(fdt, tirx.reinterpret(idt, v) ^ ((q & i32(2)) << i32(30)))
    if not cosine:
        v = tirx.Select(x == f32(0.0), x, v)                   # sin(-0) is -0
    return tirx.Select(inside, v, x - x)


def _trig_f32(cosine: bool, tvms):
    """The fast sin or cos of a vector, in a branch with TVM's lowering `tvms` for vectors with a
    finite lane beyond TRIG_BOUND (the reduction loses bits there; a select would call libm always).
    Scalars keep `tvms`: LLVM if-converts the branch of a loop it vectorises itself (llvm.sin is
    speculatable), calling libm for every lane again (cos * sigmoid over symbolic n: 12 -> 13 ms)."""
    op = tirx.cos if cosine else tirx.sin

    def trig(arg, lanes: int):
        def compute(x, lanes):
            f32 = lambda v: tirx.const(v, "float32")  # noqa: E731
            huge = tirx.And(tirx.abs(x) > f32(TRIG_BOUND), tirx.abs(x) < f32(math.inf))
            any_huge = tirx.call_llvm_pure_intrin("bool", "llvm.vector.reduce.or", huge)
            return tirx.if_then_else(any_huge, tvms(op(x)), _trig_fast(x, cosine, lanes))
        return tvms(op(arg)) if lanes == 1 else _named(arg, compute, lanes)
    return trig


_TRIG_LOWERINGS = {name: (cosine, tvm.ir.Op.get(name).get_attr("llvm.FLowerIntrinsic"))
                   for name, cosine in (("tirx.sin", False), ("tirx.cos", True))}
for _name, (_cosine, _tvm_trig) in _TRIG_LOWERINGS.items():
    tirx.op.register_intrin_lowering(_name, target="llvm", level=99,
                                     f=_in_float32(_trig_f32(_cosine, _tvm_trig), _tvm_trig))


# TVM's vectoriser has no vector form of erf, log1p, rsqrt, nearbyint or isnan (they lack
# `TVectorizable`): a vectorised loop that calls one is run a lane at a time, loads and stores included,
# and LLVM vectorised that loop again only at times (not where it wrote a workspace buffer: an erf
# chain over 3 x 50,257 kept in one took 3.0 ms, 0.6 vectorised). Before the vectoriser runs, CPU
# kernels get each such call in the form its llvm lowering would give it later, made of operations
# the vectoriser has (isnan as a test of the bits), so the same arithmetic runs a vector at a time.
def _float32_form(fast):
    """`fast(x, 1)` for a float32 call, in float32 and rounded once for a float16 one (as the llvm
    lowering `_in_float32` does); other dtypes keep the call."""
    def form(call):
        dtype = call.ty.dtype
        if str(dtype) == "float32":
            return fast(call.args[0], 1)
        if str(dtype) == "float16":
            return tirx.Cast("float16", fast(tirx.Cast("float32", call.args[0]), 1))
        return call
    return form


# the bits of +inf (all exponent bits set) of each float type: a NaN's bits, its sign cleared, are
# above them. A float compare would not do: TVM turns `not x == x` into `x != x`, which LLVM gets as
# an ordered compare, false for NaN.
_INF_BITS = {"float16": 0x7C00, "bfloat16": 0x7F80, "float32": 0x7F800000, "float64": 0x7FF0000000000000}


def isnan_form(call):
    """isnan(x) as an integer test of x's bits, which the vectoriser has (the call itself for a type
    not in _INF_BITS)."""
    x = call.args[0]
    dtype = str(x.ty.dtype if hasattr(x, "ty") else x.dtype)
    if dtype not in _INF_BITS:
        return call
    bits = tvm.DataType(dtype).bits
    magnitude = tirx.reinterpret(f"int{bits}", x) & tirx.const((1 << (bits - 1)) - 1, f"int{bits}")
    return magnitude > tirx.const(_INF_BITS[dtype], f"int{bits}")


_VECTOR_FORMS = {
    "tirx.erf": _float32_form(_erf_f32),
    "tirx.log1p": _float32_form(_log1p_f32),
    "tirx.rsqrt": lambda call: tirx.const(1.0, str(call.ty.dtype)) / tirx.sqrt(call.args[0]),
    "tirx.nearbyint": lambda call: _nearbyint_form(call),
}


# 1.5 * 2^23: a float32 of magnitude below 2^22 plus it has no bits below 1, so the addition rounds
# it to an integer, half to even; every float16 is that small
_ROUNDER = 12582912.0


def _nearbyint_form(call):
    """LLVM's nearbyint (its lowering). A float16 one in float32 by adding and taking away _ROUNDER,
    its sign put back (-0.3 rounds to -0.0): LLVM narrows nearbyint of a widened half back to a half
    nearbyint, which without native halves it runs a lane at a time (round over 3.4 M halves: 2.0 ms,
    eager 0.45). The addition goes through a bit cast there and back, which keeps TVM's simplifier
    from folding `(x + c) - c` to x."""
    dtype = str(call.ty.dtype)
    if dtype != "float16":
        return tirx.call_llvm_pure_intrin(dtype, "llvm.nearbyint", call.args[0])
    x = tirx.Cast("float32", call.args[0])
    rounder = tirx.const(_ROUNDER, "float32")
    shifted = tirx.reinterpret("float32", tirx.reinterpret("int32", x + rounder))
    sign = tirx.reinterpret("int32", x) & tirx.const(-(1 << 31), "int32")
    rounded = tirx.reinterpret("float32", tirx.reinterpret("int32", shifted - rounder) | sign)
    return tirx.Cast("float16", rounded)


def vector_math(func: tirx.PrimFunc) -> tirx.PrimFunc:
    """A CPU kernel with its erf, log1p, rsqrt, nearbyint and isnan calls in vectorisable form (see
    above); others, and any function while babytriton is not building (`fast_exp` off), as they are."""
    target = func.attrs.get("target") if func.attrs is not None else None
    if not getattr(_fast, "on", False) or target is None or target.kind.name != "llvm":
        return func

    def rewrite(call):
        form = _VECTOR_FORMS.get(call.op.name) if isinstance(call.op, tvm.ir.Op) else None
        return form(call) if form is not None else call

    def isnan(call):
        return isnan_form(call) if isinstance(call.op, tvm.ir.Op) and call.op.name == "tirx.isnan" else call

    def forms(node):
        return tvm_ffi.structural_map(tvm_ffi.structural_map(node, (tvm.ir.Call, rewrite)), (tvm.ir.Call, isnan))

    def store(node):  # (one that stores or reads bfloat16 values keeps its calls: `_bfloat16`)
        return node if _bfloat16(node) else forms(node)
    if _bfloat16(func.body) or any(str(getattr(getattr(p, "ty", None), "dtype", "")).startswith("bfloat16")
                                   for p in func.params):
        body = tvm_ffi.structural_map(func.body, (tirx.BufferStore, store))
    else:
        body = forms(func.body)
    return func if body.same_as(func.body) else func.with_body(body)


def _bfloat16(store) -> bool:
    """Whether a store (or a kernel's body) writes, loads or converts bfloat16 values. The forms'
    `let`s would meet TVM's bfloat16 legalization, which names a rounded value twice: the same `let`
    twice, which the vectoriser refuses (and its reads in a `let` value are skipped,
    `passes.bfloat16_reads_in_binds`). A kernel's other stores take the forms (p121: a sine of float32 values after a bfloat16 GELU,
    kept in its own block, had called the scalar sinf lane by lane: 1.0 ms where eager took 0.35)."""
    found = []

    def visit(node):
        dtype = node.ty.dtype if hasattr(node, "ty") else node.dtype if hasattr(node, "dtype") else node.value.dtype
        if str(dtype).startswith("bfloat16"):
            found.append(node)
    tvm_ffi.structural_walk(store, [(tvm.ir.TensorLoad, visit), (tirx.Cast, visit)])
    written = store.buffer.ty.dtype if isinstance(store, tirx.BufferStore) else ""
    return bool(found) or str(written).startswith("bfloat16")
