"""Meta-trained L2E samplers shipped with the package (see checkpoints/default/PROVENANCE.md)."""
