"""k.fusion: each kernel after FuseTIR with the Relax ops it fused and the user's lines they came
from; k.graph(): the dataflow before and after fusion as SVG."""
import inspect
import xml.etree.ElementTree as ET

import pytest
import torch

import babytriton as bt
from babytriton.runtime import graph as graph_module

T23 = bt.Tensor((2, 3), "float32")
SM90 = {"kind": "cuda", "arch": "sm_90"}
SVG = "{http://www.w3.org/2000/svg}"


def line_of(fn, text: str) -> int:
    """The file line of the first source line of `fn` containing `text`."""
    lines, first = inspect.getsourcelines(getattr(fn, "__wrapped__", fn))
    return first + next(i for i, line in enumerate(lines) if text in line)


@bt.jit
def add_add(a: T23, b: T23):
    c = a + b
    d = c + a
    return d


def test_the_tutorial_add_then_add_is_one_kernel_mapped_to_both_lines():
    k = add_add.compile()
    (kernel,) = k.fusion
    assert kernel.name == "fused_add_add" and kernel.fused
    assert [op.op for op in kernel.ops] == ["add", "add"]
    assert [op.var for op in kernel.ops] == ["c", "d"]
    assert kernel.lines == [line_of(add_add, "c = a + b"), line_of(add_add, "d = c + a")]
    assert [op.source for op in kernel.ops] == ["c = a + b", "d = c + a"]
    assert kernel.cuda_kernels == ()
    assert k.fusion["fused_add_add"] is kernel
    text = str(k.fusion)
    assert "kernel fused_add_add" in text and f"{__file__}:{kernel.lines[0]}" in text
    a, b = torch.randn(2, 3), torch.randn(2, 3)
    torch.testing.assert_close(k(a, b), a + b + a)


def test_the_cuda_kernel_name_is_listed_for_a_gpu_target():
    k = bt.jit(target=SM90)(add_add.__wrapped__).compile()
    (kernel,) = k.fusion
    assert kernel.name == "fused_add_add" and kernel.cuda_kernels == ("fused_add_add_kernel",)
    assert "__global__" in k.source and "fused_add_add_kernel" in k.source
    assert "[CUDA: fused_add_add_kernel]" in str(k.fusion)


def test_an_unknown_kernel_name_is_a_clear_error():
    with pytest.raises(KeyError, match="no kernel named 'nope'; kernels: fused_add_add"):
        add_add.compile().fusion["nope"]


def several_kernels(a: T23, b: T23, w: bt.Tensor((3, 4), "float32")):
    c = a + b
    h = (c * 2.0) @ w
    out = (h
           + 1.0)
    out -= 0.5
    return out, c


@pytest.mark.usefixtures("products_as_kernels")  # the product fuses with its neighbours, not torch's
def test_every_op_is_in_exactly_one_kernel_with_its_own_line():
    f = bt.jit(several_kernels)
    k = f.compile()
    ops = [(op.op, op.line) for kernel in k.fusion for op in kernel.ops]
    relax_ops = k.stages["relax"].count(" = R.")
    assert len(ops) == relax_ops
    lines = {name: line_of(several_kernels, text) for name, text in
             [("c", "c = a + b"), ("h", "h = (c * 2.0) @ w"), ("plus", "out = (h"), ("minus", "out -= 0.5")]}
    assert sorted(ops, key=lambda o: (o[1], o[0])) == sorted([
        ("add", lines["c"]), ("multiply", lines["h"]), ("matmul", lines["h"]),
        ("add", lines["plus"]),              # a multi-line `+` is on the line where it starts
        ("subtract", lines["minus"]),        # `-=` is `out = out - 0.5`, on its own line
    ], key=lambda o: (o[1], o[0]))
    by_name = {kernel.name: kernel for kernel in k.fusion}
    assert any(kernel.fused and "matmul" in [op.op for op in kernel.ops] for kernel in by_name.values())
    a, b, w = torch.randn(2, 3), torch.randn(2, 3), torch.randn(3, 4)
    out, c = k(a, b, w)
    torch.testing.assert_close(out, (a + b) * 2.0 @ w + 1.0 - 0.5)
    torch.testing.assert_close(c, a + b)


