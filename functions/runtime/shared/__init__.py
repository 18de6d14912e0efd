"""What the runtime's wings share: the AdaptivePolicy they all read, the shape of the
member report the agent writes and the hub reads, the metrics endpoint and certificate
gauges every runtime process serves. It decides nothing and imports no other wing."""
