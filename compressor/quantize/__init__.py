"""Quantisation: dynamic and static INT8, quantisation-aware training, FP16/BF16. Arrives with its own issue."""