def test_lines_follow_the_definition_when_loaded_from_disk(tmp_path, monkeypatch):
    monkeypatch.setenv("BABYTRITON_CACHE_DIR", str(tmp_path / "cache"))

    def twice(a: T23, b: T23):
        c = a + b
        return c + b
    first = bt.jit(twice)
    first_lines = first.compile().fusion[0].lines

    # The same source, further down the file:
    def twice(a: T23, b: T23):
        c = a + b
        return c + b
    second = bt.jit(twice)
    k = second.compile()
    assert k.from_disk
    assert k.fusion[0].lines == [line_of(twice, "c = a + b"), line_of(twice, "return c + b")]
    assert k.fusion[0].lines != first_lines


# --------------------------------------------------------------------------------------------------
# the picture
# --------------------------------------------------------------------------------------------------

@pytest.fixture
def pure_python(monkeypatch):
    """Draw without graphviz, as on a machine without the `dot` program."""
    monkeypatch.setattr(graph_module, "graphviz_available", lambda: False)


def texts(svg: str) -> str:
    root = ET.fromstring(svg)
    return "\n".join("".join(t.itertext()) for t in root.iter(f"{SVG}text"))


def test_graph_draws_before_and_after_fusion_as_svg(pure_python, tmp_path):
    k = add_add.compile()
    picture = k.graph()
    svg = picture._repr_svg_()
    root = ET.fromstring(svg)                      # well-formed SVG
    assert root.tag == f"{SVG}svg"
    words = texts(svg)
    assert "before fusion" in words and "after fusion" in words
    c_line, d_line = line_of(add_add, "c = a + b"), line_of(add_add, "d = c + a")
    assert f"line {c_line}: c = a + b" in words and f"line {d_line}: d = c + a" in words
    assert f"lines {c_line}, {d_line}" in words    # the fused kernel's label, after fusion
    boxes = [g for g in root.iter(f"{SVG}g") if g.get("class") == "kernel-box"]
    assert len(boxes) == 1 and "fused_add_add" in "".join(boxes[0].itertext())
    ops = [g for g in root.iter(f"{SVG}g") if g.get("class") == "node op"]
    kernels = [g for g in root.iter(f"{SVG}g") if g.get("class") == "node kernel"]
    assert len(ops) == 2 and len(kernels) == 1
    edges = [p for p in root.iter(f"{SVG}path") if p.get("class") == "edge"]
    assert len(edges) == (2 + 2 + 1) + (2 + 1)     # a,b->c; c,a->d; d->return | a,b->kernel; ->return
    saved = picture.save(tmp_path / "add_add")
    assert saved.suffix == ".svg" and saved.read_text() == svg
    with pytest.raises(ValueError, match="cannot save the graph as '.png'"):
        picture.save(tmp_path / "add_add.png")


def test_graph_one_side_and_bad_choice(pure_python):
    k = bt.jit(several_kernels).compile()
    before = texts(k.graph("before").svg)
    after = texts(k.graph("after").svg)
    assert "before fusion" in before and "after fusion" not in before
    assert "after fusion" in after and "matmul" in after
    with pytest.raises(ValueError, match="graph\\(which\\) is one of 'both', 'before', 'after'"):
        k.graph("middle")


def test_kernel_boxes_do_not_overlap(pure_python):
    k = bt.jit(several_kernels).compile()
    root = ET.fromstring(k.graph("before").svg)
    rects = []
    for g in root.iter(f"{SVG}g"):
        if g.get("class") == "kernel-box":
            r = g.find(f"{SVG}rect")
            rects.append(tuple(float(r.get(a)) for a in ("x", "y", "width", "height")))
    assert len(rects) == len([kernel for kernel in k.fusion if kernel.ops])
    for i, (x1, y1, w1, h1) in enumerate(rects):
        for x2, y2, w2, h2 in rects[i + 1:]:
            assert x1 + w1 <= x2 or x2 + w2 <= x1 or y1 + h1 <= y2 or y2 + h2 <= y1


