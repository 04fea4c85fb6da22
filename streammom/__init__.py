"""streammom: streaming hierarchical clustering with the spectral method of moments.

The library knows nothing of Kafka or HTTP; the daemon lives in ``service``.

The public names are loaded on first use (PEP 562 module ``__getattr__``), so a command that
needs only the version or the routing model — ``streammom inspect``, ``streammom --help`` —
does not import the engine, its compiled kernels and scipy's optimisers.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from streammom._version import __version__

if TYPE_CHECKING:
    from streammom.engine import StreamingHierarchy
    from streammom.hierarchical import HierarchicalMoM
    from streammom.moments import MomentAccumulator
    from streammom.relevance import top_features
    from streammom.rollup import CodeRollup
    from streammom.spectral import SpectralMixture
    from streammom.vocab import Vocabulary
    from streammom.warmup import warm_up

#: Public name → the module that defines it.
_HOMES = {
    "CodeRollup": "streammom.rollup",
    "HierarchicalMoM": "streammom.hierarchical",
    "MomentAccumulator": "streammom.moments",
    "SpectralMixture": "streammom.spectral",
    "StreamingHierarchy": "streammom.engine",
    "Vocabulary": "streammom.vocab",
    "top_features": "streammom.relevance",
    "warm_up": "streammom.warmup",
}

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


def __getattr__(name: str) -> Any:
    """Load a public name from its module on first use (then it is a plain attribute)."""
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'streammom' has no attribute {name!r}")
    value = getattr(import_module(home), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
