"""The process around a job: its thread count, its heap, a forked child per job, the warm-up a worker shares
between its jobs, and the guardian that stops a dead sweep's processes."""
