"""Evaluation against emulated cells' hidden truth (the harness behind ``r2s2r evaluate``)."""
