"""The serving protocol's timeouts, sans sockets, with limits of a tenth of a second on a virtual clock.

The loop's clock moves only while it waits (tests.server.fakes.VirtualClockLoop), so a sleep
and a timer fire in the order of their deadlines however busy the machine is: a test asserts
what happens, never how fast."""

from __future__ import annotations

import asyncio
from typing import Any

import orjson

from proxy.server.protocol import ServerLimits
from tests.server.fakes import Conn, Echo, VirtualClockLoop, responses

T = 0.1  # every limit's unit
LIMITS = ServerLimits(head_timeout_s=T, body_timeout_s=T, idle_timeout_s=3 * T, send_timeout_s=T)
REQUEST = b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"


def run(test: Any) -> Any:
    with asyncio.Runner(loop_factory=VirtualClockLoop) as runner:
        return runner.run(test())


def timed_out(conn: Conn) -> bool:
    [(status, _, body)] = responses(conn.transport.written)
    return status == 408 and orjson.loads(body)["error"]["code"] == "request_timeout"


def test_a_connection_that_sends_nothing_is_closed_after_the_head_timeout() -> None:
    async def main() -> None:
        conn = Conn(Echo(LIMITS))
        assert await conn.wait_closed(20 * T) and timed_out(conn)

    run(main)


def test_a_trickled_head_is_closed_from_its_start_not_its_last_byte() -> None:
    async def main() -> None:
        conn = Conn(Echo(LIMITS))
        t0 = conn.loop.time()
        for byte in REQUEST[:30]:
            if conn.transport.closed:
                break
            await conn.feed([bytes([byte])])
            await asyncio.sleep(T / 5)
        assert await conn.wait_closed(20 * T) and timed_out(conn)
        assert conn.loop.time() - t0 < 30 * T * 0.2 + 20 * T  # it did not wait for the trickle to end

    run(main)


def test_the_next_heads_clock_starts_at_its_first_byte_not_at_the_previous_response() -> None:
    app = Echo(LIMITS)

    async def main() -> None:
        conn = Conn(app)
        await conn.feed([REQUEST])
        await asyncio.sleep(2 * T)  # idle, within the idle timeout: longer than a head may take
        await conn.feed([REQUEST[:10]])
        assert not conn.transport.closed
        assert await conn.wait_closed(20 * T)
        assert [s for s, _, _ in responses(conn.transport.written)] == [200, 408]

    run(main)
    assert len(app.seen) == 1


def test_an_idle_keep_alive_connection_is_closed_after_the_idle_timeout() -> None:
    async def main() -> None:
        conn = Conn(Echo(LIMITS))
        await conn.feed([REQUEST])
        await asyncio.sleep(T)
        assert not conn.transport.closed  # the idle timeout is longer than the head's
        assert await conn.wait_closed(30 * T)
        assert [s for s, _, _ in responses(conn.transport.written)] == [200]  # closed, no answer

    run(main)


def test_a_stalled_body_is_closed_and_the_app_hears_the_client_left() -> None:
    app = Echo(LIMITS)

    async def main() -> None:
        conn = Conn(app)
        await conn.feed([REQUEST.replace(b"Length: 2", b"Length: 50")])
        assert await conn.wait_closed(20 * T) and timed_out(conn)

    run(main)
    assert app.seen == [] and app.events == ["lost", "disconnect"]


def test_a_slow_but_steady_body_is_not_cut() -> None:
    app = Echo(LIMITS)
    body = b'{"a": "' + b"x" * 20 + b'"}'

    async def main() -> None:
        conn = Conn(app)
        await conn.feed([REQUEST.replace(b"Length: 2\r\n\r\n{}", b"Length: %d\r\n\r\n" % len(body))])
        for byte in body:  # 30 gaps of half the body timeout: 15 timeouts' worth in all
            await asyncio.sleep(T / 2)
            await conn.feed([bytes([byte])], settle=False)
        await conn.settle()
        assert [s for s, _, _ in responses(conn.transport.written)] == [200] and not conn.transport.closed

    run(main)
    assert app.seen[0][1] == body


def test_a_body_the_server_stopped_reading_is_not_the_clients_delay() -> None:
    async def main() -> None:
        conn = Conn(Echo(LIMITS))
        await conn.feed([REQUEST.replace(b"Length: 2", b"Length: 50")])
        conn.protocol.flow.pause_reading()  # as uvicorn does while the app has a body it did not take
        await asyncio.sleep(5 * T)
        assert not conn.transport.closed
        conn.protocol.flow.resume_reading()
        assert await conn.wait_closed(20 * T) and timed_out(conn)

    run(main)


def test_a_client_that_reads_nothing_is_aborted_and_the_app_told() -> None:
    app = Echo(LIMITS, stream=True)

    async def main() -> None:
        conn = Conn(app)
        await conn.feed([REQUEST])
        assert conn.transport.written.startswith(b"HTTP/1.1 200 ")
        conn.transport.backlog = 1 << 20
        conn.protocol.pause_writing()  # the socket's buffer is full and stays so
        assert await conn.wait_closed(20 * T) and conn.transport.aborted

    run(main)
    assert app.events == ["lost"]


def test_a_client_that_reads_slowly_is_kept_and_one_that_catches_up_too() -> None:
    app = Echo(LIMITS, stream=True)

    async def main() -> None:
        conn = Conn(app)
        await conn.feed([REQUEST])
        conn.transport.backlog = 1 << 20
        conn.protocol.pause_writing()
        for _ in range(10):  # a little read per send timeout: slow, not gone
            await asyncio.sleep(T / 2)
            conn.transport.backlog -= 1000
        assert not conn.transport.closed
        conn.protocol.resume_writing()  # it caught up
        await asyncio.sleep(5 * T)
        assert not conn.transport.closed
        conn.protocol.pause_writing()  # and stalls for good
        assert await conn.wait_closed(20 * T) and conn.transport.aborted

    run(main)


def test_a_request_read_whole_arms_no_timer() -> None:
    """The relay's common case costs no timer: a head and body in one chunk arm nothing."""
    async def main() -> None:
        conn = Conn(Echo(LIMITS))
        conn.protocol.data_received(REQUEST)
        p: Any = conn.protocol
        assert p._head_timer is None and p._body_timer is None and p._send_timer is None

    run(main)


def test_a_connection_answered_before_its_body_ended_still_times_out_idle() -> None:
    async def early(scope: Any, receive: Any, send: Any) -> None:  # as the relay's 413 for a body too large
        await send({"type": "http.response.start", "status": 413, "headers": [(b"content-length", b"0")]})
        await send({"type": "http.response.body", "body": b""})

    early.server_limits = LIMITS  # type: ignore[attr-defined]

    async def main() -> None:
        conn = Conn(early)
        await conn.feed([REQUEST.replace(b"Length: 2\r\n\r\n{}", b"Length: 4\r\n\r\n{")])
        await conn.feed([b'"x', b"}"])  # the rest of the body, after the answer
        assert not conn.transport.closed
        assert await conn.wait_closed(30 * T)
        assert [s for s, _, _ in responses(conn.transport.written)] == [413]

    run(main)
