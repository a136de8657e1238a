"""Model compression: int8 quantization (`quantize.py`) and quantization-aware training
(`qat.py`); see `docs/quantize.md`."""
