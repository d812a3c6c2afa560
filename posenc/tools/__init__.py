"""Tools on top of the encodings: `posenc plot` (figures) and `posenc experiment` (a small LM per encoding).

NumPy-only at import time: matplotlib and torch are imported inside the functions that need them.
"""
