"""Dataset loaders by source: `images` (local image files and generators), `tfds` (tensorflow_datasets),
`tabular` (scikit-learn tables), `uci` (regression sets); `base` holds `Dataset`, `DatasetError` and the file
readers.  The classification registry and `load_dataset` are in tasks.datasets."""
