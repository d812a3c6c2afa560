"""posenc: the application on top of the specification and its backends.

`posenc check` (the equivalence suite, also against other implementations: `--impl`), `posenc port` /
`posenc doctor` (checkpoints moved between frameworks, verified), `posenc spec`, `posenc export`,
`posenc plot` and `posenc experiment`. The layers, imports pointing one way only:

    posenc_np (spec)  <-  posenc_torch | posenc_tf | posenc_jax | posenc_mlx (backends)  <-  posenc (this package)

Nothing here is imported by the spec or the backends. Frameworks are imported lazily, by the functions
that need them: through `posenc.adapters`, or in the few modules `posenc.adapters.FRAMEWORK_CODE` lists
with the reason each is framework code (a training program, a distributed runtime, a checkpoint format,
a third-party implementation under test).
"""

__version__ = "0.1.0"
