"""Contracts every function, the runtime and the tests share.

A label key, port name, Lease name or condition type lives here once and is imported
everywhere it is used, so two components can never disagree about a name.
"""
