"""streammom: streaming hierarchical clustering with the spectral method of moments.

The library knows nothing of Kafka or HTTP; the daemon lives in ``service``.
"""

from streammom._version import __version__

__all__ = ["__version__"]
