"""DLCB."""
