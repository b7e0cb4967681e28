"""The shared input layer: prepared-data manifests, per-modality pipelines and synthetic sources."""
