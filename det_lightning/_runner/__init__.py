"""The experiment runner: ``det-lightning run``, ``experiment`` and ``checkpoint``, on top of the
public API (``det_lightning.pytorch``), which never imports it. From the top down::

    cli.py          the ``det-lightning`` command (``python -m det_lightning``)
    experiment.py   an experiment config's trials: the single searcher's, or a search's summary
    search/         searches on Optuna: the worker loop (``_worker``), the reporter, the grid
    trial.py        ONE trial, as Determined's harness runs it (below the search that runs many;
                    ``tests/unit/test_import_graph.py`` checks it never reaches ``search/``)
    plan.py         every check that can fail before the first trial: the ``Plan``
    _template.py    the warm template process a trial's process is forked from
    _lease.py       leases on a search's trials (``LeaseLost``: a trial taken over)
    _tensorboard.py a trial's hyperparameters for TensorBoard's HParams view
    _search_settings.py, _asha.py   a searcher section as a value; ASHA's brackets and rule
    harness.py      the entrypoint and ``fit()``'s lengths from the config
    config/         loading and validating the experiment config
"""
