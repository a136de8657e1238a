"""Converters from other frameworks' model files (ONNX, TFLite) to clearsight artifacts."""
