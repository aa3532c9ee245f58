//! SIEVE (Zhang et al., NSDI'24): a FIFO queue plus a hand. A hit only sets the object's
//! visited bit. To evict, the hand starts where it stopped last time (the tail at first),
//! clears visited bits while walking towards the head, wrapping to the tail, and evicts the
//! first unvisited object; the hand then rests on that object's newer neighbour. Objects are
//! never moved. Same as libCacheSim's `Sieve.c`, including where the hand goes when the
//! object under it is removed by the user.

use super::EvictionPolicy;
use crate::queue::Queue;
use crate::slab::{Node, Slot, NIL};

pub(crate) struct Sieve {
    queue: Queue,
    hand: Slot,
}

impl Default for Sieve {
    fn default() -> Self {
        Sieve {
            queue: Queue::default(),
            hand: NIL,
        }
    }
}

impl EvictionPolicy for Sieve {
    #[inline]
    fn on_hit(&mut self, nodes: &mut [Node], slot: Slot) {
        nodes[slot as usize].set_meta(1);
    }

    #[inline]
    fn on_insert(&mut self, nodes: &mut [Node], slot: Slot) {
        nodes[slot as usize].set_meta(0);
        self.queue.push_head(nodes, slot);
    }

    fn evict(&mut self, nodes: &mut [Node]) -> Slot {
        if self.queue.is_empty() {
            return NIL;
        }
        let mut slot = if self.hand == NIL {
            self.queue.tail
        } else {
            self.hand
        };
        while nodes[slot as usize].meta() > 0 {
            let node = &mut nodes[slot as usize];
            node.set_meta(0);
            slot = if node.prev == NIL {
                self.queue.tail
            } else {
                node.prev
            };
        }
        self.hand = nodes[slot as usize].prev;
        self.queue.unlink(nodes, slot);
        slot
    }

    fn on_remove(&mut self, nodes: &mut [Node], slot: Slot) {
        if self.hand == slot {
            self.hand = nodes[slot as usize].prev;
        }
        self.queue.unlink(nodes, slot);
    }
}
