"""if / elif / else, for and while loops, break / continue / return: each form checked against the
same Python function run eagerly on torch, for inputs that take different branches and trip counts."""
import inspect

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import babytriton as bt

V4 = bt.Tensor((4,), "float32")
S = bt.Tensor((), "float32")
X = torch.tensor([-1.5, -0.5, 0.5, 1.5])
SM90 = {"kind": "cuda", "arch": "sm_90"}
INTERNALS = ("Traceback", "tvm", "TVM", ".cc", "babytriton/", "InternalError", "relax.")


def same(out, expected):
    """The compiled result against the eager one: tensors exactly as torch, numbers as 0-d tensors."""
    if isinstance(expected, tuple):
        assert isinstance(out, tuple) and len(out) == len(expected)
        for o, e in zip(out, expected):
            same(o, e)
    elif isinstance(expected, torch.Tensor):
        torch.testing.assert_close(out, expected)
    else:
        assert isinstance(out, torch.Tensor) and out.ndim == 0
        assert out.item() == pytest.approx(expected)


def check(f: bt.JITFunction, *args):
    same(f(*args), f.__wrapped__(*args))


def compile_error(fn, *args, **options) -> bt.CompilationError:
    with pytest.raises(bt.CompilationError) as info:
        bt.jit(fn, **options)(*args)
    err = info.value
    for word in INTERNALS:
        assert word not in str(err).replace(err.source_line or "", ""), (word, str(err))
    return err


def line_of(fn, marker: str) -> int:
    lines, start = inspect.getsourcelines(fn)
    return start + next(i for i, line in enumerate(lines) if marker in line)


def functions(stage: str) -> list[str]:
    return [line.split("def ")[1].split("(")[0] for line in stage.splitlines() if line.strip().startswith("def ")]


# --------------------------------------------------------------------------------------------------
# if decided at compile time: only the branch taken is generated
# --------------------------------------------------------------------------------------------------

@bt.jit
def static_if(x, k: bt.constexpr):
    if k > 1 and x.shape[0] > 2:
        y = x * k
    elif k == 1:
        y = -x
    else:
        y = x + 100
    return y


@pytest.mark.parametrize("k", [3, 1, 0])
def test_compile_time_conditions_pick_one_branch(k):
    check(static_if, X, k)
    relax = static_if.compile(X, k).stages["relax"]
    assert "if " not in relax
    assert ("R.multiply" in relax, "R.negative" in relax, "R.add" in relax) == (k == 3, k == 1, k == 0)


def test_static_shape_condition_and_python_constant():
    @bt.jit
    def f(x: bt.Tensor((2, 3), "float32")):
        if x.shape[0] > 4 or DEBUG:
            return x * 0
        return x + 1

    x = torch.randn(2, 3)
    torch.testing.assert_close(f(x), x + 1)
    assert "if " not in f.compile().stages["relax"]


DEBUG = False


# --------------------------------------------------------------------------------------------------
# if decided at run time: a Relax If with both branches
# --------------------------------------------------------------------------------------------------

@bt.jit
def by_flag(x: V4, flag: bool):
    if flag:
        y = x * 2
    else:
        y = x - 1
    return y


def test_bool_parameter_condition():
    for flag in (True, False):
        check(by_flag, X, flag)
    assert by_flag.cache_info()["compilations"] == 1
    assert "if flag:" in by_flag.compile(X, True).stages["relax"]


def test_int_parameter_is_true_when_nonzero():
    @bt.jit
    def f(x: V4, n: int):
        if n:
            x = x * n
        return x

    for n in (0, 3, -2):
        check(f, X, n)


@bt.jit
def elif_chain(x: V4, s: S):
    if s > 1:
        y = x * 3
    elif s > 0:
        y = x + 10
    elif s > -1:
        y = -x
    else:
        y = x
    return y


@pytest.mark.parametrize("s", [2.0, 0.5, -0.5, -3.0])
def test_elif_chain_on_a_0d_tensor(s):
    check(elif_chain, X, torch.tensor(s))


