"""Coding experiments: does it learn (:mod:`.learn`), dense vs sparse and ablations (:mod:`.agent`)."""
