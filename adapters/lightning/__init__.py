"""Every access det_lightning makes to Lightning's private internals, behind one version table.

- ``versions.py``: the table of Lightning release ranges and what each range's internals look
  like (``SHAPE`` for the installed release); nothing else compares Lightning versions.
- ``lean.py``: the lean per-batch training path (training-epoch ``advance``); ``lean_between.py``
  its ``done`` and ``on_advance_end``; ``lean_step.py`` the training step, backward and optimizer
  step; ``lean_validation.py`` and ``lean_results.py`` the evaluation loop and ``self.log``;
  ``log_count.py`` the count of ``self.log`` calls they read.
- ``hooks.py``: the lean callback-hook dispatch.
- ``internals.py``: the private attributes the adapter uses outside the per-batch path.

Each function here that mirrors one of Lightning's names the release and function it follows.
``tests/integration/test_lightning_contract.py`` checks that what they touch is still there;
``tests/integration/test_hooks.py`` traces the lean pieces against Lightning's own code;
``scripts/test-lightning-releases.sh`` runs both on one release of each row of the table.
(Inside this package ``import lightning`` still means the Lightning distribution: imports are
absolute.)
"""
