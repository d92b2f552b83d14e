"""Meta-trained samplers shipped with the package, by shipped name (l2e.checkpoint.SHIPPED): "default" and
"paper-form" = default/ (the paper-form L2E, checkpoints/default/PROVENANCE.md); "kinetic" = kinetic/ (Kinetic-L2E,
checkpoints/kinetic/PROVENANCE.md)."""
