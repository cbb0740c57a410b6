"""IR generation: the visitors that turn a parsed function into Relax (relax.py) or a TIR PrimFunc
(tir.py), and the operator rules, control flow and inlining they share. Imports operators/ and below.

Each visitor composes mixins by node kind, as the TVMScript parser dispatches: relax_statements,
relax_expressions, relax_arithmetic, relax_calls (control flow in control.py and loops.py) and
tir_statements, tir_control, tir_expressions, tir_calls; base.py holds what both compile alike."""
