"""Meta-trained samplers shipped with the package, by shipped name (l2e.checkpoint.SHIPPED): "default" = "mass" =
mass/ (Mass-L2E, correct by construction, checkpoints/mass/PROVENANCE.md); "paper-form" = paper_form/ (the
paper-form L2E, checkpoints/paper_form/PROVENANCE.md); "kinetic" = kinetic/ (Kinetic-L2E,
checkpoints/kinetic/PROVENANCE.md)."""
