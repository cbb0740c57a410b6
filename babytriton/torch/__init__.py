"""Compiled functions as citizens of torch: the autograd Function around a call (autograd.py) and
custom operators (library.py, torch.library). Imports backends/ and below."""
