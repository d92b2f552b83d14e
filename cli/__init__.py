"""What every command line of the project shares (`python -m meta_train`, `python -m evaluate`, the benches): `--set`
overrides on frozen dataclass configurations, the one-line `error:` argument parser, SIGTERM handled like Ctrl-C and
the exit, the exclusive lock of an output directory, and publishing a directory of outputs atomically as a set.

Layer: above the sampler library and the task layer (it imports only `l2e.io`), below meta_train, evaluate and bench;
the sampler library has no command line.
"""
from cli.lock import DirectoryLock, LockHeldError
from cli.overrides import SEED_RANGE, apply_overrides, check_seed
from cli.process import OneLineErrorParser, Terminated, exit_cli, handle_sigterm
from cli.publish import publish_dir, staging_dir

__all__ = ["DirectoryLock", "LockHeldError", "OneLineErrorParser", "SEED_RANGE", "Terminated", "apply_overrides",
           "check_seed", "exit_cli", "handle_sigterm", "publish_dir", "staging_dir"]
