"""The cross-framework equivalence suite behind `posenc check`."""
