"""Verifies webhook deliveries with the Standard Webhooks Python library (PyPI
`standardwebhooks`), a verifier written by others than the signer's authors' Rust crate.

Argument: JSON {"secret": "whsec_...", "deliveries": [{"headers": {...}, "body": "..."}]}.
Prints {"verified": N, "ids": [...]}; exits non-zero at the first delivery that fails."""

import json
import sys

from standardwebhooks.webhooks import Webhook


def main() -> None:
    config = json.loads(sys.argv[1])
    hook = Webhook(config["secret"])
    ids = []
    for delivery in config["deliveries"]:
        payload = hook.verify(delivery["body"], delivery["headers"])
        if payload["id"] != delivery["headers"]["webhook-id"]:
            raise SystemExit(f"webhook-id {delivery['headers']['webhook-id']} is not the body's id")
        ids.append(payload["id"])
    # A changed body must not verify.
    first = config["deliveries"][0]
    try:
        hook.verify(first["body"].replace("reliability", "Reliability"), first["headers"])
    except Exception:  # noqa: BLE001 - the library raises WebhookVerificationError
        pass
    else:
        raise SystemExit("a tampered body verified")
    print(json.dumps({"verified": len(ids), "ids": ids}))


if __name__ == "__main__":
    main()
