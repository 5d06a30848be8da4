"""``make bench``: speed and transport figures, printed as tables and saved as JSON.

Each benchmark runs real processes on a private DDS domain (dds_isolation) and prints
ratios and figures; none of them asserts (targets live in the README's results table)."""
