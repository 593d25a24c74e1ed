# Kubernetes manifests (k8s/, tests/deploy). checkov lives in its own virtualenv: its many pinned
# dependencies clash with the main one. `make test` creates it on a fresh clone (about 30 s, 290 MB);
# tests/deploy and `tritonkit k8s check` find it at .venv-checkov/bin/checkov.
CHECKOV_VENV := .venv-checkov
CHECKOV_SPEC := checkov>=3.2,<4

.PHONY: checkov k8s-render

checkov: $(CHECKOV_VENV)/.installed

$(CHECKOV_VENV)/.installed: mk/k8s.mk
	test -x $(CHECKOV_VENV)/bin/python || $(PYTHON) -m venv $(CHECKOV_VENV)
	$(CHECKOV_VENV)/bin/pip install -qq '$(CHECKOV_SPEC)'
	touch $@

# Rendered manifests for review: build/k8s/<overlay>.yaml
k8s-render: venv
	mkdir -p build/k8s
	for overlay in t4 dev loadtest; do $(BIN)/tritonkit k8s render --overlay $$overlay --output build/k8s/$$overlay.yaml; done

TEST_DEPS += checkov
