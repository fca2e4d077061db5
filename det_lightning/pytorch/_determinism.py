"""Deterministic mode (ours; Determined has none): the same weights from the same seed on a GPU,
run after run, at some cost in speed.

Asked for with ``init(deterministic=True)``, ``--deterministic`` (``add_launch_arguments``,
``det-lightning run``/``experiment``) or ``reproducibility: {deterministic: true}`` in the
experiment config. ``init()`` applies it before it starts the launch, so before anything of
the trial touches CUDA::

    CUBLAS_WORKSPACE_CONFIG=:4096:8         cuBLAS picks deterministic reductions; read when
                                            its first handle is made (kept if already :16:8)
    torch.use_deterministic_algorithms(True)  ops without a deterministic kernel raise
    torch.backends.cudnn.benchmark = False  no autotuning: the same convolution kernels
    torch.backends.cudnn.deterministic = True

Lightning's ``Trainer(deterministic=True)`` sets the same flags, but only when ``fit()`` builds
it: after the trial's ``__init__`` built the model, and possibly after CUDA was initialised.
"""

import logging
import os
from typing import Any, Dict, Mapping, MutableMapping, Optional

import torch

from det_lightning.pytorch._config_sections import ReproducibilityConfig
from det_lightning.pytorch._launch import options_from_environ

logger = logging.getLogger("det_lightning.pytorch")

CUBLAS_ENV = "CUBLAS_WORKSPACE_CONFIG"
CUBLAS_DETERMINISTIC = (":4096:8", ":16:8")  # the two values torch's docs give


def wants_deterministic(
    given: Optional[bool], reproducibility: ReproducibilityConfig, environ: Mapping[str, str]
) -> bool:
    """Whether ``init()`` turns deterministic mode on: its argument, else
    ``$DET_LIGHTNING_DETERMINISTIC`` (``det-lightning run --deterministic``), else the config.

    >>> wants_deterministic(None, ReproducibilityConfig(deterministic=True), {})
    True
    >>> wants_deterministic(False, ReproducibilityConfig(), {"DET_LIGHTNING_DETERMINISTIC": "1"})
    False
    >>> wants_deterministic(None, ReproducibilityConfig(), {"DET_LIGHTNING_DETERMINISTIC": "1"})
    True
    """
    if given is not None:
        return bool(given)
    from_env = options_from_environ(environ).get("deterministic")
    if from_env is not None:
        return bool(from_env)
    return reproducibility.deterministic


def apply_deterministic(environ: Optional[MutableMapping[str, str]] = None) -> None:
    """Switches torch to deterministic algorithms (module doc); ``environ``: ``os.environ``.

    Raises:
        ValueError: ``CUBLAS_WORKSPACE_CONFIG`` is set to a value cuBLAS is not deterministic
            with.
    """
    environ = os.environ if environ is None else environ
    current = environ.get(CUBLAS_ENV)
    if current is not None and current not in CUBLAS_DETERMINISTIC:
        raise ValueError(
            f"Deterministic mode: {CUBLAS_ENV}={current!r} leaves cuBLAS nondeterministic; "
            f"unset it or set it to {CUBLAS_DETERMINISTIC[0]} (or {CUBLAS_DETERMINISTIC[1]})."
        )
    if torch.cuda.is_initialized() and current is None:
        logger.warning(
            f"Deterministic mode: CUDA was initialised before init(); {CUBLAS_ENV} is set now "
            "and holds only if cuBLAS has not started yet. Set it in the environment before "
            "the script runs, or call init() before any CUDA call."
        )
    environ.setdefault(CUBLAS_ENV, CUBLAS_DETERMINISTIC[0])
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True


def deterministic_flags(environ: Optional[Mapping[str, str]] = None) -> Dict[str, Any]:
    """The settings deterministic mode makes, as they are now (what tests and reports show).

    >>> sorted(deterministic_flags({}))
    ['cublas_workspace_config', 'cudnn_benchmark', 'cudnn_deterministic', 'deterministic_algorithms']
    """
    environ = os.environ if environ is None else environ
    return {
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "cudnn_deterministic": torch.backends.cudnn.deterministic,
        "cublas_workspace_config": environ.get(CUBLAS_ENV),
    }
