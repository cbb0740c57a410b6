"""IR generation: the visitors that turn a parsed function into Relax (relax.py) or a TIR PrimFunc
(tir.py), and the operator rules, control flow and inlining they share."""
