"""PEP 517 build backend of the sdist: maturin's, after a check that a Rust
toolchain is there. pip uses it only where no wheel fits (every platform but
Linux x86_64 with glibc); without cargo it stops with an error that says
what is missing instead of maturin's "cargo metadata" failure."""

import os
import shutil

import maturin
from maturin import *  # noqa: F401,F403  (every PEP 517 hook maturin defines)

_MESSAGE = (
    "ticketing: no prebuilt wheel fits this platform, and building from source needs a Rust "
    "toolchain (cargo and rustc >= 1.88), which was not found (not on PATH, not in ~/.cargo/bin, "
    "no $CARGO). Install one with https://rustup.rs and retry; "
    "see https://github.com/ticketing-rs/ticketing/blob/main/docs/python.md#platforms"
)


def _cargo() -> str:
    found = os.environ.get("CARGO") or shutil.which("cargo")
    if not found:
        home = os.path.join(os.path.expanduser("~"), ".cargo", "bin", "cargo")
        found = home if os.access(home, os.X_OK) else None
    if not found:
        raise RuntimeError(_MESSAGE)
    return found


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):  # type: ignore[no-untyped-def]
    _cargo()
    return maturin.build_wheel(wheel_directory, config_settings, metadata_directory)


def build_editable(wheel_directory, config_settings=None, metadata_directory=None):  # type: ignore[no-untyped-def]
    _cargo()
    return maturin.build_editable(wheel_directory, config_settings, metadata_directory)


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):  # type: ignore[no-untyped-def]
    _cargo()
    return maturin.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def prepare_metadata_for_build_editable(metadata_directory, config_settings=None):  # type: ignore[no-untyped-def]
    _cargo()
    return maturin.prepare_metadata_for_build_editable(metadata_directory, config_settings)


def get_requires_for_build_wheel(config_settings=None):  # type: ignore[no-untyped-def]
    # maturin would ask for `puccinialin` here, which downloads a Rust
    # toolchain into the build; this package asks for one to be installed.
    _cargo()
    return maturin.get_requires_for_build_wheel(config_settings)


def get_requires_for_build_editable(config_settings=None):  # type: ignore[no-untyped-def]
    _cargo()
    return maturin.get_requires_for_build_editable(config_settings)
