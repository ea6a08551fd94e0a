"""Operator CONTROL frames are bound to one deployment and one party, carry a nonce a
party takes once, and are refused when stale or future-dated, without side effects.

Every party here is a real :class:`esa.net.PartyService` with its real SQLite inbox,
served over in-memory streams (the frames are the bytes a socket would carry).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

import crypto
from esa.net import CONTROL_MAX_SKEW_MS, CONTROL_WINDOW_MS, FrameStream, PartyService
from esa.net import _wire as w
from esa.net._config import config_from_dict
from esa.net._manifest import make_manifest

OPERATOR = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
PUB = OPERATOR.public_key().public_bytes_raw()
PROTO = {"name": "hist_kr", "epsilon": 1.0, "delta": 1e-6, "n": 1000, "domain": 4}
Client = Callable[[], Awaitable[FrameStream]]


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("binding")
    keys = crypto.KeyDirectory.create(base / "keys", shufflers=2)
    for name in ("a", "b"):  # two deployments sharing the operator key and the keys
        manifest = make_manifest(
            protocol={**PROTO, "bound": None, "fake_reports": 0, "options": {}},
            keys=keys,
            key_epoch=1,
            channels=1,
            operator_key=PUB,
        )
        (base / f"manifest-{name}.json").write_bytes(manifest.sign(OPERATOR))
    return base


def _party(root: Path, state: str, *, hop: int = 0, deployment: str | None = "a") -> PartyService:
    doc: dict[str, Any] = {
        "role": "shuffler",
        "hop": hop,
        "state_dir": state,
        "listen": {"host": "127.0.0.1", "port": 0},
        "next": {"host": "127.0.0.1", "port": 9},
        "tls": {"insecure_plaintext": True},
        "keys": {"epochs": {"1": "keys"}},
        "operator": {"public_key": PUB.hex()},
        "protocol": dict(PROTO),
    }
    if deployment is not None:
        doc["manifest"] = f"manifest-{deployment}.json"
    return PartyService(config_from_dict(doc, base=root, simulation=True))


def _drive(svc: PartyService, script: Callable[[Client], Awaitable[None]]) -> None:
    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(svc._writer_loop)

            async def connect() -> FrameStream:
                client, server = trio.testing.memory_stream_pair()
                nursery.start_soon(svc.handle, server)
                return FrameStream(client, max_frame=2**20, read_timeout=30.0)

            await script(connect)
            nursery.cancel_scope.cancel()

    try:
        trio.run(main)
    finally:
        svc.close()


def _frame(svc: PartyService, *, skew_ms: int = 0, **kw: Any) -> w.ControlFrame:
    fields: dict[str, Any] = {
        "target": svc.party_name,
        "deployment_id": svc.config.deployment_id,
        **kw,
    }
    return w.ControlFrame(w.ControlCommand.CLOSE_EPOCH, int(time.time() * 1000) + skew_ms, **fields)


async def _send(connect: Client, frame: w.ControlFrame) -> bytes:
    fs = await connect()
    await fs.send(frame.sign(OPERATOR))
    return await fs.receive()


def _reason(payload: bytes) -> str:
    assert w.peek_kind(payload) is w.FrameKind.REJECT, payload
    return w.parse_reject(payload).reason.name.lower()


def test_a_close_for_deployment_a_is_refused_by_deployment_b(root: Path) -> None:
    a = _party(root, "state-a", deployment="a")
    b = _party(root, "state-b", deployment="b")
    assert a.config.deployment_id != b.config.deployment_id
    for_a = _frame(a)
    a.close()

    async def script(connect: Client) -> None:
        reply = await _send(connect, for_a)  # same operator key, same party name
        # Its own reason (not wrong_hop, which is a batch's or a report's), counted in STATUS.
        assert _reason(reply) == "wrong_target"
        assert "deployment" in w.parse_reject(reply).detail
        assert (await b.status())["rejected"].get("wrong_target") == 1
        assert w.parse_ack(await _send(connect, _frame(b))) == w.Ack(1, 0)

    _drive(b, script)


def test_a_close_for_party_x_is_refused_by_party_y(root: Path) -> None:
    y = _party(root, "state-y", hop=1)
    assert y.party_name == "shuffler-2"

    async def script(connect: Client) -> None:
        reply = await _send(connect, _frame(y, target="shuffler-1"))
        assert _reason(reply) == "wrong_target"
        assert "'shuffler-1'" in w.parse_reject(reply).detail
        assert (await y.status())["rejected"].get("wrong_target") == 1

    _drive(y, script)


def test_a_replayed_nonce_is_refused_also_after_a_restart(root: Path) -> None:
    svc = _party(root, "state-replay")
    nonce = bytes(range(16))
    first = _frame(svc, nonce=nonce)

    async def script(connect: Client) -> None:
        assert w.parse_ack(await _send(connect, first)) == w.Ack(1, 0)
        assert _reason(await _send(connect, first)) == "stale_control"  # the same bytes
        # A newer stamp, re-signed, with the nonce already taken: still refused.
        assert _reason(await _send(connect, _frame(svc, skew_ms=5, nonce=nonce))) == (
            "stale_control"
        )
        assert w.parse_ack(await _send(connect, _frame(svc))) == w.Ack(1, 0)

    _drive(svc, script)
    again = _party(root, "state-replay")

    async def replay(connect: Client) -> None:
        assert _reason(await _send(connect, first)) == "stale_control"

    _drive(again, replay)


def test_a_future_dated_close_is_refused_and_poisons_nothing(root: Path) -> None:
    """290 s ahead: refused (the skew allowed is CONTROL_MAX_SKEW_MS), and a correctly
    timed close right after is accepted, before and after a restart."""
    assert CONTROL_MAX_SKEW_MS == 30_000
    svc = _party(root, "state-future")
    ahead = _frame(svc, skew_ms=290_000)

    async def script(connect: Client) -> None:
        reply = await _send(connect, ahead)
        assert _reason(reply) == "stale_control"
        assert "ahead" in w.parse_reject(reply).detail
        assert w.parse_ack(await _send(connect, _frame(svc))) == w.Ack(1, 0)
        # Within the skew: accepted, and an earlier-stamped command after it too.
        assert w.parse_ack(await _send(connect, _frame(svc, skew_ms=20_000))) == w.Ack(1, 0)
        assert w.parse_ack(await _send(connect, _frame(svc))) == w.Ack(1, 0)

    _drive(svc, script)
    assert svc.inbox is not None
    again = _party(root, "state-future")

    async def after_restart(connect: Client) -> None:
        assert _reason(await _send(connect, ahead)) == "stale_control"
        assert w.parse_ack(await _send(connect, _frame(again))) == w.Ack(1, 0)

    _drive(again, after_restart)


def test_the_freshness_window_refuses_a_stale_frame(root: Path) -> None:
    """A frame just past CONTROL_WINDOW_MS is refused; one just inside it is taken (this
    fails if the window check is removed)."""
    svc = _party(root, "state-window")
    stale = _frame(svc, skew_ms=-(CONTROL_WINDOW_MS + 5_000))
    fresh = _frame(svc, skew_ms=-(CONTROL_WINDOW_MS - 30_000))

    async def script(connect: Client) -> None:
        reply = await _send(connect, stale)
        assert _reason(reply) == "stale_control"
        assert "older than" in w.parse_reject(reply).detail
        assert w.parse_ack(await _send(connect, fresh)) == w.Ack(1, 0)

    _drive(svc, script)


def test_a_party_without_manifest_takes_only_the_zero_deployment(root: Path) -> None:
    svc = _party(root, "state-none", deployment=None)
    assert svc.config.deployment_id == bytes(16)

    async def script(connect: Client) -> None:
        other = _frame(svc, deployment_id=b"\x01" * 16)
        assert _reason(await _send(connect, other)) == "wrong_target"
        assert w.parse_ack(await _send(connect, _frame(svc))) == w.Ack(1, 0)

    _drive(svc, script)