def test_if_without_else_and_nested_ifs():
    @bt.jit
    def f(x: V4, a: bool, b: bool):
        y = x
        if a:
            if b:
                y = y * 2
            else:
                y = y * 3
            z = y + 1
        else:
            z = y - 1
        if b:
            z = z * 10
        return z

    for a in (True, False):
        for b in (True, False):
            check(f, X, a, b)


def test_merged_numbers_become_tensors_as_torch_would_type_them():
    @bt.jit
    def f(x: V4, n: int, s: S):
        k = 1            # int on one path, int on the other: int64
        scale = 0.5      # float and the 0-d float32 tensor `s`: float32
        pair = (x, 2)    # tuples merge element by element
        if n > 0:
            k = n
            scale = s
            pair = (x * 2, 3)
        return x * k * scale + pair[0] * pair[1], k, scale

    for n in (0, 4):
        check(f, X, n, torch.tensor(3.0))
    out = f(X, 4, torch.tensor(3.0))
    assert out[1].dtype == torch.int64 and out[2].dtype == torch.float32


def test_conditions_from_reductions():
    @bt.jit
    def sign_flip(x: V4):
        if x.sum() > 0:
            y = x * 2
        else:
            y = -x
        return y

    @bt.jit
    def shrink(x: bt.Tensor(("n",), "float32")):
        k = 0
        while (x * x).sum() > 1e-3:
            x = x * 0.5
            k += 1
        return x, k

    for x in (X, -X - 1):
        check(sign_flip, x)
    for x in (torch.randn(5), torch.zeros(3)):
        check(shrink, x)


def test_symbolic_shape_condition_is_decided_at_run_time():
    @bt.jit
    def f(x: bt.Tensor(("n",), "float32")):
        if x.shape[0] > 4:
            y = x * 2
        else:
            y = x + 1
        if x.shape[0] >= 0:  # always true for a size: decided at compile time
            y = y - 1
        return y

    for n in (3, 6):
        check(f, torch.randn(n))
    relax = f.compile(torch.randn(3)).stages["relax"]
    assert "if n > 4:" in relax and relax.count("if ") == 1


def test_dataflow_blocks_around_an_if():
    @bt.jit
    def f(x: V4, s: S):
        t = x * 2
        if s > 0:
            y = t + 1
        else:
            y = t - 1
        return y * 3

    text = f.compile().stages["ConvertToDataflow"]
    body = text[text.index("def f("):].splitlines()
    kinds = [line.strip().split()[0] for line in body if line.strip().startswith(("with R.dataflow", "if ", "else"))]
    # before the If, inside each branch, after it; the If itself stays outside dataflow blocks
    assert kinds == ["with", "if", "with", "else:", "with", "with"], kinds
    for s in (1.0, -1.0):
        check(f, X, torch.tensor(s))


# --------------------------------------------------------------------------------------------------
# return inside branches
# --------------------------------------------------------------------------------------------------

def test_return_in_both_branches():
    @bt.jit
    def f(x: V4, n: int):
        if n > 2:
            return x * n
        else:
            return x - n

    for n in (0, 5):  # both branches allocate the same sizes: the memory-planning workaround matters
        check(f, X, n)


def test_early_returns_and_the_rest_of_the_function():
    @bt.jit
    def f(x: V4, n: int):
        if n > 2:
            return x * n
        y = x + 1
        if n < 0:
            if n < -5:
                return y * 0
            y = y * 2
        return y - n

    for n in (-7, -3, 0, 5):
        check(f, X, n)


# A condition decided at run time (a `bool` argument the code needs at compile time is specialised, as
# torch.compile does, and then only the path taken is compiled, as Python runs it).
def missing_else_return(x: V4):
    if x.sum() > 0:  # error
        return x * 2


def missing_then_return(x: V4):
    if x.sum() > 0:  # error
        y = x
    else:
        return x * 2


@pytest.mark.parametrize("fn, path", [(missing_else_return, "`if` branch"),
                                      (missing_then_return, "`else` path")])
