# NVIDIA's example programs are run as programs by tests/serve/test_nvidia_examples.py, never
# collected: `memory_growth_test.py` matches pytest's `*_test.py` pattern.
collect_ignore_glob = ["*.py"]
