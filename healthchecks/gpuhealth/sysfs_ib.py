"""InfiniBand/RoCE ports from sysfs, with no extra dependencies.

Reads ``/sys/class/infiniband/<dev>/ports/<n>/``: ``state`` (``4: ACTIVE``),
``phys_state`` (``5: LinkUp``), ``rate`` (``400 Gb/sec (4X NDR)``),
``link_layer``, and the ``counters/`` the flapping and traffic checks use.
The root is a parameter so tests run on a recorded tree.
"""

from __future__ import annotations

from pathlib import Path

from gpuhealth.samples import IbPortSample

DEFAULT_ROOT = Path("/sys/class/infiniband")


def _word(path: Path) -> str:
    """``4: ACTIVE`` -> ``ACTIVE``."""
    text = path.read_text().strip()
    return text.split(":", 1)[1].strip() if ":" in text else text


def _counter(port: Path, name: str) -> int:
    try:
        return int((port / "counters" / name).read_text().strip())
    except (OSError, ValueError):
        return 0


def _rate(path: Path) -> float:
    try:
        return float(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0


def read_ports(root: Path = DEFAULT_ROOT) -> tuple[IbPortSample, ...]:
    """All ports under ``root``; an absent root means no InfiniBand on this node."""
    if not root.is_dir():
        return ()
    ports = []
    for device in sorted(p for p in root.iterdir() if (p / "ports").is_dir()):
        for port in sorted((device / "ports").iterdir(), key=lambda p: p.name):
            link_layer = (
                (port / "link_layer").read_text().strip()
                if (port / "link_layer").exists()
                else "InfiniBand"
            )
            ports.append(
                IbPortSample(
                    name=f"{device.name}/{port.name}",
                    state=_word(port / "state"),
                    phys_state=_word(port / "phys_state"),
                    rate_gbps=_rate(port / "rate"),
                    link_layer=link_layer,
                    link_downed=_counter(port, "link_downed"),
                    symbol_error=_counter(port, "symbol_error"),
                    link_error_recovery=_counter(port, "link_error_recovery"),
                    # port_*_data counts 4-byte words
                    xmit_bytes=4 * _counter(port, "port_xmit_data"),
                    rcv_bytes=4 * _counter(port, "port_rcv_data"),
                )
            )
    return tuple(ports)