def softmax_and_skip(x: bt.Tensor((4, 8), "float32"), y: bt.Tensor((4, 8), "float32")):
    e = bt.exp(x - x.max(axis=1, keepdims=True))
    s = e / e.sum(axis=1, keepdims=True)
    return s * y + x          # x and y jump over the softmax's ranks


def rects_and_edges(svg: str):
    """Each node's rectangle (with its label) and each edge's corner points, in the panel's coordinates."""
    root = ET.fromstring(svg)
    for panel in (g for g in root.iter(f"{SVG}g") if g.get("class") == "panel"):
        nodes = [(g.find(f"{SVG}title").text, *(float(g.find(f"{SVG}rect").get(a))
                                                 for a in ("x", "y", "width", "height")))
                 for g in panel.iter(f"{SVG}g") if (g.get("class") or "").startswith("node")]
        edges = [[tuple(map(float, point.split())) for point in p.get("d")[2:].split(" L ")]
                 for p in panel.iter(f"{SVG}path") if p.get("class") == "edge"]
        yield nodes, edges


@pytest.mark.parametrize("fn", [several_kernels, softmax_and_skip], ids=lambda f: f.__name__)
def test_edges_go_around_the_nodes(pure_python, fn):
    """Every edge is made of vertical and horizontal segments that touch no node but at its two ends."""
    k = bt.jit(fn).compile()
    panels = list(rects_and_edges(k.graph().svg))
    assert len(panels) == 2 and all(edges for _, edges in panels)
    long_edges = 0
    for nodes, edges in panels:
        for points in edges:
            long_edges += len(points) > 4
            for (x1, y1), (x2, y2) in zip(points, points[1:]):
                assert x1 == x2 or y1 == y2
                inner = [(x1, y1), (x2, y2)]
                if (x1, y1) == points[0]:
                    inner[0] = (x1, y1 + 1)    # leaves its source's bottom
                if (x2, y2) == points[-1]:
                    inner[1] = (x2, y2 - 1)    # enters its target's top
                (sx, sy), (ex, ey) = inner
                for label, x, y, w, h in nodes:
                    hits = (min(sx, ex) < x + w and max(sx, ex) > x and min(sy, ey) < y + h and max(sy, ey) > y)
                    assert not hits, f"an edge of {fn.__name__} crosses {label!r}"
    assert long_edges     # some edge skips ranks, so it went through a channel


@pytest.mark.skipif(not graph_module.graphviz_available(), reason="graphviz (package and `dot`) not installed")
def test_graph_with_graphviz(tmp_path):
    k = add_add.compile()
    picture = k.graph()
    assert picture.dot is not None and "cluster" in picture.dot and "fused_add_add" in picture.dot
    assert ET.fromstring(picture.svg).tag == f"{SVG}svg"
    assert picture.save(tmp_path / "g.dot").read_text() == picture.dot


@pytest.mark.gpu
def test_gpu_fusion_map_names_the_cuda_kernels():
    @bt.jit(target="gpu")
    def gpu_add_add(a: bt.Tensor((64, 64), "float32"), b: bt.Tensor((64, 64), "float32")):
        c = a + b
        d = c + a
        return d

    a, b = torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")
    torch.testing.assert_close(gpu_add_add(a, b), a + b + a)
    (kernel,) = gpu_add_add.compile(a, b).fusion
    assert kernel.cuda_kernels == ("fused_add_add_kernel",)
    assert kernel.lines == [line_of(gpu_add_add, "c = a + b"), line_of(gpu_add_add, "d = c + a")]


