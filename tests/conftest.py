"""Test-wide settings.

- The whole run uses a disk cache of its own, a temporary folder removed at exit: the tests never
  read or write the user's `~/.cache/braze` (or a `BRAZE_CACHE_DIR` set outside). It is set in the
  environment before braze is imported, so `braze.config.current` and every subprocess a test
  starts see it.
- Under CI, hypothesis replays the same examples every run (derandomized), so a submission's
  result does not depend on the luck of the draw; locally it keeps exploring.
"""

import atexit
import dataclasses
import os
import shutil
import tempfile
from pathlib import Path

TEST_CACHE_DIR = tempfile.mkdtemp(prefix="braze-test-cache-")
os.environ["BRAZE_CACHE_DIR"] = TEST_CACHE_DIR
atexit.register(shutil.rmtree, TEST_CACHE_DIR, ignore_errors=True)

from hypothesis import settings  # noqa: E402

from braze import config  # noqa: E402  (after the cache folder is in the environment)

# braze may have been imported before this file (a plugin): its knobs were read already.
config.current = dataclasses.replace(config.current, cache_dir=Path(TEST_CACHE_DIR))

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
