"""The KEDA external-push scaler: which replica floor KEDA sees. A floor is served only
in `auto` mode, before the intent expires, and while the intent's hub holds this
member's Lease copy; anything else is floor 0. Uses `shared` and `kube` only."""
