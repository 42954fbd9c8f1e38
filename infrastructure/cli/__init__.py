"""The ``runledger`` command line.

``app`` holds the typer app and its commands; each command's work lives in a module of its own
(``demo_story`` for ``demo``, ``operations`` for ``projections``, the ``bench``
package for ``bench``), and ``render`` holds the tables and narration they print.
"""
