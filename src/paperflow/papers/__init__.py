"""One module per paper; each calls paperflow.registry.register_paper at import time."""
