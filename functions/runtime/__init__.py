"""The fleet runtime: member agent, hub election and decisions, the KEDA scaler.

Built like the functions: pure decision code (`plan(state, policy, now)`) inside an
imperative shell that talks to Kubernetes and Prometheus.
"""
