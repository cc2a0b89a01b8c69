"""Shared compressors: magnitude pruning (global or per layer), Wanda scores, the layer-by-layer
calibration pass (Wanda, OWL), int8 weight quantization."""
