"""Counting a model's arithmetic: MACs per pixel for restoration (`macs`), the Astar
contest's MAdds for detection (`madds`). Below compression, export and profiling, which all
count (a pruner counts to know when to stop)."""
