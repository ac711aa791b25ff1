"""Training edge of specdec-lab: a byte-level corpus and the target/draft pair trained on it.

Nothing here is imported by `reference/`; it only produces the weights in `models/`
(config.json + model.safetensors + metadata.json) that the reference loads.
"""
