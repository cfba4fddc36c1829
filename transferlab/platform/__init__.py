"""What both domains share: configs, run store, metrics logging, the CLI."""
