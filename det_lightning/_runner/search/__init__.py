"""Hyperparameter search on Optuna with Determined's searcher semantics (``adaptive_asha``)."""
