"""A stand-in OpenTelemetry collector for scripts/bench: accepts OTLP/HTTP exports on
/v1/traces, reads each request whole and answers 200 with an empty ExportTraceServiceResponse
(an empty protobuf message is zero bytes). It decodes nothing: the bench measures what
exporting costs the gateway, and the gateway counts what it exported and dropped
(gateway_trace_spans_total).

    python3 bench/otlp_sink.py PORT
"""

import http.server
import sys


class Sink(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        remaining = length
        while remaining > 0:
            chunk = self.rfile.read(min(remaining, 1 << 20))
            if not chunk:
                return
            remaining -= len(chunk)
        self.send_response(200 if self.path == "/v1/traces" else 404)
        self.send_header("content-type", "application/x-protobuf")
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


if __name__ == "__main__":
    http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Sink).serve_forever()
