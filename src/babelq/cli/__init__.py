"""The ``babelq`` command line (entry point :func:`babelq.cli.main.main`)."""
