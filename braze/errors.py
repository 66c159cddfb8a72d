"""The braze exception hierarchy: every error a user can meet is a `braze.Error`."""

from __future__ import annotations


class Error(Exception):
    """Base class of every error raised by braze."""


class FusionDefinitionError(Error, ValueError):
    """A fusion was defined wrongly: shapes that cannot broadcast, an axis out of range, a bad dtype."""


class InputError(Error, ValueError):
    """The inputs given to `execute` (or a jitted function) do not match the definition."""


class UnsupportedError(Error, NotImplementedError):
    """A construct or op that braze does not support (yet)."""


class CompileError(Error, RuntimeError):
    """A kernel failed to compile; the message names the kernel and holds the compiler's log."""


class CudaError(Error, RuntimeError):
    """A CUDA driver call failed; the message names the call and the driver's error."""


class HostJitWarning(RuntimeWarning):
    """The host JIT could not compile a shape function; braze runs it in Python instead (slower, same values)."""


class DiskCacheWarning(RuntimeWarning):
    """braze refused a cache folder another user owns or can write; the disk cache is off for the process."""


class KernelError(Error):
    """The source of a `@bz.kernel` cannot be compiled; the message names the file, line and source."""


class KernelSyntaxError(KernelError, SyntaxError):
    """A construct the kernel language does not support, an unknown function, an invalid assignment."""


class KernelTypeError(KernelError, TypeError):
    """A type mismatch in a kernel, or an index with the wrong number of dimensions."""


class KernelAssertionError(Error, IndexError):
    """A check of `@bz.kernel(debug=True)` failed while the kernel ran (an index out of bounds)."""


class SerialLoopWarning(RuntimeWarning):
    """A loop of a `@bz.kernel` runs on one thread where the user probably meant it to run in parallel."""


def a_or_an(word: str) -> str:
    """`word` after its indefinite article, for messages: 'an int32', 'a float32'."""
    return f"{'an' if word[:1].lower() in 'aeiou' else 'a'} {word}"
