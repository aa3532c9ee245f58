//! CLOCK (FIFO-reinsertion, second chance) with libCacheSim's defaults: a 1-bit counter
//! (`n-bit-counter=1`, so the counter saturates at 1) and new objects start at 0
//! (`init-freq=0`). A hit raises the counter; eviction looks at the oldest object and, while
//! its counter is non-zero, decrements it and moves it to the head. Same as `Clock.c`.

use super::EvictionPolicy;
use crate::queue::Queue;
use crate::slab::{Node, Slot, NIL};

/// `(1 << n_bit_counter) - 1` with libCacheSim's default `n_bit_counter = 1`.
pub(crate) const MAX_FREQ: u32 = 1;

#[derive(Default)]
pub(crate) struct Clock {
    queue: Queue,
}

impl EvictionPolicy for Clock {
    #[inline]
    fn on_hit(&mut self, nodes: &mut [Node], slot: Slot) {
        let node = &mut nodes[slot as usize];
        let freq = node.meta();
        if freq < MAX_FREQ {
            node.set_meta(freq + 1);
        }
    }

    #[inline]
    fn on_insert(&mut self, nodes: &mut [Node], slot: Slot) {
        nodes[slot as usize].set_meta(0);
        self.queue.push_head(nodes, slot);
    }

    fn evict(&mut self, nodes: &mut [Node]) -> Slot {
        loop {
            let tail = self.queue.tail;
            if tail == NIL {
                return NIL;
            }
            let node = &mut nodes[tail as usize];
            let freq = node.meta();
            if freq == 0 {
                return self.queue.pop_tail(nodes);
            }
            node.set_meta(freq - 1);
            self.queue.move_to_head(nodes, tail);
        }
    }

    fn on_remove(&mut self, nodes: &mut [Node], slot: Slot) {
        self.queue.unlink(nodes, slot);
    }
}
