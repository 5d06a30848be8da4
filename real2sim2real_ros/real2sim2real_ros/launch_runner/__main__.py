"""``python -m real2sim2real_ros.launch_runner FILE [name:=value ...]`` = ``r2s2r launch``."""
import sys

from .cli import main

sys.exit(main())
