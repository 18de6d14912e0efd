"""compose-serving-stack: an InferenceCluster becomes everything its member cluster runs."""
