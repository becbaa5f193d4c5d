"""What every benchmark shares, one module per noun (`bench/README.md`); this file imports nothing."""