def test_a_path_without_return_is_an_error(fn, path):
    err = compile_error(fn, X)
    assert err.lineno == line_of(fn, "# error")
    assert "not every path returns a value" in err.message and path in err.message


# --------------------------------------------------------------------------------------------------
# scopes and the errors of merging two paths
# --------------------------------------------------------------------------------------------------

def one_branch(x: V4, flag: bool):
    if flag:
        y = x * 2
    return y  # error


def test_name_defined_in_one_branch_fails_at_its_use():
    err = compile_error(one_branch, X, True)
    assert (err.lineno, err.col) == (line_of(one_branch, "# error"), 11)
    assert "'y' is not defined on every path" in err.message and "decided at run time" in err.message
    assert f"line {line_of(one_branch, 'if flag')}" in err.message


def test_name_defined_in_one_branch_but_unused_is_fine():
    @bt.jit
    def f(x: V4, flag: bool):
        if flag:
            unused = x * 2  # noqa: F841 - never read
            y = x + 1
        else:
            y = x - 1
        return y

    for flag in (True, False):
        check(f, X, flag)


def test_both_paths_giving_a_name_one_value_still_bind_it():
    """`x ** 1` is `x` itself: both paths of the run-time `if` leave `y` holding the parameter (fuzz
    8000026339 reported "name 'y' is not defined" after such an `if`)."""
    @bt.jit
    def f(x: V4):
        if x.min() < 0:
            y = x ** 1
        else:
            y = x
        return y * 2

    for x in (X, X + 5):
        torch.testing.assert_close(f(x), (x ** 1 if x.min() < 0 else x) * 2)


def dtype_clash(x: V4):
    if x.sum() > 0:  # error
        y = x
    else:
        y = x > 0
    return y


def shape_clash(x: V4, s: S):
    if x.sum() > 0:  # error
        y = x
    else:
        y = s
    return y


def shape_by_flag(x: V4, s: S, flag: bool):
    if flag:
        y = x
    else:
        y = s
    return y


def test_branches_disagreeing_on_dtype_or_shape():
    err = compile_error(dtype_clash, X)
    assert err.lineno == line_of(dtype_clash, "# error")
    assert "'y' is a float32 tensor of shape (4,) on one path" in err.message and "bool" in err.message
    err = compile_error(shape_clash, X, torch.tensor(1.0))
    assert "'y' has shape (4,) on one path of this `if` and () on the other" in err.message


def test_a_bool_parameter_deciding_shapes_is_specialised():
    """`flag: bool` whose paths disagree compiles a version per value, as torch.compile specialises it."""
    f, s = bt.jit(shape_by_flag), torch.tensor(1.0)
    torch.testing.assert_close(f(X, s, True), X)
    torch.testing.assert_close(f(X, s, False), s)


def vector_condition(x: V4):
    if x > 0:  # error
        return x
    return -x


def test_a_condition_with_dimensions_is_an_error():
    err = compile_error(vector_condition, X)
    assert err.lineno == line_of(vector_condition, "# error")
    assert "single value (a 0-d tensor)" in err.message and "shape (4,)" in err.message


# --------------------------------------------------------------------------------------------------
# for loops: unrolled or recursive, the same numbers
# --------------------------------------------------------------------------------------------------

def ranges(x: V4):
    acc = x * 0
    for i in range(5):
        acc = acc + x * i
    for i in range(2, 9):
        acc = acc * 0.5 + i
    for i in range(10, -3, -4):
        acc = acc - i
    return acc


@pytest.mark.parametrize("unroll", [0, 3, 16])
def test_range_forms_unrolled_or_recursive(unroll):
    f = bt.jit(ranges, unroll=unroll)
    check(f, X)
    names = functions(f.compile().stages["relax"])
    assert len(names) == 1 + 2 * sum(n > unroll for n in (5, 7, 4)), names


