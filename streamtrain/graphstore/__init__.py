"""The graph store beside the parameter store: adjacency grown from the stream, sampled per batch."""
