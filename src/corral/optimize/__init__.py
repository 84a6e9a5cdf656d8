"""Optimisation models the policies solve: Gavel's allocation LPs, AlloX's
matching and Hare's relaxation (all with scipy: HiGHS and the Hungarian method)."""