def test_unrolled_loop_variable_is_a_python_int():
    @bt.jit
    def f(x: bt.Tensor((2, 3, 4), "float32")):
        total = 0
        for i in range(x.ndim):
            total = total + x.shape[i]
        for d in x.shape:  # loops over tuples unroll too
            total = total * d
        return x * total

    x = torch.randn(2, 3, 4)
    torch.testing.assert_close(f(x), x * ((2 + 3 + 4) * 24))


@bt.jit
def runtime_count(x: V4, n: int, start: int):
    acc = x * 0
    k = 0
    for i in range(start, n, 3):
        acc = acc + x * i
        k += 1
    return acc, k


@pytest.mark.parametrize("n, start", [(0, 0), (1, 0), (7, 0), (7, 5), (40, -9), (-3, 2)])
def test_runtime_trip_count(n, start):
    check(runtime_count, X, n, start)


def test_recursive_loop_function_and_its_body():
    relax = runtime_count.compile(X, 1, 0).stages["relax"]
    assert functions(relax) == ["runtime_count", "runtime_count_loop0", "runtime_count_loop0_body"]
    assert "cls.runtime_count_loop0(lo, mid" in relax and "cls.runtime_count_loop0(mid, hi" in relax


def test_runtime_bound_from_a_0d_tensor_and_a_symbolic_size():
    @bt.jit
    def f(x: bt.Tensor(("n",), "float32"), m: bt.Tensor((), "int32")):
        acc = x
        for i in range(m):
            acc = acc * 0.5
        for j in range(x.shape[0]):
            acc = acc + j
        return acc

    for n, m in ((3, 0), (5, 4)):
        check(f, torch.randn(n), torch.tensor(m, dtype=torch.int32))


@settings(max_examples=10, deadline=None)
@given(rows=st.integers(0, 5), skip=st.integers(0, 20))
def test_carried_shape_built_on_a_size_survives_a_run_time_if(rows, skip):
    """A carried (2 * n, 1) tensor through a recursive loop whose body has a run-time `if` (`continue`):
    the trial of the body declares n like the loop functions do, or the `If` erased the shape to
    (None, None) and the loop was refused (fuzz 8000026243)."""
    @bt.jit
    def f(x: bt.Tensor(("n", 1), "float32"), skip: int):
        y = bt.concat((x, x * 2), axis=0)
        for i in range(19):
            if i == skip:
                continue
            y = bt.maximum(y, y * 0.5) + 0.25
        return y

    x = torch.randn(rows, 1)
    want = torch.cat((x, x * 2), 0)
    for i in range(19):
        if i == skip:
            continue
        want = torch.maximum(want, want * 0.5) + 0.25
    torch.testing.assert_close(f(x, skip), want)


def test_empty_argmin_in_code_that_may_not_run():
    """argmin of a statically empty axis is an error only where it runs, as in torch: in a recursive
    loop's body or a run-time branch it is checked when it runs (fuzz 8000025603); where it surely
    runs, compiling fails (see test_empty_tensors)."""
    @bt.jit
    def in_loop(x: bt.Tensor((0,), "int16"), n: int):
        y = x * 1
        for i in range(n):
            y = y + (bt.argmin(x) - x)
        return y

    @bt.jit
    def in_branch(x: bt.Tensor((0,), "float32"), s: S):
        y = x * 1
        if s > 0:
            y = y + bt.argmax(x)
        return y

    def torch_in_loop(x, n):
        y = x * 1
        for i in range(n):
            y = y + (torch.argmin(x) - x)
        return y

    def torch_in_branch(x, s):
        y = x * 1
        if s > 0:
            y = y + torch.argmax(x)
        return y

    x, xf = torch.zeros(0, dtype=torch.int16), torch.zeros(0)
    for n in (-2, 0):
        torch.testing.assert_close(in_loop(x, n), torch_in_loop(x, n))
    torch.testing.assert_close(in_branch(xf, torch.tensor(-1.0)), torch_in_branch(xf, torch.tensor(-1.0)))
    for run, run_torch, args, line in ((in_loop, torch_in_loop, (x, 3), "y = y + (bt.argmin"),
                                       (in_branch, torch_in_branch, (xf, torch.tensor(1.0)), "y = y + bt.argmax")):
        with pytest.raises((IndexError, RuntimeError)):
            run_torch(*args)
        with pytest.raises(RuntimeError, match=r"cannot reduce axis 0 of a tensor of shape \(0,\)") as info:
            run(*args)
        assert f"line {line_of(run.__wrapped__, line)} " in str(info.value)


