# perf_analyzer 2.60 (PyPI wheel, glibc >= 2.38) made runnable here for the tests that run it against the
# embedded server; best effort: they skip with the reason in .cache/perf_analyzer/UNAVAILABLE otherwise.
.PHONY: perf-analyzer
TEST_DEPS += perf-analyzer

perf-analyzer: venv
	@scripts/perf_analyzer/setup.sh
