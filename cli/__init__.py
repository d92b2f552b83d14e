"""What every command line of the project shares (`python -m meta_train`, `python -m evaluate`, the benches): `--set`
overrides on frozen dataclass configurations, the one-line `error:` argument parser, SIGTERM handled like Ctrl-C and
the exit, the top-level guard (every escaping exception one `error:` line, after the failure cleanups), the marker
that makes an output directory "ours", the exclusive lock of an output directory, publishing a directory of outputs
atomically as a set (stale staging directories removed) and the resource limits of the command lines.

Layer: above the sampler library and the task layer (it imports only `base.io`), below meta_train, evaluate and bench;
the sampler library has no command line.
"""
from cli.guard import guarded, held_warnings
from cli.lock import DirectoryLock, LockHeldError
from cli.outputs import MARKER, OutputLock, read_marker, require_ours, write_marker
from cli.overrides import SEED_RANGE, apply_overrides, check_seed
from cli.process import OneLineErrorParser, Terminated, exit_cli, handle_sigterm
from cli.publish import discard_staging, publish_dir, resolve_output, staging_dir, stale_staging

__all__ = ["DirectoryLock", "LockHeldError", "MARKER", "OneLineErrorParser", "OutputLock", "SEED_RANGE", "Terminated",
           "apply_overrides", "check_seed", "discard_staging", "exit_cli", "guarded", "handle_sigterm", "held_warnings",
           "publish_dir", "read_marker", "require_ours", "resolve_output", "staging_dir", "stale_staging",
           "write_marker"]
