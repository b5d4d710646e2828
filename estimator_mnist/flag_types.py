"""argparse types shared by the commands' flags: each refuses a bad value with one line naming it."""

from __future__ import annotations

import argparse


def positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return value


def port(text: str) -> int:
    value = positive(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (1-65535)")
    return value


def port_or_off(text: str) -> int:
    return 0 if text.strip() == "0" else port(text)


def milliseconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 1000:
        raise argparse.ArgumentTypeError(f"{text!r} is not a wait from 0 to 1000 ms")
    return value


def seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"{text!r} is not a time from 0 to 3600 s")
    return value


def model_name(text: str) -> str:
    if not text or "/" in text or ":" in text:  # Serving's paths take the name as [^/:]+
        raise argparse.ArgumentTypeError(f"{text!r} cannot be a model name in a URL: no '/' or ':'")
    return text
