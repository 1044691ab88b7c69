pytest_plugins = ["skip_gate"]  # skips fail under SHOAL_TEST_NO_SKIP=1 (skip_gate.py)
