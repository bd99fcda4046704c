"""Command-line commands of this package; ``compressor.cli`` calls ``register``."""


def register(cli):
    """Add this package's commands to the ``compressor`` command group."""
