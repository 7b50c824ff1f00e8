"""The ``rlix`` command line."""
