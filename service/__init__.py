"""The streammom daemon: a thin loop around the ``streammom`` library (Kafka, metrics, CLI).

Importing this package before numpy pins BLAS/OpenMP to one thread unless the environment says
otherwise (``OPENBLAS_NUM_THREADS`` etc.): the worker is a single-threaded loop and the
engine's matrices are small (d ≤ a few thousand), where multi-threaded BLAS on shared cores is
several times *slower* (measured: 256×256 ``eigh`` 7 ms on one thread vs 26–135 ms on two busy
cores).
"""

import os as _os
import sys as _sys

if "numpy" not in _sys.modules:
    for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        _os.environ.setdefault(_var, "1")
