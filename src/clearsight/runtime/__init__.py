"""What runs a loaded model, whatever it is: the ONNX Runtime wrappers (`ort_backend`:
`OrtModel`, `load_onnx`; `ort_detect`: `OrtDetector`).

A low layer: it imports models, the artifact and the base modules only, so the zoo, the
detection runner, the exporter and the engine can all use it (docs/architecture.md).
"""
