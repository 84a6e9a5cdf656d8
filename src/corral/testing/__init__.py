"""Helpers for testing and benchmarking corral itself (a service run as a process).

This package sits above the service's parts: it may import the API client and the
runtime alike, which the runtime itself never does (it never imports ``corral.api``).
"""
