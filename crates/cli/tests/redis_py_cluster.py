"""Drives a Mantle cluster with redis-py's RedisCluster (run by cluster_redis_py.rs).

Usage: python redis_py_cluster.py PORT [PORT...]; prints "ok" at the end.
"""
import sys

from redis.cluster import ClusterNode, RedisCluster

ports = [int(p) for p in sys.argv[1:]]
rc = RedisCluster(startup_nodes=[ClusterNode("127.0.0.1", ports[0])], decode_responses=True)
# The client learned the whole cluster from one seed node (CLUSTER SLOTS, COMMAND).
assert sorted(n.port for n in rc.get_nodes()) == sorted(ports), rc.get_nodes()
for i in range(500):
    assert rc.set(f"py:{i}", i)
for i in range(500):
    assert rc.get(f"py:{i}") == str(i), i
# Keys spread over every node.
owners = {rc.get_node_from_key(f"py:{i}").port for i in range(500)}
assert owners == set(ports), owners
# Multi-key commands: hash tags keep them in one slot; the non-atomic helpers split by slot.
assert rc.mset({"{u1}.a": "1", "{u1}.b": "2"})
assert rc.mget("{u1}.a", "{u1}.b") == ["1", "2"]
assert rc.mget_nonatomic([f"py:{i}" for i in range(20)]) == [str(i) for i in range(20)]
assert rc.exists("py:1") == 1
assert rc.delete("py:1") == 1
assert rc.get("py:1") is None
assert rc.set("py:ttl", "x", ex=100)
assert 0 < rc.ttl("py:ttl") <= 100
assert rc.keyslot("foo") == 12182
assert rc.cluster_keyslot("foo") == 12182
assert rc.ping() is True
print("ok")
