"""``runledger bench``: ``runner`` measures the built-in rows beside ``baselines``, each
other row's module (``threads``, ``projections``, ``audit``, ``serve``, ``telemetry``,
``poolers``, ``replicas``) joins through ``extra_rows``, and ``report`` runs them with a
progress bar and prints the results.

Nothing here is imported at the CLI's start: ``app`` imports ``report`` inside the ``bench``
command, so the rows' own dependencies load only for a bench run.
"""
