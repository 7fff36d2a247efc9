"""Slack request signatures as slack_sdk computes and checks them.

Reads a JSON list of cases from stdin, each {"secret", "timestamp", "body",
"signature"} (the signature trawl computed), and writes one JSON object per case:

- generated: slack_sdk's signature of (timestamp, body) under the secret;
- accepts_trawl: slack_sdk accepts trawl's signature (clock at the timestamp);
- accepts_altered_body, accepts_other_timestamp, accepts_other_secret: the same
  signature over a body with one more byte, under the timestamp plus one, and
  checked with another secret;
- accepts_at_300s, accepts_at_301s: trawl's signature with the clock 300 and
  301 seconds after the timestamp (Slack's five-minute window).

Used by tests/tests/slack.rs; needs slack_sdk (requirements.txt).
"""

import json
import sys

from slack_sdk.signature import Clock, SignatureVerifier


class FixedClock(Clock):
    def __init__(self, now):
        self._now = now

    def now(self):
        return self._now


def check(secret, body, timestamp, signature, now):
    return SignatureVerifier(secret, clock=FixedClock(now)).is_valid(
        body=body, timestamp=str(timestamp), signature=signature
    )


out = []
for case in json.load(sys.stdin):
    secret, ts, body, sig = case["secret"], case["timestamp"], case["body"], case["signature"]
    verifier = SignatureVerifier(secret, clock=FixedClock(ts))
    out.append(
        {
            "generated": verifier.generate_signature(timestamp=str(ts), body=body),
            "accepts_trawl": check(secret, body, ts, sig, ts),
            "accepts_altered_body": check(secret, body + "x", ts, sig, ts),
            "accepts_other_timestamp": check(secret, body, ts + 1, sig, ts),
            "accepts_other_secret": check(secret + "x", body, ts, sig, ts),
            "accepts_at_300s": check(secret, body, ts, sig, ts + 300),
            "accepts_at_301s": check(secret, body, ts, sig, ts + 301),
        }
    )
json.dump(out, sys.stdout)
