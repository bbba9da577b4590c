from lnbench.models.mlp import MLP
from lnbench.models.sequence import SequenceModel

__all__ = ["MLP", "SequenceModel"]
