"""What a run is asked to do: the typed config, its files and overrides, the command line, the
strategy registry."""
