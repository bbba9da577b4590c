"""The runtime around a run: the `lnbench train` entry, preflight, failure policy, processes, sweeps, SLURM."""
