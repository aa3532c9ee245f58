//! FIFO: hits change nothing; the victim is the oldest insertion. Same as libCacheSim's
//! `FIFO.c`.

use super::EvictionPolicy;
use crate::queue::Queue;
use crate::slab::{Node, Slot};

#[derive(Default)]
pub(crate) struct Fifo {
    queue: Queue,
}

impl EvictionPolicy for Fifo {
    #[inline]
    fn on_hit(&mut self, _nodes: &mut [Node], _slot: Slot) {}

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
