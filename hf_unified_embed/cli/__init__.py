"""The ``hf-unified-embed`` command line: one module per group of subcommands."""
