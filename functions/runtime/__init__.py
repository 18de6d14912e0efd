"""The fleet runtime, in wings: one subpackage per part, each deciding one thing.

- `shared`: what two wings both read — the AdaptivePolicy, the member report's shape,
  the process's metrics endpoint and certificate-expiry gauges. Imports no other wing.
- `kube`: Kubernetes clients and the REST helper every wing talks through.
- `election`: who holds the hub (a Lease per member, a majority of compare-and-swaps).
- `agent`: the member agent — reads its cluster, computes signals and the report,
  counts start failures, keeps the inventory, and runs the hub step while it holds it.
- `hub`: the hub's pure step (phases, planner, decisions) and the acting that writes it.
- `scaler`: the KEDA external-push scaler that serves the hub's floors, fenced.
- `activator`: holds an on-demand model's first request for one placement attempt.
- `operator`: the operator's CLI and fleet status; reads the control plane only.

`cli.py` is the process entry (`modelplane-runtime`) and the only module that may import
every wing. Which wing may import which is held by tests/unit/test_import_rule.py.
Built like the functions: pure decision code (`plan(state, policy, now)`) inside an
imperative shell that talks to Kubernetes and Prometheus.
"""
