"""The REST API (and, later, the web dashboard) of the live service."""
