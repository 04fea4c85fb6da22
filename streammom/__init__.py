"""streammom: streaming hierarchical clustering with the spectral method of moments.

The library knows nothing of Kafka or HTTP; the daemon lives in ``service``.
"""

from streammom._version import __version__
from streammom.engine import StreamingHierarchy
from streammom.hierarchical import HierarchicalMoM
from streammom.moments import MomentAccumulator
from streammom.relevance import top_features
from streammom.rollup import CodeRollup
from streammom.spectral import SpectralMixture
from streammom.vocab import Vocabulary
from streammom.warmup import warm_up

__all__ = [
    "CodeRollup",
    "HierarchicalMoM",
    "MomentAccumulator",
    "SpectralMixture",
    "StreamingHierarchy",
    "Vocabulary",
    "__version__",
    "top_features",
    "warm_up",
]
