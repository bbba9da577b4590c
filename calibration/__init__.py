"""What lnbench's verdicts are calibrated with: simulations of the procedure's error rates and power, and
synthetic sweeps with known answers that `lnbench report` judges end to end. No command of lnbench runs them,
so they live beside the package, not in it (the wheel ships lnbench/ and hydra_plugins/ only): they import
lnbench, lnbench never imports them (tests/test_layout.py). Run from a checkout:

    python -m calibration.simulate [--trials N] [--seed S]    # docs/verdicts.md's simulated error rates and power
    python -m calibration.synthetic [--sweeps N]             # false held, end to end through `lnbench report`

tests/claims/test_estimand.py, test_end_to_end.py and test_family.py assert what they measure, with fewer trials.
"""
