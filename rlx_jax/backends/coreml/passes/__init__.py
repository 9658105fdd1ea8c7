"""The Core ML backend's graph passes, run before MIL lowering (Backend.prepare / host_reasons):
complex values as float32 pairs and FFTs as DFT matmuls (complex_*.py), ranks rewritten to
<= 5 (rank*.py), zero-size values folded away (empty*.py), integer intervals (intervals.py) and
the ops that must run on the host (host_reasons.py)."""