def test_the_analysis_follows_ops_into_if_branches():
    """Control flow (built here with the IRBuilder directly): every op inside either branch is found
    in exactly one kernel, with the line recorded for it."""
    import tvm
    from tvm import relax
    from tvm.script.ir_builder import IRBuilder
    from tvm.script.ir_builder import ir as I
    from tvm.script.ir_builder import relax as RB

    from babytriton.runtime import fusion
    from babytriton.lowering import pipeline

    lines = {}

    def emit(ib, name, expr, line):
        var = ib.name(name, RB.emit(expr))
        lines[var] = line
        return var

    t23 = relax.TensorType([2, 3], "float32")
    with IRBuilder() as ib:
        with I.ir_module():
            with RB.function():
                RB.func_name("branchy")
                x = RB.arg("x", t23)
                total = emit(ib, "total", relax.op.sum(x), 2)
                cond = emit(ib, "cond", relax.op.greater(total, relax.const(0.0, "float32")), 3)
                with RB.If(cond) as frame:
                    with RB.Then():
                        t = emit(ib, "t", relax.op.multiply(x, relax.const(2.0, "float32")), 4)
                        t2 = emit(ib, "t2", relax.op.add(t, x), 5)
                        ib.name("res", RB.emit(relax.Tuple([t2])))
                    with RB.Else():
                        e = emit(ib, "e", relax.op.negative(x), 7)
                        ib.name("res", RB.emit(relax.Tuple([e])))
                out = emit(ib, "out", relax.op.exp(RB.emit(relax.TupleGetItem(frame.var, 0))), 8)
                RB.func_ret_value(out)
    generated = ib.get()
    modules = {}
    lowered = pipeline.lower(generated, tvm.target.Target("llvm"), "dlight", lambda s, t: None, modules=modules)
    record = fusion.analyse(generated, lines, modules)
    ops = {op["var"]: op for op in record["ops"]}
    assert {v: ops[v]["line"] for v in ("total", "cond", "t", "t2", "e", "out")} == \
        {"total": 2, "cond": 3, "t": 4, "t2": 5, "e": 7, "out": 8}
    placed = sorted(i for kernel in record["kernels"] for i in kernel["ops"])
    assert placed == sorted(range(len(record["ops"])))          # each op in exactly one kernel
    kernel_of = {record["ops"][i]["var"]: k for k, kernel in enumerate(record["kernels"]) for i in kernel["ops"]}
    final = record["kernels"][kernel_of["out"]]     # reads the If's result: both branches' kernels
    assert ["kernel", kernel_of["t2"]] in final["inputs"] and ["kernel", kernel_of["e"]] in final["inputs"]
    assert record["kernel_outputs"] and lowered is not None


def rms_rows(x: bt.Tensor((256, 1024), "float32"), w: bt.Tensor((1024,), "float32")):
    return x * rsqrt((x * x).mean(axis=-1, keepdims=True) + 1e-6) * w, (x * 2.0 + 1.0).sum(), exp(x) * w


def test_each_kernel_names_its_schedule_rule_and_launch_shape_on_the_cpu():
    fusion = bt.jit(rms_rows, cache=False).compile().fusion
    rows, total, chain = fusion
    assert rows.rule == "CPUReduction" and rows.launch.startswith("parallel 256 x vector ")
    assert total.rule == "CPUReduction" and "parallel" in total.launch   # a full sum cut into parallel parts
    assert chain.rule == "CPUElementwise" and chain.launch.startswith("parallel ") and "vector" in chain.launch
    assert f"rule CPUReduction: {rows.launch}" in str(fusion)


def test_each_kernel_names_its_schedule_rule_and_launch_shape_on_the_gpu():
    rows, total, chain = bt.jit(rms_rows, target="gpu", cache=False).compile().fusion
    assert rows.rule == "RowKernel" and rows.launch.startswith("grid 256 x block ")   # a block per row
    assert total.rule == "SplitReduction" and not total.launch.startswith("grid 1 ")
    assert chain.rule == "Elementwise" and chain.launch.startswith("grid ")
    fallback = bt.jit(rms_rows, target="gpu", schedule="fallback", cache=False).compile().fusion
    assert {k.rule for k in fallback} == {"dlight.gpu.Fallback"}


def test_a_kernel_no_rule_scheduled_says_so():
    @bt.jit(cache=False)
    def tiny(x: bt.Tensor((4,), "float16")):
        return softmax(x, axis=0)   # half kernels: Dlight's CPU Reduction is declined (WithoutHalves)

    (kernel,) = tiny.compile().fusion
    assert kernel.rule in ("none", "CPUReduction") and kernel.launch
