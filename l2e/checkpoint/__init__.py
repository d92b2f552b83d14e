"""Meta-parameter checkpoints: the one place they are written (`save_checkpoint`, by `python -m meta_train`)
and read (`restore_checkpoint` on resume, `load_meta_params` / `load_sampler`).

A checkpoint root (e.g. `<run>/checkpoints`) holds one directory per committed step, named by the step
number. A step directory holds three items: `es_state` (orbax: the optimiser state's leaves as {"0": …,
"1": …} in tree-flatten order), `meta_params` (orbax: the MLP's flax params) and `meta` (JSON file
`meta/metadata`: the sampler kind `sampler_kind` ("l2e" when absent), its configuration `sampler`, the outer
iteration, the meta-training config).

Writing is two-phase, so a process killed at any point never leaves a partial step that is read: every item
goes into a staging directory `<root>/.tmp-<step>`, which is fsynced and renamed to `<root>/<step>` (atomic on
POSIX). Only digit-named directories holding all items are read; `clean_staging` removes leftovers.

`load_sampler(name_or_path)` accepts a shipped name (`SHIPPED`: "default" = "transient", "mass", "paper-form", "kinetic",
"meta-sgmcmc", "precond-l2e", "small-l2e"), a
meta-training output directory, its `checkpoints/` directory (latest step taken) or one step directory; with
none it loads the shipped "default". The sampler it returns is the checkpoint's kind (l2e.learned.REGISTRY).
"""
from l2e.checkpoint.read import (
    ITEMS, KEEP_CHECKPOINTS, SHIPPED, CheckpointError, check_complete, check_head_tree, check_kind_params,
    check_meta_params, load_meta_params, load_sampler, read_meta, resolve_checkpoint, resolve_step_dir, sampler_kind,
    shipped_checkpoint,
)
from l2e.checkpoint.write import clean_staging, committed_steps, restore_checkpoint, save_checkpoint

__all__ = ["ITEMS", "KEEP_CHECKPOINTS", "SHIPPED", "CheckpointError", "check_complete", "check_head_tree",
           "check_kind_params", "check_meta_params", "clean_staging", "committed_steps", "load_meta_params",
           "load_sampler", "read_meta", "resolve_checkpoint", "resolve_step_dir", "restore_checkpoint",
           "sampler_kind", "save_checkpoint", "shipped_checkpoint"]
