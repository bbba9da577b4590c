"""`lnbench check`: every claim preset run in rounds (tune, widen, judge), and its page of verdicts."""
