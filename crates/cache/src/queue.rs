//! A doubly linked queue threaded through the slab's nodes by `u32` slots.
//!
//! The head holds the newest object and the tail the oldest, and `prev` points towards the
//! head, exactly as libCacheSim's `prepend_obj_to_head`/`q_tail` lists do: matching its
//! orientation keeps algorithms such as SIEVE, whose hand walks `prev` from the tail,
//! step-for-step identical.

use crate::slab::{Node, Slot, NIL};

#[derive(Clone, Copy, Debug)]
pub(crate) struct Queue {
    pub head: Slot,
    pub tail: Slot,
}

impl Default for Queue {
    fn default() -> Self {
        Queue {
            head: NIL,
            tail: NIL,
        }
    }
}

impl Queue {
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.tail == NIL
    }

    /// Links `slot` (currently unlinked) in front of the head.
    #[inline]
    pub fn push_head(&mut self, nodes: &mut [Node], slot: Slot) {
        let old_head = self.head;
        {
            let node = &mut nodes[slot as usize];
            node.prev = NIL;
            node.next = old_head;
        }
        if old_head == NIL {
            self.tail = slot;
        } else {
            nodes[old_head as usize].prev = slot;
        }
        self.head = slot;
    }

    /// Unlinks `slot`, which must be in this queue.
    #[inline]
    pub fn unlink(&mut self, nodes: &mut [Node], slot: Slot) {
        let Node { prev, next, .. } = nodes[slot as usize];
        if prev == NIL {
            self.head = next;
        } else {
            nodes[prev as usize].next = next;
        }
        if next == NIL {
            self.tail = prev;
        } else {
            nodes[next as usize].prev = prev;
        }
        let node = &mut nodes[slot as usize];
        node.prev = NIL;
        node.next = NIL;
    }

    /// Moves `slot`, which must be in this queue, to the head. Written out rather than as
    /// unlink + push: a node that is not the head has a `prev` and the queue a head, which
    /// takes two of the four branches off an LRU hit.
    #[inline]
    pub fn move_to_head(&mut self, nodes: &mut [Node], slot: Slot) {
        let old_head = self.head;
        if old_head == slot {
            return;
        }
        let Node { prev, next, .. } = nodes[slot as usize];
        nodes[prev as usize].next = next;
        if next == NIL {
            self.tail = prev;
        } else {
            nodes[next as usize].prev = prev;
        }
        let node = &mut nodes[slot as usize];
        node.prev = NIL;
        node.next = old_head;
        nodes[old_head as usize].prev = slot;
        self.head = slot;
    }

    /// Unlinks and returns the oldest node, or `NIL` when empty. Written out rather than as
    /// `unlink`: the tail has no `next`, which takes a branch and a store off every eviction.
    #[inline]
    pub fn pop_tail(&mut self, nodes: &mut [Node]) -> Slot {
        let tail = self.tail;
        if tail != NIL {
            let prev = nodes[tail as usize].prev;
            self.tail = prev;
            if prev == NIL {
                self.head = NIL;
            } else {
                nodes[prev as usize].next = NIL;
            }
            nodes[tail as usize].prev = NIL;
        }
        tail
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(n: u32) -> Vec<Node> {
        (0..n).map(|k| Node::detached(u64::from(k), 1)).collect()
    }

    fn order(q: &Queue, nodes: &[Node]) -> Vec<Slot> {
        let mut out = Vec::new();
        let mut s = q.head;
        while s != NIL {
            out.push(s);
            s = nodes[s as usize].next;
        }
        let mut back = Vec::new();
        let mut s = q.tail;
        while s != NIL {
            back.push(s);
            s = nodes[s as usize].prev;
        }
        back.reverse();
        assert_eq!(out, back, "forward and backward links disagree");
        out
    }

    #[test]
    fn push_unlink_move_pop() {
        let mut n = nodes(4);
        let mut q = Queue::default();
        assert!(q.is_empty());
        for s in 0..4 {
            q.push_head(&mut n, s);
        }
        assert_eq!(order(&q, &n), vec![3, 2, 1, 0]);
        q.move_to_head(&mut n, 0);
        assert_eq!(order(&q, &n), vec![0, 3, 2, 1]);
        q.unlink(&mut n, 2);
        assert_eq!(order(&q, &n), vec![0, 3, 1]);
        assert_eq!(q.pop_tail(&mut n), 1);
        assert_eq!(q.pop_tail(&mut n), 3);
        assert_eq!(q.pop_tail(&mut n), 0);
        assert_eq!(q.pop_tail(&mut n), NIL);
        assert!(q.is_empty());
    }

    /// `move_to_head` against a plain list, from every position, in queues of 1 to 5.
    #[test]
    fn move_to_head_matches_a_list_model() {
        for len in 1..=5u32 {
            for pos in 0..len {
                let mut n = nodes(len);
                let mut q = Queue::default();
                for s in 0..len {
                    q.push_head(&mut n, s);
                }
                let mut model: Vec<Slot> = (0..len).rev().collect();
                let slot = model.remove(pos as usize);
                model.insert(0, slot);
                q.move_to_head(&mut n, slot);
                assert_eq!(order(&q, &n), model, "len {len} pos {pos}");
                assert_eq!(n[slot as usize].prev, NIL);
            }
        }
    }
}
