"""BLAS threads for the simulator's query path.

A query is one matrix-vector product over a block of the index's vectors: memory
bound, and done in a few milliseconds on one core. OpenBLAS (numpy's) splits it over
every core by default, and on a loaded machine the threads wait on each other: on a
shared 2-core machine the default threads tripled the tail over the bus (p95 229 ms
against 50 ms with one thread, issue 26). So the simulator pins BLAS to
``$WORLDLINE_SIM_BLAS_THREADS`` threads (default 1) when it starts with an index.

The count is set at run time through OpenBLAS's own ``*_set_num_threads`` (as
threadpoolctl does, without the dependency), so it holds whatever imported numpy
first; it applies to the whole process (``worldline up`` runs every actor in one).
A BLAS other than OpenBLAS is left alone (:func:`pin_blas_threads` returns None); set
its own variable (``MKL_NUM_THREADS``, ``OMP_NUM_THREADS``) before the process starts.
"""

from __future__ import annotations

import ctypes
import os
from functools import cache
from typing import Final

import numpy as np

__all__ = ["BLAS_THREADS_ENV", "blas_threads", "pin_blas_threads", "threads_from_env"]

BLAS_THREADS_ENV: Final = "WORLDLINE_SIM_BLAS_THREADS"
# OpenBLAS's exported names: numpy's wheels (scipy-openblas, 64-bit ints), a
# 64-bit-int build, a plain build.
_PREFIXES: Final = ("scipy_openblas_", "openblas_")
_SUFFIXES: Final = ("64_", "")


def threads_from_env() -> int:
    """``$WORLDLINE_SIM_BLAS_THREADS``, else 1.

    Raises:
        ValueError: the variable is not a whole number of at least 1.
    """
    raw = os.environ.get(BLAS_THREADS_ENV, "").strip()
    if not raw:
        return 1
    if not raw.isdigit() or int(raw) < 1:
        raise ValueError(
            f"{BLAS_THREADS_ENV}={raw!r}: give the BLAS threads one simulator query "
            "may use, a whole number of at least 1 (default 1)"
        )
    return int(raw)


@cache
def _openblas() -> tuple[ctypes.CDLL, str] | None:
    """The OpenBLAS this process loaded for numpy, and its symbol prefix."""
    np.ones((2, 2)) @ np.ones(2)  # make sure numpy's BLAS is loaded
    try:
        with open("/proc/self/maps", encoding="utf-8") as maps:
            paths = sorted(
                {line.split()[-1] for line in maps if "openblas" in line.lower()}
            )
    except OSError:  # no /proc (not Linux)
        return None
    for path in paths:
        try:
            lib = ctypes.CDLL(path)
        except OSError:
            continue
        for prefix in _PREFIXES:
            for suffix in _SUFFIXES:
                if hasattr(lib, f"{prefix}set_num_threads{suffix}") and hasattr(
                    lib, f"{prefix}get_num_threads{suffix}"
                ):
                    return lib, f"{prefix}%s{suffix}"
    return None


def blas_threads() -> int | None:
    """The threads OpenBLAS uses now (None: no OpenBLAS found)."""
    found = _openblas()
    if found is None:
        return None
    lib, names = found
    return int(getattr(lib, names % "get_num_threads")())


def pin_blas_threads(threads: int | None = None) -> int | None:
    """Set OpenBLAS's threads for this process (default :func:`threads_from_env`);
    returns the count in force, or None when no OpenBLAS was found."""
    count = threads_from_env() if threads is None else threads
    if count < 1:
        raise ValueError(f"threads {count}: at least 1")
    found = _openblas()
    if found is None:
        return None
    lib, names = found
    getattr(lib, names % "set_num_threads")(ctypes.c_int(count))
    return blas_threads()
