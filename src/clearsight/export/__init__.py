"""Exporting models to deployment formats (ONNX), each export checked for parity."""
