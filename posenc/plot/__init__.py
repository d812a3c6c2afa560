"""`posenc plot`: figures of the encodings, computed by the spec or a backend.

`figures` holds the figure functions (keyword options in, a matplotlib Figure out), `command` the command
line. matplotlib is imported only when a figure is drawn (`posenc.canvas`).
"""
