//! LRU: a hit moves the object to the head; the victim is the tail (least recently used).
//! Same as libCacheSim's `LRU.c`.

use super::EvictionPolicy;
use crate::queue::Queue;
use crate::slab::{Node, Slot};

#[derive(Default)]
pub(crate) struct Lru {
    queue: Queue,
}

impl EvictionPolicy for Lru {
    #[inline]
    fn on_hit(&mut self, nodes: &mut [Node], slot: Slot) {
        self.queue.move_to_head(nodes, slot);
    }

    #[inline]
    fn on_insert(&mut self, nodes: &mut [Node], slot: Slot) {
        self.queue.push_head(nodes, slot);
    }

    #[inline]
    fn evict(&mut self, nodes: &mut [Node]) -> Slot {
        self.queue.pop_tail(nodes)
    }

    fn on_remove(&mut self, nodes: &mut [Node], slot: Slot) {
        self.queue.unlink(nodes, slot);
    }
}
