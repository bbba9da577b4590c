"""One training run: the recipe (setup and loop), tasks, checkpoints, provenance, the tracker and its sinks."""
