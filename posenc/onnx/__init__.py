"""ONNX: the encodings as ONNX graphs, written by `posenc export` and run by `posenc check --backend onnx`.

`graphs` builds the models from the float64 spec's numbers (`onnx.helper`), `export` checks one on ONNX
Runtime and writes it (`export()`, `ExportResult`), `command` is `posenc export`, and `backend` runs a
registry case on its graph (the `onnx` backend of `posenc check`). `onnx` and `onnxruntime` are imported
only when a graph is built or run.
"""
