"""babytriton's own TIR for Relax operators: torch's NaN/inf and half-precision semantics
(legalize.py) and GPU scans. Below code generation, which emits them; imports core/ and frontend/."""
