"""The parts of scripts/check-docs.py, one responsibility each (see its docstring)."""
