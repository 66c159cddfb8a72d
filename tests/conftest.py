"""Test-wide settings. Under CI, hypothesis replays the same examples every run (derandomized), so
a submission's result does not depend on the luck of the draw; locally it keeps exploring."""

import os

from hypothesis import settings

settings.register_profile("ci", derandomize=True, print_blob=True)
if os.environ.get("CI"):
    settings.load_profile("ci")
