"""The experiment runner: ``det-lightning run``, ``experiment`` and ``checkpoint``, on top of the
public API (``det_lightning.pytorch``), which never imports it. From the top down::

    cli.py          the ``det-lightning`` command (``python -m det_lightning``)
    experiment.py   an experiment config's trials: the single searcher's, or a search's summary
    search/         searches on Optuna: the worker loop (``_worker``), leases, ASHA, the reporter
    trial.py        ONE trial, as Determined's harness runs it (below the search that runs many)
    plan.py         every check that can fail before the first trial: the ``Plan``
    harness.py      the entrypoint and ``fit()``'s lengths from the config
    config/         loading and validating the experiment config
"""
