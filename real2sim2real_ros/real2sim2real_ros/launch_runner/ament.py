"""Package lookups in the ament index, with every failure turned into a LaunchError."""
from __future__ import annotations

from .errors import LaunchError


def package_prefix(package: str, where: str | None, what: str = '') -> str:
    """The install prefix of ``package`` (where ``lib/<package>/`` holds its executables)."""
    try:
        from ament_index_python.packages import PackageNotFoundError, get_package_prefix
    except ImportError:  # pragma: no cover - ament_index_python ships with rclpy
        raise LaunchError('ament_index_python is not importable; cannot find packages',
                          where) from None
    try:
        return get_package_prefix(package)
    except PackageNotFoundError:
        raise LaunchError(f"package '{package}'{what} not found in AMENT_PREFIX_PATH "
                          '(is the workspace sourced?)', where) from None
    except (OSError, ValueError) as exc:  # AMENT_PREFIX_PATH unset; an invalid package name
        raise LaunchError(f"cannot look up package '{package}'{what}: {exc}", where) from None


def package_share(package: str, where: str | None, what: str = '') -> str:
    """``<prefix>/share/<package>``, as ament_index_python.get_package_share_directory."""
    import os
    return os.path.join(package_prefix(package, where, what), 'share', package)
