"""Claims and verdicts: what a preset claims, how runs are tuned and judged, the statistics behind a verdict."""
