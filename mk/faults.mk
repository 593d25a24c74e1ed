# The fault suite in its full form (tests/faults; the reduced form runs inside `make test`):
# kills mid-load, overload, corrupt artifacts, killed builds, bad inputs, slow connections, security
# defaults. Writes docs/reliability.md with the machine named, failing cases included; the target
# fails when a case fails, after the report is written.
.PHONY: faults

faults: venv
	TRITONKIT_FAULTS=full TRITONKIT_FAULTS_REPORT=docs/reliability.md \
	  $(BIN)/python -m pytest -m faults -p no:cacheprovider tests/faults
