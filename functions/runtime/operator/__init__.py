"""The operator's CLI and fleet status: what an on-call reads and asks for
(`modelplane status | explain | retry | suggest`) and the model-health metrics. Reads
the control plane only; it uses no hub or agent internals (`shared` and `kube` only)."""
