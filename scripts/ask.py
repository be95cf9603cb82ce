"""Ask a running k3deploy endpoint one question, as a user would from the laptop.

usage: python scripts/ask.py INVENTORY [QUESTION]
Reads the endpoint's API key from k3deploy's 0600 key file (never from argv).
"""

import json
import sys
import urllib.request

from k3deploy import apikey, endpoint, inventory
from k3deploy.state import state_dir_for


def main() -> int:
    inv = inventory.load(sys.argv[1])
    question = sys.argv[2] if len(sys.argv) > 2 else "Explain expert parallelism in two sentences."
    key = apikey.load_or_create(inv, state_dir_for(inv.source, inv.cluster), create=False)
    body = {"model": inv.model.repo, "messages": [{"role": "user", "content": question}],
            "max_tokens": 256, "reasoning_effort": "low"}
    req = urllib.request.Request(endpoint.url(inv) + "/chat/completions",
                                 data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json",
                                          "Authorization": f"Bearer {key}"})
    with urllib.request.urlopen(req, timeout=120) as resp:
        reply = json.load(resp)
    message = reply["choices"][0]["message"]
    print(f"endpoint: {endpoint.url(inv)}")
    print(f"question: {question}")
    print(f"reasoning_content: {message.get('reasoning_content')}")
    print(f"content: {message.get('content')}")
    print(f"usage: {json.dumps(reply.get('usage'))}")
    return 0 if message.get("content") and message.get("reasoning_content") else 1


if __name__ == "__main__":
    sys.exit(main())
