"""`hydra/launcher=slurm`: submitit's SLURM launcher made to survive a shared cluster (launcher), and where a
SLURM job stands, asked quietly (queue)."""
