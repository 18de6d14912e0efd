"""compose-model-replica: one ModelReplica becomes the engine workloads on its cluster."""
