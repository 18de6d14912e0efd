"""The fleet hub: what the fleet should do next. A pure step over the members' reports
(`plan(state, policy, now) -> decision`: waiting, missing, candidates, allocation,
traffic, release), the ranking advisor, the decision log, and the acting that writes
decisions with a fencing token. Uses `shared` and `kube` only; it never reads the
agent's internals — the report is its input."""
