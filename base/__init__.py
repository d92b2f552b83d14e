"""The base layer: project-wide plumbing that every package above imports and that imports none of ours.

`base.io`: ConfigError and its one-line message, bounded JSON reading with one-line errors, rebuilding a frozen
dataclass from its JSON dict, and atomic file writes. Layers (docs/decisions.md): base ← l2e ← tasks ← cli ←
meta_train / evaluate ← bench.
"""
