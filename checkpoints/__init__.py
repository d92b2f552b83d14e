"""Meta-trained samplers shipped with the package, by shipped name (l2e.checkpoint.SHIPPED): "default" = "mass" =
mass/ (Mass-L2E, correct by construction, checkpoints/mass/PROVENANCE.md); "paper-form" = paper_form/ (the
paper-form L2E, checkpoints/paper_form/PROVENANCE.md); "kinetic" = kinetic/ (Kinetic-L2E,
checkpoints/kinetic/PROVENANCE.md); the published rows (issue 17): "meta-sgmcmc" = meta_sgmcmc/ (Meta-SGMCMC),
"precond-l2e" = precond_l2e/ (its parameterisation trained by ES on the BMA loss), "small-l2e" = small_l2e/ (the
paper-form L2E on a smaller task distribution), each with its PROVENANCE.md; "transient" = transient/
(Transient-L2E: learned burn-in, Fisher-preconditioned SGHMC window, tuning-free; checkpoints/transient/PROVENANCE.md)."""
