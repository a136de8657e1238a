"""Defaults shared by the CLI, the engine and the models, in a module without torch.

The CLI builds its option defaults from these without importing torch (its start-up stays
fast), and the engine no longer imports a concrete model to learn a default.
"""

from __future__ import annotations

DEFAULT_STAGE_THRESHOLD = 6e-3
"""Multi-stage "auto" inference stops an image once a stage changes it by less than this
(mean absolute change in [0,1] image units). Chosen with the bundled default-derain on
Rain100L (a speed knob, not model selection): 6e-3 ran 2.67 stages on average at 28.389 dB
against 28.353 with all 4 (phase-1 weights; 1e-3 never stopped early there); the shipped
weights run 3.17 stages at 28.921 dB against 28.918 (model card)."""

DEFAULT_TILE = 128
"""Tile size for a model that declares none (fastest and leanest for RESCAN on 2 cores,
benchmarks/restore_speed.py)."""

DEFAULT_MAX_UNTILED_PIXELS = 512 * 512
"""Images above this many pixels are tiled, unless the model declares its own limit."""

DEFAULT_HALO = 32
"""Context around generic tiles for a model that declares no receptive radius."""

MIN_TILE = 8
"""The smallest tile size accepted (0 still means "never tile"). Smaller tiles do no useful
work: every tile pays a fixed per-call cost plus its halo, so `--tile 1` on a 256x256 image
made 65,536 model calls and never finished. 8 is the smallest size the models' own tiled
paths and the test suite use; the default tiles are 128 and up."""