# A loop whose results are unused is a call nothing reads: the check in it must still run (fuzz 41000218)
@bt.jit
def unused_while_max(x: bt.Tensor(("n",), "float32"), y):
    v = x
    c = torch.zeros((), dtype=torch.int64)
    while c < 3:
        v = v + v.max()
        c = c + 1
    return y + 1


@bt.jit
def unused_for_mismatch(x: bt.Tensor(("n",), "float32"), t: int, y):
    v = x
    for i in range(t):
        v = v * 0.5 + x[:2]
    return y + 1


@bt.jit
def unused_loop_in_a_branch(x: bt.Tensor(("n",), "float32"), s: S, t: int, y):
    v = x
    if s > 0:
        for i in range(2):
            for j in range(t):
                v = v - v.amax()
    return y * 2


@bt.jit
def unused_nested_loops(x: bt.Tensor(("n",), "float32"), t: int, y):
    v = x
    c = torch.zeros((), dtype=torch.int64)
    while c < 2:
        for j in range(t):
            v = v - v.amin()
        c = c + 1
    return y - 1


@settings(max_examples=12, deadline=None)
@given(n=st.integers(0, 3), t=st.integers(0, 2), s=st.sampled_from([-1.0, 1.0, 2.0]))
def test_check_in_an_unused_loop_still_raises(n, t, s):
    """A run-time size check in a loop whose results nothing reads raises when, and only when, torch
    does, naming the user's line: a loop function that can raise is impure, so its call is not dead
    code (fuzz 41000218: a `while` over an empty tensor's max returned a value)."""
    x, y, st_ = torch.randn(n), torch.randn(2), torch.tensor(s)
    for fn, args, line in ((unused_while_max, (x, y), "v = v + v.max()"),
                           (unused_for_mismatch, (x, t, y), "v = v * 0.5 + x[:2]"),
                           (unused_loop_in_a_branch, (x, st_, t, y), "v = v - v.amax()"),
                           (unused_nested_loops, (x, t, y), "v = v - v.amin()")):
        try:
            want = fn.__wrapped__(*args)
        except (IndexError, RuntimeError):
            with pytest.raises(RuntimeError) as info:
                fn(*args)
            assert f"line {line_of(fn.__wrapped__, line)} " in str(info.value), str(info.value)
        else:
            same(fn(*args), want)


def test_unused_loop_that_cannot_raise_is_still_removed():
    """The fast path stays: a loop function with no check is pure, so an unused loop is dead code."""
    @bt.jit
    def unused(x: bt.Tensor(("n",), "float32"), y):
        v = x
        c = torch.zeros((), dtype=torch.int64)
        while c < 3:
            v = v * 0.5 + 1
            c = c + 1
        return y + 1

    x, y = torch.randn(3), torch.randn(2)
    kernel = unused.compile(x, y)
    assert "unused_loop0" in kernel.stages["relax"]
    assert "loop0" not in kernel.stages["FuseOps"]
    same(unused(x, y), y + 1)
    checked = unused_while_max.compile(x, y)
    assert "pure=False" in checked.stages["relax"] and "unused_while_max_loop0_grow" in checked.stages["FuseOps"]


def test_peeled_first_iteration_settles_numbers_and_defines_names():
    @bt.jit(unroll=2)
    def f(x: V4):
        acc = 0.0
        for i in range(1, 9, 2):
            t = x * i
            acc = acc + t  # a number that becomes a vector in the first iteration
        return acc, t, i   # defined by the loop, read after it

    check(f, X)


# --------------------------------------------------------------------------------------------------
# while loops
# --------------------------------------------------------------------------------------------------

