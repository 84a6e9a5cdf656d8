"""Predicting what users do not say: job-size distributions (Gittins)."""
