"""Model compression: structured pruning (`prune.py`), int8 quantization (`quantize.py`) and
quantization-aware training (`qat.py`); see docs/compress.md and docs/quantize.md."""
