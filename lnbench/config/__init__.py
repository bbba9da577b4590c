"""Configuration: the schema Hydra composes, the choices, presets and their sweep axes, overrides, validation."""