@bt.jit
def doubling(x: V4, s: S):
    y = x
    while s < 100:
        s = s * 2
        y = y + s
    return y, s


@pytest.mark.parametrize("s", [1.0, 50.0, 200.0])
def test_while_on_a_tensor_condition(s):
    check(doubling, X, torch.tensor(s))


def test_while_on_python_values_unrolls_then_recurses():
    def counting(x: V4):
        k = 0
        y = x
        while k < 40:
            y = y * 1.1 + k
            k += 3
        return y, k

    small = bt.jit(counting, unroll=64)
    check(small, X)
    assert functions(small.compile().stages["relax"]) == ["counting"]
    mixed = bt.jit(counting, unroll=3)
    check(mixed, X)
    assert "counting_loop0_grow" in functions(mixed.compile().stages["relax"])


# --------------------------------------------------------------------------------------------------
# nesting, break, continue, else
# --------------------------------------------------------------------------------------------------

def test_nested_loops_with_ifs_and_ifs_with_loops():
    @bt.jit
    def f(x: V4, n: int, m: int, flag: bool):
        acc = x * 0
        for i in range(n):
            for j in range(m):
                if (i + j) % 2 == 0:
                    acc = acc + x * j
                else:
                    acc = acc - i
        if flag:
            for i in range(3):
                acc = acc * 2
        else:
            k = 0
            while k < n:
                acc = acc + k
                k = k + 1
        return acc

    for n, m in ((0, 3), (3, 0), (3, 4), (5, 2)):
        for flag in (True, False):
            check(f, X, n, m, flag)


def breaking(x: V4, n: int, limit: float):
    acc = x * 0
    for i in range(n):
        if i == 3:
            continue
        acc = acc + x * i
        if i > limit:
            break
    else:
        acc = acc * 100
    return acc


def breaking_fixed(x: V4, n: bt.constexpr, limit: float):
    acc = x * 0
    for i in range(n):
        if i == 3:
            continue
        acc = acc + x * i
        if i > limit:
            break
    else:
        acc = acc * 100
    return acc


def test_break_continue_and_else_unrolled_and_recursive():
    recursive = bt.jit(breaking)
    unrolled = bt.jit(breaking_fixed, unroll=64)
    recursive_fixed = bt.jit(breaking_fixed, unroll=0)
    for n in (0, 2, 5, 12):
        for limit in (-1.0, 2.0, 4.5, 100.0):
            expected = breaking(X, n, limit)
            torch.testing.assert_close(recursive(X, n, limit), expected)
            torch.testing.assert_close(unrolled(X, n, limit), expected)
            torch.testing.assert_close(recursive_fixed(X, n, limit), expected)
    assert recursive.cache_info()["compilations"] == 1
    assert functions(unrolled.compile(X, 12, 1.0).stages["relax"]) == ["breaking_fixed"]


@settings(max_examples=25, deadline=None)
@given(n=st.integers(-2, 30), limit=st.floats(-2, 40), start=st.floats(0, 300))
def test_break_and_while_match_python(n, limit, start):
    torch.testing.assert_close(_breaking(X, n, limit), breaking(X, n, limit))
    s = torch.tensor(start)  # s = s * 2 + 1 grows from any start >= 0: the loop ends
    same(_while_break(X, s), _while_break.__wrapped__(X, s))


_breaking = bt.jit(breaking)


@bt.jit
def _while_break(x: V4, s: S):
    y = x
    k = 0
    while s < 50:
        s = s * 2 + 1
        k += 1
        if s > 30:
            break
        y = y + s
    else:
        y = y * 0
    return y, s, k


def test_return_inside_an_unrolled_loop():
    @bt.jit
    def f(x: V4, flag: bool):
        for i in range(3):
            if flag:
                return x * i
            x = x + 1
        return x

    for flag in (True, False):
        check(f, X, flag)


# --------------------------------------------------------------------------------------------------
# loop errors
# --------------------------------------------------------------------------------------------------

