"""The on-demand activator: what a request for a model that has no replica gets. It
holds the request for one placement attempt and answers with the model's reason when
it cannot be placed. Uses `shared` and `kube` only."""
