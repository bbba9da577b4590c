"""lnbench's packed-replicas launcher as a Hydra plugin (Hydra loads launchers from the hydra_plugins package only)."""
