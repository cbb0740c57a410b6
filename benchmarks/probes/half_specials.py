"""GPU probe (session 29, < 1 minute on an H100): the CUDA fixes of fuzz seeds 8 and 100000422 compared
with torch on the GPU: half ±inf/NaN constants (pipeline.half_specials_from_float32), a float16 `%`
(half_math_in_float32's fmod in float32), and row/multi-output kernels given sizes no tensor carries
(rowwise.with_free_sizes). Prints one line per case and `ALL OK` at the end, or raises."""
import torch

import babytriton as bt

INF, NAN = float("inf"), float("nan")


def non_finite_constants(x):
    bounded = torch.clamp(x, min=-INF, max=INF) + 1
    return torch.where(x == INF, torch.full_like(x, NAN), bounded)


def nan_to_num_bf16(x):
    return torch.nan_to_num(x, nan=0.0, posinf=1.0, neginf=-1.0) * 2


def remainders(x, y):
    return torch.fmod(x, y), x % y, torch.remainder(x, 1.5), torch.fmod(x, 0.0)


def counts(x: bt.Tensor(("n", "m"), "float32")):
    return torch.ones_like(x).sum() > 3, torch.ones_like(x).sum(1) * 2


def doubled_in_a_branch(x: bt.Tensor(("n", 1), "float32"), flag: bool):
    y = torch.cat((x, x), 0)
    if flag:
        a = torch.exp(y) + 1
        b = a * y
        return a, b, torch.sigmoid(b)
    return y, y, y


def check(name, fn, *args):
    got, want = bt.jit(fn, target="gpu", cache=False)(*args), fn(*args)
    got, want = (got, want) if isinstance(got, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, equal_nan=True)
    print("ok", name)


def main():
    special = [NAN, INF, -INF, 1.5, -0.0, 0.25, -3.0, 1e4] * 512
    for dtype in (torch.float16, torch.bfloat16):
        x = torch.tensor(special, dtype=dtype, device="cuda")
        check(f"non_finite_constants {dtype}", non_finite_constants, x)
        check(f"nan_to_num {dtype}", nan_to_num_bf16, x)
    x = torch.randn(33, 257, device="cuda").half() * 4
    y = torch.randn(257, device="cuda").half()
    y[:3] = 0
    x[0, :4] = torch.tensor([NAN, INF, -INF, 0.0])
    check("float16 remainders", remainders, x, y)
    for shape in ((0, 2), (3, 5), (1000, 37)):
        check(f"counts {shape}", counts, torch.randn(shape, device="cuda"))
    for rows in (0, 5, 3000):
        for flag in (True, False):
            check(f"doubled_in_a_branch {rows} {flag}", doubled_in_a_branch, torch.randn(rows, 1, device="cuda"), flag)
    print("ALL OK")


if __name__ == "__main__":
    main()
