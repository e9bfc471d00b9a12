"""A stand-in for Mollie's payments API, for scripts/bench's Mollie phase: over HTTPS (a CA of
the bench's own, as the tests' emulator has), `GET /v2/payments/tr_{n}` with the configured
`Authorization: Bearer` key answers payment tr_{n} as paid for order n, in USD, 1000 + n % 1000
cents (the orders scripts/bench creates, the events src/bin/loadgen.rs sends); another key is
401, any other path 404.

Each answer waits DELAY_MS first, as a real API's round trip does. It is what lets the phase
show where a fetch waits: with every fetch in flight for DELAY_MS, fetches that each held a
database connection could not go faster than pool_size / DELAY_MS deliveries a second, nor be
more at once than the pool has connections. `GET /stats` answers what it served: requests,
the most answers it held at once (in_flight_max), and the delay.

One asyncio thread, HTTP/1.1 keep-alive (the gateway keeps its connections to the API open), so
it costs the cores it shares with the gateway and PostgreSQL as little as Python can.

    python3 bench/mollie_api.py PORT CERT_PEM KEY_PEM API_KEY DELAY_MS
"""

import asyncio
import json
import ssl
import sys

PREFIX = "/v2/payments/tr_"


class Api:
    def __init__(self, api_key, delay_ms):
        self.authorization = f"Bearer {api_key}"
        self.delay = delay_ms / 1000.0
        self.delay_ms = delay_ms
        self.requests = 0
        self.in_flight = 0
        self.in_flight_max = 0

    def answer(self, path, headers):
        if path == "/stats":
            return 200, {"requests": self.requests, "in_flight_max": self.in_flight_max,
                         "delay_ms": self.delay_ms}
        if headers.get("authorization") != self.authorization:
            return 401, {"status": 401, "title": "Unauthorized Request",
                         "detail": "Missing authentication, or failed to authenticate"}
        number = path[len(PREFIX):] if path.startswith(PREFIX) else ""
        if not number.isdigit():
            return 404, {"status": 404, "title": "Not Found",
                         "detail": "No payment exists with token " + path.rsplit("/", 1)[-1]}
        n = int(number)
        cents = 1000 + n % 1000
        value = f"{cents // 100}.{cents % 100:02d}"
        return 200, {
            "resource": "payment", "id": f"tr_{n}", "mode": "test",
            "createdAt": "2026-12-01T10:00:00+00:00", "paidAt": "2026-12-01T10:00:05+00:00",
            "status": "paid", "isCancelable": False,
            "amount": {"value": value, "currency": "USD"},
            "amountRefunded": {"value": "0.00", "currency": "USD"},
            "amountRemaining": {"value": value, "currency": "USD"},
            "description": f"Order {n}", "method": "ideal",
            "metadata": {"order_id": str(n)}, "profileId": "pfl_bench", "sequenceType": "oneoff",
            "redirectUrl": "https://shop.example/return",
            "webhookUrl": "https://gateway.example/v1/callbacks/mollie",
            "_links": {"self": {"href": f"https://api.mollie.com/v2/payments/tr_{n}",
                                "type": "application/hal+json"}},
        }

    async def serve(self, reader, writer):
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                path = lines[0].split(" ")[1] if lines[0].count(" ") >= 2 else ""
                # The gateway asks with embed=chargebacks; the payment is the same resource.
                path = path.split("?", 1)[0]
                headers = {}
                for line in lines[1:]:
                    name, sep, value = line.partition(":")
                    if sep:
                        headers[name.strip().lower()] = value.strip()
                length = int(headers.get("content-length", "0") or "0")
                if length:
                    await reader.readexactly(length)
                counted = path != "/stats"
                if counted:
                    self.requests += 1
                    self.in_flight += 1
                    self.in_flight_max = max(self.in_flight_max, self.in_flight)
                    if self.delay:
                        await asyncio.sleep(self.delay)
                    self.in_flight -= 1
                status, body = self.answer(path, headers)
                data = json.dumps(body).encode()
                writer.write(
                    f"HTTP/1.1 {status} {'OK' if status == 200 else 'Error'}\r\n"
                    f"Content-Type: application/hal+json\r\nContent-Length: {len(data)}\r\n\r\n"
                    .encode() + data)
                await writer.drain()
                if headers.get("connection", "").lower() == "close":
                    break
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError,
                ssl.SSLError, IndexError, ValueError):
            pass
        finally:
            writer.close()


async def main(port, cert, key, api_key, delay_ms):
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(cert, key)
    api = Api(api_key, delay_ms)
    server = await asyncio.start_server(api.serve, "127.0.0.1", port, ssl=tls, backlog=512)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], float(sys.argv[5])))
