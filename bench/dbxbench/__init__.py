"""dbx-mount's benchmark runner (bench/run.py is its command): one module per part."""
