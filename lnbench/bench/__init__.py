"""`lnbench bench`: layer, optimizer and whole-run timings against torch's own kernels."""
