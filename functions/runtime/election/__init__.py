"""The hub election: which member's agent holds the hub. One Lease per member, a
candidate holds only with compare-and-swap writes on a majority of the configured
members, reads take the holder most members name. Uses `shared` and `kube` only."""
