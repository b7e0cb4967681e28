"""Blocks shared by workloads (attention for the translation models, backbones for the vision models)."""
