"""Detection: box models' shared pieces (class ids, pre/post-processing, scoring)."""
