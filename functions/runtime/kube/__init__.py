"""Kubernetes client helpers: how the runtime builds a client and makes a raw request.
It decides nothing about what is read or written; every wing may use it."""