# Trip counts known only at run time (a symbolic size): an `int` argument as the count is specialised
# where the loop needs it, and the loop unrolled, as Python runs it.
def grows(x: bt.Tensor(("n",), "float32")):
    acc = 0.0
    for i in range(x.shape[0]):  # error
        acc = acc + x
    return acc


def changes_dtype(x: bt.Tensor(("n",), "float32")):
    y = x > 0
    for i in range(x.shape[0]):  # error
        y = x * i
    return y


def test_a_loop_that_changes_a_shape_or_dtype():
    err = compile_error(grows, X)
    assert err.lineno == line_of(grows, "# error")
    assert "'acc' starts as the number 0.0 and becomes a float32 tensor of shape (n,)" in err.message
    assert "acc = x * 0" in err.message
    err = compile_error(changes_dtype, X)
    assert "'y' changes from a bool tensor of shape (n,) to a float32 tensor" in err.message


def local_after(x: V4, n: int):
    for i in range(n):
        t = x * i
    return t  # error


def read_before(x: V4, n: int):
    acc = x
    for i in range(n):
        if i > 0:
            acc = acc + prev  # error  # noqa: F821
        prev = x * i
    return acc


def return_in_loop(x: V4, n: int):
    for i in range(n):
        if i > 2:
            return x  # error
    return x * 2


def forever(x: V4):
    while True:  # error
        x = x + 1
    return x


@pytest.mark.parametrize("fn, args, words", [
    (local_after, (X, 3), "'t' is assigned only inside the loop"),
    (read_before, (X, 3), "'prev' is read before it is assigned in this iteration"),
    (return_in_loop, (X, 3), "`return` inside a loop that is compiled as a recursive function"),
    (forever, (X,), "this `while` loop never ends"),
])
def test_loop_errors_point_at_the_line(fn, args, words):
    err = compile_error(fn, *args)
    assert err.lineno == line_of(fn, "# error")
    assert words in err.message


@pytest.mark.parametrize("source, words", [
    ("for i in range(n):", "range() needs integers, got a float64"),
    ("for i in x:", "iterating over a tensor is not supported"),
    ("for i in range(0, 9, m):", "the step of range() must be a compile-time int"),
    ("for i in range(0, 9, 0):", "the step of range() must not be zero"),
])
def test_range_errors(source, words, tmp_path):
    path = tmp_path / "loops.py"
    path.write_text(f"def f(x, n: float, m: int):\n    {source}\n        x = x + 1\n    return x\n")
    namespace = {}
    exec(compile(path.read_text(), str(path), "exec"), namespace)
    err = compile_error(namespace["f"], X, 2.0, 2)
    assert err.lineno == 2 and words in err.message


# --------------------------------------------------------------------------------------------------
# deep loops, GPU code
# --------------------------------------------------------------------------------------------------

def test_ten_thousand_iterations_through_the_recursive_path():
    @bt.jit
    def count(x: V4, n: int):
        acc = x
        for i in range(n):
            acc = acc + 1
        k = 0
        while k < n:
            k += 1
        return acc, k

    acc, k = count(X, 10_000)
    torch.testing.assert_close(acc, X + 10_000)
    assert k.item() == 10_000


def test_cuda_code_for_branches_and_loops_without_a_gpu():
    @bt.jit(target=SM90)
    def f(x: bt.Tensor(("n",), "float32"), n: int, flag: bool):
        y = x
        if flag:
            y = y * 2
        for i in range(n):
            y = y * 0.5 + i
        return y

    k = f.compile()
    assert functions(k.stages["schedule"]).count("f_loop0") == 1
    assert 'extern "C" __global__' in k.source


