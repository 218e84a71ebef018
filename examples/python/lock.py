"""Take a leasehold lock from Python with the leasehold package on redis-py: acquire (waiting up
to 5 s for it), check the fencing token, renew the lease, release.

    pip install ./clients/python
    python examples/python/lock.py redis://127.0.0.1:6379
"""

import sys

import redis

import leasehold


def main(url: str) -> int:
    r = redis.Redis.from_url(url)
    lock = r.lock("invoice:42", timeout=30, blocking_timeout=5, lock_class=leasehold.Lock)
    if not lock.acquire():
        print("the lock stayed busy for 5 s")
        return 1
    print(f"acquired invoice:42 with fencing token {lock.fencing_token}")
    try:
        # Before writing to the resource: do I still hold it? Send the token along so the
        # resource can reject a holder whose lease ran out.
        assert lock.owned()
        # Reset the lease to 30 s. Like the grant, the renewal counts once the master's replicas
        # have it (NotReplicatedError otherwise; lock.lease_end then stays where it was).
        lock.reacquire()
    finally:
        lock.release()
    print("released")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "redis://127.0.0.1:6379"))
