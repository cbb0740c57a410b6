"""f.explain(*args): the key's parts, where a version exists, and what differs from the nearest one;
f.cache_info(): compilations, hits and misses."""
import pytest
import torch

import babytriton as bt


@pytest.fixture(autouse=True)
def own_cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("BABYTRITON_CACHE_DIR", str(tmp_path / "cache"))


def axpy(a, x, y):
    return a * x + y


def scale(x, n: bt.constexpr):
    return x * n


def test_explain_lists_the_key_parts_and_says_nothing_exists_yet(capsys):
    f = bt.jit(axpy)
    a, x, y = torch.randn(2, 3), torch.randn(2, 3), torch.randn(2, 3)
    result = f.explain(a, x, y)
    printed = capsys.readouterr().out
    assert printed.strip() == result.text
    assert result.parts["dtype of `a`"] == "float32" and result.parts["shape of `x`"] == "(2, 3)"
    for label in ("source of `axpy`", "target", "option `schedule`", "tvm", "babytriton"):
        assert label in result.parts
    assert not result.in_memory and not result.on_disk
    assert "a call would compile the first version" in result.text


def test_a_dtype_change_names_the_parameter_and_both_dtypes():
    f = bt.jit(axpy)
    a, x, y = torch.randn(2, 3), torch.randn(2, 3), torch.randn(2, 3)
    f(a, x, y)
    half = [t.half() for t in (a, x, y)]
    before = f.explain(*half)
    assert not before.in_memory and before.compared_with == "memory"
    assert before.differences == ["dtype of `a`: float32 → float16", "dtype of `x`: float32 → float16",
                                  "dtype of `y`: float32 → float16"]
    assert "a call would compile a new version; the nearest version in memory differs in:" in before.text
    # one rounding of the fused a * x + y, where eager torch rounds the product first: either is half's
    torch.testing.assert_close(f(*half), half[0] * half[1] + half[2], rtol=2e-3, atol=2e-3)
    after = f.explain(*half)           # the call compiled it: explain says why it was needed
    assert after.in_memory and after.compiled_because == before.differences
    assert "dtype of `a`: float32 → float16" in after.text


def test_a_shape_change_names_the_parameter_and_both_shapes():
    f = bt.jit(axpy)
    f(torch.randn(2, 3), torch.randn(2, 3), torch.randn(2, 3))
    result = f.explain(torch.randn(1), torch.randn(4, 3), torch.randn(4, 3))
    assert result.differences == ["shape of `a`: (2, 3) → (1,)", "shape of `x`: (2, 3) → (4, 3)",
                                  "shape of `y`: (2, 3) → (4, 3)"]


def test_the_nearest_version_is_the_one_with_fewest_differences():
    f = bt.jit(axpy)
    f(torch.randn(2, 3), torch.randn(2, 3), torch.randn(2, 3))
    f(torch.randn(4, 3), torch.randn(4, 3), torch.randn(4, 3))
    result = f.explain(torch.randn(4, 3), torch.randn(4, 3), torch.randn(4, 3).double())
    assert result.differences == ["dtype of `y`: float32 → float64"]


def test_a_constexpr_change_shows_both_values():
    f = bt.jit(scale)
    f(torch.ones(3), 3)
    assert f.explain(torch.ones(3), 4).differences == ["value of `n`: 3 (int) → 4 (int)"]
    assert f.explain(torch.ones(3), 3.0).differences == ["value of `n`: 3 (int) → 3.0 (float)"]
    assert f(torch.ones(3, dtype=torch.int32), 3).dtype == torch.int32
    assert f(torch.ones(3, dtype=torch.int32), 3.0).dtype == torch.float32   # not the int version


def test_explain_reports_a_version_on_disk_and_an_edited_source(capsys):
    def f(x: bt.Tensor((2, 3), "float32")):
        return x + 1

    bt.jit(f).compile()
    fresh = bt.jit(f)
    result = fresh.explain()               # no arguments: the annotations, as compile()
    assert not result.in_memory and result.on_disk and result.disk_path
    assert "a call would load it from disk" in result.text

    def f(x: bt.Tensor((2, 3), "float32")):  # noqa: F811 - the same function, edited
        return x + 2

    edited = bt.jit(f).explain()
    assert not edited.on_disk and edited.compared_with == "disk"
    (difference,) = edited.differences
    assert difference.startswith("source of `f`: 2 lines, sha256 ")


def test_verbose_says_why_a_new_version_is_compiled(capsys):
    f = bt.jit(verbose=True)(axpy)
    f(torch.ones(2), torch.ones(2), torch.ones(2))
    capsys.readouterr()
    f(torch.ones(2), torch.ones(2), torch.ones(2, dtype=torch.int32))
    assert "new version; differs from the nearest in: dtype of `y`: float32 → int32" in capsys.readouterr().out


def test_cache_info_counts_compilations_hits_misses_and_the_disk():
    f = bt.jit(axpy)
    x = torch.ones(2)
    for _ in range(3):
        f(x, x, x)
    f.compile(x, x, x)
    f(x.double(), x.double(), x.double())
    info = f.cache_info()
    assert info == {"compilations": 2, "hits": 1, "misses": 2, "disk_hits": 0, "disk_writes": 2, "versions": 2}
    g = bt.jit(axpy)
    g(x, x, x)
    assert g.cache_info()["disk_hits"] == 1 and g.cache_info()["compilations"] == 0
