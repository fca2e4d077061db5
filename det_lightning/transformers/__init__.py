"""``det_lightning.transformers`` (``determined.transformers``): ``DetCallback`` for a Hugging
Face ``transformers.Trainer`` loop on the Core API. Needs ``transformers`` (and the
``accelerate`` its ``Trainer`` needs): ``pip install 'det-lightning[transformers]'``."""

try:
    import transformers as _transformers  # noqa: F401  (the error below names the fix)
except ModuleNotFoundError as e:
    if e.name != "transformers":
        raise
    raise ModuleNotFoundError(
        "det_lightning.transformers (determined.transformers) needs Hugging Face transformers, "
        "which is not installed here. Fix: pip install 'det-lightning[transformers]' (or "
        "pip install transformers accelerate).",
        name="transformers",
    ) from None

from det_lightning.transformers._hf_callback import DetCallback

__all__ = ["DetCallback"]
