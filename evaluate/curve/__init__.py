"""Budget curves (`python -m evaluate curve`): fidelity to a NUTS reference per gradient, the K-draw floor, chain
allocation and the gradients each method needs to reach the floor (run: the orchestration; fidelity: the
distances, floors and interpolation; report: curve.md and the PNGs; cli: the command)."""
