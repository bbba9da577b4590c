"""lnbench's fast recurrent layers: the whole sequence in one call each way, on C++ kernels where built."""
