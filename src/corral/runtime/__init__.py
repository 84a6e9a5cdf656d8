"""The live scheduler: service loop, state store and executors."""
