"""Gradients: the vector-Jacobian rule of every Relax operator (gradients.py) and the backward
module built from a forward (backward.py). Imports passes/ and below."""
