"""redis-py's transactions against one `mantle serve` (run by cluster_redis_py.rs).

Usage: python redis_py_transactions.py PORT; prints "ok" at the end. Covers the default
pipeline() (MULTI/EXEC), pipeline(transaction=False), WATCH-based optimistic locking with
Redis.transaction() including a conflict that forces a retry, and FCALL from redis-py.
"""
import sys
import threading

import redis

port = int(sys.argv[1])
r = redis.Redis(host="127.0.0.1", port=port, decode_responses=True)
other = redis.Redis(host="127.0.0.1", port=port, decode_responses=True)

# The default pipeline is a MULTI/EXEC transaction.
p = r.pipeline()
p.set("py:a", "1").incr("py:n", 5).get("py:a").expire("py:a", 100)
assert p.execute() == [True, 5, "1", True]
assert 0 < r.ttl("py:a") <= 100

# A command failing at EXEC is its entry; the others apply (as in Redis).
r.set("py:text", "abc")
p = r.pipeline()
p.set("py:b", "2").incr("py:text")
try:
    p.execute()
    raise AssertionError("the INCR of text must fail")
except redis.ResponseError as e:
    assert "not an integer" in str(e), e
assert r.get("py:b") == "2"

# Without a transaction: plain pipelining.
p = r.pipeline(transaction=False)
for i in range(100):
    p.set(f"py:k{i}", i)
assert p.execute() == [True] * 100
assert r.mget([f"py:k{i}" for i in range(3)]) == ["0", "1", "2"]

# WATCH: the first attempt is spoiled by another client, the retry succeeds.
r.set("py:balance", 100)
attempts = []


def withdraw(pipe):
    balance = int(pipe.get("py:balance"))
    attempts.append(balance)
    if len(attempts) == 1:
        other.set("py:balance", 90)  # a concurrent change between WATCH and EXEC
    pipe.multi()
    pipe.set("py:balance", balance - 10)


r.transaction(withdraw, "py:balance")
assert attempts == [100, 90], attempts
assert r.get("py:balance") == "80"

# Many clients incrementing through WATCH loops lose no update.
r.set("py:counter", 0)


def bump(times):
    c = redis.Redis(host="127.0.0.1", port=port, decode_responses=True)
    for _ in range(times):
        c.transaction(
            lambda pipe: (
                lambda n: (pipe.multi(), pipe.set("py:counter", n + 1))
            )(int(pipe.get("py:counter"))),
            "py:counter",
        )


threads = [threading.Thread(target=bump, args=(50,)) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
assert r.get("py:counter") == "200", r.get("py:counter")

# Functions from redis-py, inside a pipeline transaction too.
r.function_load(
    "#!lua name=pylib\n"
    "redis.register_function('py_add', function(keys, args)\n"
    "  return redis.call('INCRBY', keys[1], args[1])\n"
    "end)",
    replace=True,
)
assert r.fcall("py_add", 1, "py:f", 3) == 3
p = r.pipeline()
p.fcall("py_add", 1, "py:f", 4).get("py:f")
assert p.execute() == [7, "7"]
print("ok")
