"""Verifies one notification with the official Python `standardwebhooks` library (an
implementation other than the gateway's signer and the Rust crate the receiver uses).

stdin: {"secret": "whsec_..", "id": "..", "timestamp": "..", "signature": "v1,.. v1,..",
        "body": "..."}
exit 0: verified; 1: refused; 2: the library is missing (pip install standardwebhooks).
"""
import json
import sys

try:
    from standardwebhooks.webhooks import Webhook
except ImportError:
    sys.stderr.write("the Python package standardwebhooks is missing: pip install standardwebhooks\n")
    sys.exit(2)

given = json.load(sys.stdin)
headers = {
    "webhook-id": given["id"],
    "webhook-timestamp": given["timestamp"],
    "webhook-signature": given["signature"],
}
try:
    Webhook(given["secret"]).verify(given["body"], headers)
except Exception as refused:  # the library raises WebhookVerificationError
    sys.stderr.write(f"refused: {refused}\n")
    sys.exit(1)
sys.exit(0)
