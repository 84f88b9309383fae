"""Checks against real upstream components, built from their Go modules at pinned versions.

One module per concern: `versions` pins what is built, `toolchain` builds it
into a cache outside the clone, `conformance` drives the real Crossplane CLI.
"""
