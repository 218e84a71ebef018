"""Take a leasehold lock from Python with redis-py: acquire (waiting up to 5 s for it), check
the fencing token, renew the lease, release.

    pip install redis
    python examples/python/lock.py redis://127.0.0.1:6379
"""

import sys
import uuid

import redis


def main(url: str) -> int:
    r = redis.Redis.from_url(url)
    owner = f"worker-{uuid.uuid4()}"

    token = r.execute_command("LOCK.ACQUIRE", "invoice:42", owner, 30000, "WAIT", 5000)
    if token is None:
        print("the lock stayed busy for 5 s")
        return 1
    print(f"acquired invoice:42 with fencing token {token}")

    # Before writing to the resource: do I still hold it, with this token?
    assert r.execute_command("LOCK.FENCE", "invoice:42", owner) == token
    # ... write to the resource, passing `token` along so it can reject stale writers ...
    assert r.execute_command("LOCK.RENEW", "invoice:42", owner, 30000) == 1

    released = r.execute_command("LOCK.RELEASE", "invoice:42", owner)
    print({1: "released", 0: "the lease had run out", -1: "someone else holds it"}[released])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "redis://127.0.0.1:6379"))
