"""Each database's own statements and trips, one module per dialect (`sqlite.py`, `postgresql.py`)."""