@pytest.mark.gpu
def test_branch_and_recursive_loop_on_the_gpu():
    @bt.jit(target="gpu")
    def f(x: bt.Tensor(("n",), "float32"), s: bt.Tensor((), "float32"), n: int):
        if s > 0:
            y = x * s
        else:
            y = x - s
        acc = y
        for i in range(n):
            acc = acc * 0.5 + i
            if i > 50:
                break
        return acc

    for s, n in ((2.0, 0), (-1.0, 7), (3.0, 100)):
        x = torch.randn(1000, device="cuda")
        out = f(x, torch.tensor(s, device="cuda"), n)
        assert out.is_cuda
        torch.testing.assert_close(out, f.__wrapped__(x, torch.tensor(s, device="cuda"), n))
    growing = bt.jit(target="gpu")(doubling.__wrapped__)
    for s in (1.0, 200.0):
        x, start = torch.randn(4, device="cuda"), torch.tensor(s, device="cuda")
        same(growing(x, start), growing.__wrapped__(x, start))


# --------------------------------------------------------------------------------------------------
# run-time scalars through loops and ifs: still Python numbers to torch's promotion (test_promotion
# audits every operator; these are the fuzzer's findings, minimised)
# --------------------------------------------------------------------------------------------------

@bt.jit
def scalar_into_while(x, xi: bt.Tensor((4,), "int64"), s: float):
    c = xi.sum() * 0
    while c < 1:
        x = x - (s % (abs(xi) + 1))  # float32, as `s` is a Python float to torch
        c = c + 1
    return x


@bt.jit
def scalar_into_recursive_for(x, s):
    v = x.sum()
    for i in range(18):  # above unroll: `s` comes in as the loop function's argument
        v = v + (-0.25) * s  # 0-d float32 with a Python float: float32
    return v


@bt.jit
def scalar_times_int_with_continue(x, xi, s):
    v = x + x
    for i in range(24):
        if i == 20:
            continue
        v = v - s * xi
    return v


@bt.jit
def scalar_minus_int_times_index(x, xi, s: float, n: int):
    v = x
    for i in range(n):  # run-time trip count; `i` is a Python int too
        v = v + (s - xi) * i
    return v


@bt.jit
def scalar_carried_then_int(xi, x0, s: float, n: int):
    w = s
    k = 0
    for i in range(n):
        w = w * 0.5  # still a Python float after the loop
        k = k + i    # a Python int made in the loop
    return xi + w, x0 + k


@bt.jit
def number_or_scalar_by_branch(xi, x0, s: int):
    if xi.sum() > 2:
        v = 3
    else:
        v = s
    return x0 + v  # a Python int on either path: int32 with a 0-d int32 tensor


XI = torch.tensor([3, -1, 0, 7])
X0 = torch.tensor(4, dtype=torch.int32)


@pytest.mark.parametrize("fn, args", [
    (scalar_into_while, (X, XI, 1.75)),
    (scalar_into_recursive_for, (X, 1.25)),
    (scalar_into_recursive_for, (X, -8.0)),
    (scalar_times_int_with_continue, (X.reshape(1, 2, 2), XI.reshape(2, 2), 0.5)),
    (scalar_minus_int_times_index, (X, XI, 0.25, 5)),
    (scalar_minus_int_times_index, (X, XI, 0.25, 0)),
    (scalar_carried_then_int, (XI.int(), X0, 1.5, 20)),
    (number_or_scalar_by_branch, (XI, X0, 5)),
    (number_or_scalar_by_branch, (-XI, X0, 5)),
])
def test_runtime_scalars_in_loops_and_ifs_promote_as_torch(fn, args):
    want = fn.__wrapped__(*args)  # plain torch with Python numbers
    for run in (fn, fn.eager):
        got = run(*args)
        for g, w in zip(got if isinstance(got, tuple) else (got,), want if isinstance(want, tuple) else (want,)):
            assert g.dtype == w.dtype, (run, g.dtype, w.dtype)
            torch.testing.assert_close(g, w)


def int_or_float_by_branch(xi, s: int, t: float):
    if xi.sum() > 2:
        v = s
    else:
        v = t
    return xi + v  # error


def test_a_number_whose_kind_depends_on_the_path_is_refused():
    """torch's dtype here depends on the path taken at run time: one compiled dtype cannot follow it."""
    err = compile_error(int_or_float_by_branch, XI.int(), 1, 2.5)
    assert "'v' is an int64 tensor of shape () on one path of this `if` and a float64 tensor" in err.message
