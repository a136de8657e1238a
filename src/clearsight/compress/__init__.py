"""Model compression: structured pruning (`prune.py`); see docs/compress.md."""
