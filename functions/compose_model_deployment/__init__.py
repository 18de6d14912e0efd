"""compose-model-deployment: a ModelDeployment becomes one ModelReplica per cluster used."""
