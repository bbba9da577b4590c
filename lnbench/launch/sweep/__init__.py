"""A sweep as it runs and as it is read: stopping it cleanly, its progress lines, its closing block, and
`lnbench status`, from the jobs' files alone."""
