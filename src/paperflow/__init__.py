"""paperflow: laptop-scale, tracked and versioned reproductions of ICML 2024 paper claims."""
__version__ = "0.1.0"
